# Kiln - a microVM monitor on Linux KVM.
#
#   make          deps, then build vmm, vmmctl and the guest (all + guest):
#                 everything README.md's examples run but the root image
#   make all      build vmm, vmmctl and the tools, nothing else
#   make deps     install the Debian 12 packages Kiln needs (idempotent)
#   make guest    build the guest kernel and initramfs (cached outside the tree)
#   make image    build the debian-12-agent root image (cached outside the tree)
#   make run      deps + build + guest, then boot a VM and run `uname -a` in it
#   make test     deps + build + guest + image, then every selftest (unit + KVM)
#   make install  vmm, vmmctl, the guest, man pages, bash completion into
#                 DESTDIR/PREFIX (default /usr/local); make uninstall
#   make deb      kiln_VERSION_ARCH.deb here (Documentation/install.md)
#   make format   clang-format 14 over every tracked .c and .h, in place; make
#                 test fails while one is not formatted (tools/check-format)
#   make bench    boot benchmark against QEMU microvm (PVH and qboot), 1 and 4 vCPUs
#   make bench-blk  block I/O benchmark (fio on the bench image) against QEMU microvm, then qcow2 vs raw vs QEMU and cow vs persistent
#   make bench-fs   virtio-fs benchmark (metadata, sequential MB/s), vmm mapped and squash, against QEMU microvm + virtiofsd
#   make bench-net  network benchmark (iperf3 both ways, TCP round trips, through a policy) against QEMU microvm, vhost off and on
#   make bench-https  small HTTPS GETs through the vmm's interception against a plain granted TCP flow, same boot
#   make bench-agent  guest agent benchmark: exec round trip, stdout streaming, boot to agent ready
#   make bench-sdk  the TypeScript SDK against raw JSON-RPC (exec, streaming, boot)
#   make bench-snapshot  baselines: restore vs cold boot to agent ready, 256 MiB vs 2 GiB, Pss of 10 VMs, snapshot time and size
#   make fuzz     build the libFuzzer targets (clang, ASan, UBSan) as build/fuzz/NAME
#   make test-long  run each fuzz target for FUZZ_SECONDS (default 60), then the
#                 long KVM suites (kvm_*_long); fails on a crash or a failure
#   SAN=1         build everything the host runs with ASan and UBSan (Documentation/fuzzing.md)
#   STATIC_LIBS=0 link the vmm's libraries shared (default: their archives; Kbuild.mk)
#   V=1           show full commands
#   JOBS=N        compile jobs of the goals that build first (the default
#                 goal unless -j is given, run, test, bench*): default one
#                 per CPU

O          ?= build
KILN_CACHE ?= $(HOME)/.cache/kiln
export KILN_CACHE
MAKEFLAGS += --no-print-directory
JOBS       ?= $(shell nproc 2>/dev/null || echo 1)

include Kbuild.mk

# Where `make install` puts Kiln (Documentation/install.md); the vmm has
# the guest's directory under it compiled in (vmm/guest-default.c).
PREFIX     ?= /usr/local
# $(O)/include/kiln-paths.h and kiln-version.h, rewritten only when they
# change (tools/kiln-build-info).
$(shell tools/kiln-build-info $(O) $(PREFIX) $(STATIC_LIBS))

# Objects that need no KVM: the vmm links them, and so do the unit tests.
core-obj-y += lib/log.o
core-obj-y += lib/worker.o
core-obj-y += lib/thread-filter.o
core-obj-y += lib/resident.o
core-obj-y += lib/leak-check.o
core-obj-y += lib/base64.o
core-obj-y += lib/errf.o
core-obj-y += lib/bytequeue.o
core-obj-y += lib/fdbudget.o
core-obj-y += lib/hashtable.o
core-obj-y += lib/radix.o
core-obj-y += lib/siphash.o
core-obj-y += lib/iovec.o
core-obj-y += lib/warn.o
core-obj-y += lib/evloop.o
core-obj-y += lib/parse.o
core-obj-y += lib/sha256.o
core-obj-y += lib/nofile.o
core-obj-y += proto/tlv.o
core-obj-y += proto/reseed.o
core-obj-y += proto/mounts.o
core-obj-y += proto/env.o
core-obj-y += bootloader/loader.o
core-obj-y += bootloader/elf.o
core-obj-y += bootloader/bzimage.o
core-obj-y += bootloader/bootparams.o
core-obj-y += bootloader/pagetable.o
core-obj-y += bootloader/mptable.o
core-obj-y += bootloader/initrd.o
core-obj-y += devices/uart.o
core-obj-y += devices/virtio/guest-mem.o
core-obj-y += devices/virtio/queue.o
core-obj-y += devices/virtio/device.o
core-obj-y += devices/virtio/device-state.o
core-obj-y += devices/virtio/mmio.o
core-obj-y += devices/virtio/blk.o
core-obj-y += devices/virtio/vsock.o
core-obj-y += devices/virtio/vsock-conn.o
core-obj-y += devices/virtio/fs.o
core-obj-y += devices/virtio/net.o
core-obj-y += devices/virtio/net-io.o
core-obj-y += devices/block/disk.o
core-obj-y += devices/block/qcow2.o
core-obj-y += devices/block/qcow2-map.o
core-obj-y += devices/block/store-proto.o
core-obj-y += devices/block/store.o
core-obj-y += devices/block/store-cow.o
core-obj-y += devices/block/qcow2-write.o
core-obj-y += devices/fs/fuse.o
core-obj-y += devices/fs/fuse-ops.o
core-obj-y += devices/fs/virtual.o
core-obj-y += devices/fs/virtual-wire.o
core-obj-y += devices/fs/memfs.o
core-obj-y += devices/fs/memfs-store.o
core-obj-y += devices/fs/memfs-data.o
core-obj-y += devices/fs/passthrough.o
core-obj-y += devices/fs/passthrough-io.o
core-obj-y += devices/fs/passthrough-node.o
core-obj-y += devices/fs/passthrough-fds.o
core-obj-y += devices/fs/passthrough-mask.o
core-obj-y += devices/fs/passthrough-meta.o
# net/: the egress stack (Documentation/network.md); never sees struct vm.
core-obj-y += net/tap.o
core-obj-y += net/addr.o
core-obj-y += net/netcfg.o
core-obj-y += net/nsthread.o
core-obj-y += net/endpoint.o
core-obj-y += net/netns.o
core-obj-y += net/policy.o
core-obj-y += net/policy-parse.o
core-obj-y += net/bindings.o
core-obj-y += net/synmap.o
core-obj-y += net/dns-hook.o
core-obj-y += net/dns-msg.o
core-obj-y += net/dns-up.o
core-obj-y += net/dns.o
core-obj-y += net/hostaddr.o
core-obj-y += net/hook-msg.o
core-obj-y += net/hook.o
core-obj-y += net/http.o
core-obj-y += net/http1.o
core-obj-y += net/h2.o
core-obj-y += net/h2-mem.o
core-obj-y += net/tls-ca.o
core-obj-y += net/tls-conn.o
core-obj-y += net/intercept.o
core-obj-y += net/intercept-request.o
# snapshot/: the on-disk format, archive and baseline cache (Documentation/snapshots.md).
core-obj-y += snapshot/verified.o
core-obj-y += snapshot/file.o
core-obj-y += snapshot/state.o
core-obj-y += snapshot/load.o
core-obj-y += snapshot/archive.o
core-obj-y += snapshot/baseline.o
core-obj-y += vmm/config.o
core-obj-y += vmm/identity.o
core-obj-y += vmm/facts.o
core-obj-y += vmm/guest-default.o
core-obj-y += vmm/console-log.o
core-obj-y += vmm/metrics.o
core-obj-y += vmm/trace-startup.o
core-obj-y += vmm/options.o
core-obj-y += vmm/options-parse.o
core-obj-y += vmm/jail.o
# --isolation namespace's cgroup: its limits and freezer, unit-tested.
core-obj-y += vmm/isolate-ns-cgroup.o
core-obj-y += vmm/bus.o
core-obj-y += vmm/vm-state.o
core-obj-y += vmm/virtio-slots.o
core-obj-y += vmm/rootfs.o
core-obj-y += vmm/rootfs-cmd.o
core-obj-y += vmm/rootfs-flatten.o
core-obj-y += vmm/mounts.o
core-obj-y += vmm/api/server.o
core-obj-y += vmm/api/client.o
core-obj-y += vmm/api/params.o
core-obj-y += vmm/api/call.o
core-obj-y += vmm/api/agent.o
core-obj-y += vmm/api/reseed.o
core-obj-y += vmm/api/mounts.o
core-obj-y += vmm/api/json.o
core-obj-y += vmm/api/proc.o
core-obj-y += vmm/api/fs.o
core-obj-y += vmm/api/vm.o
core-obj-y += vmm/api/events.o
core-obj-y += vmm/api/container.o
core-obj-y += vmm/api/grant.o

# The rest of the vmm: KVM, the builder, the CLI, seccomp, the control socket.
obj-y += vmm/main.o
obj-y += vmm/kvm.o
obj-y += vmm/vm.o
obj-y += vmm/vm-net.o
# --isolation namespace: its network is vm-net.c's proxy on a veth.
obj-y += vmm/isolate-ns.o
obj-y += vmm/isolate-ns-root.o
obj-y += vmm/isolate-ns-fuse.o
obj-y += vmm/vm-run.o
obj-y += vmm/vm-pause.o
obj-y += vmm/virtio-attach.o
obj-y += vmm/vcpu.o
obj-y += vmm/vcpu-state.o
obj-y += vmm/snapshot.o
obj-y += vmm/restore.o
obj-y += vmm/baseline-vm.o
obj-y += vmm/cpuid.o
obj-y += vmm/seccomp.o
obj-y += vmm/control.o
obj-y += vmm/vm-metrics.o
obj-y += vmm/version.o
obj-y += vmm/static-libc.o
obj-y += devices/i8042.o
obj-y += devices/exit-dev.o
obj-y += devices/console.o

# The egress program and its loader (ebpf/, Documentation/network.md):
# linked, with libbpf, only into what uses them.
ebpf-obj-y += ebpf/loader.o
ebpf-obj-y += ebpf/relay.o
bpf-prog-y += egress
bpf-prog-y += relay
# The vmm's egress proxy (net/proxy*.c): on the loader, so with it.
ebpf-obj-y += net/proxy.o
ebpf-obj-y += net/proxy-ns.o
ebpf-obj-y += net/proxy-tcp.o
ebpf-obj-y += net/proxy-udp.o
ebpf-obj-y += net/status.o
ebpf-obj-y += net/synmap-egress.o
ebpf-obj-y += net/krelay.o

# vmmctl, the control socket's client: shares only the base64 code.
vmmctl-obj-y += tools/vmmctl.o
vmmctl-obj-y += lib/base64.o

unit-tests   := $(patsubst selftests/unit/%.c,$(O)/selftests/%,$(wildcard selftests/unit/*.c))
kvm-tests    := $(patsubst selftests/kvm/%.c,$(O)/selftests/kvm_%,$(wildcard selftests/kvm/*.c))

UNIT_OBJS := $(addprefix $(O)/obj/,$(core-obj-y))
VMM_OBJS  := $(UNIT_OBJS) $(addprefix $(O)/obj/,$(obj-y) $(ebpf-obj-y))
VMMCTL_OBJS := $(addprefix $(O)/obj/,$(vmmctl-obj-y))
EBPF_OBJS := $(addprefix $(O)/obj/,$(ebpf-obj-y))
BPF_SKELS := $(patsubst %,$(O)/include/ebpf/%.skel.h,$(bpf-prog-y))

.PHONY: all deps guest image run test bench clean selftests check-deps
# The default goal (`make`): what the README's examples need, the vmm,
# vmmctl and the guest (kernel, initramfs, test image), after the Debian
# packages as run and test do. The guest's kernel is cached in
# $(KILN_CACHE), keyed by its inputs, so a second make only checks it. A
# missing kernel, initramfs or image makes the vmm say which target
# builds it (vmm/options.c, Documentation/cli.md).
.PHONY: default
default: deps
	$(Q)$(MAKE) $(if $(filter -j%,$(MAKEFLAGS)),,-j$(JOBS)) all
	$(Q)$(MAKE) -f guest/guest.mk O=$(O)

all: $(O)/vmm $(O)/vmmctl $(O)/tools/fs-example-server $(EBPF_OBJS)
	@:

# The loader includes the skeletons; -MMD records that only once built.
$(EBPF_OBJS): $(BPF_SKELS)

$(O)/vmm: $(VMM_OBJS)
	$(quiet) LD $@
	$(Q)$(CC) $(VMM_LD) -o $@ $^ $(VMM_LDLIBS)

$(O)/vmmctl: $(VMMCTL_OBJS)
	$(quiet) LD $@
	$(Q)$(CC) $(HARDEN_LD) -o $@ $^ $(shell pkg-config --libs jansson)

# containerd's runtime v2 shim (Documentation/containerd.md), in Go on
# Debian's containerd shim library: go-build compiles it and its unit
# tests offline from /usr/share/gocode, Go's cache in $(KILN_CACHE). Go
# decides what to recompile; make only asks it when a source changed.
SHIM_SRCS := $(wildcard tools/containerd-shim-kiln-v2/*.go) tools/containerd-shim-kiln-v2/go-build
$(O)/containerd-shim-kiln-v2 $(O)/obj/containerd-shim-kiln-v2.test &: $(SHIM_SRCS)
	$(quiet) GO $(O)/containerd-shim-kiln-v2
	$(Q)tools/containerd-shim-kiln-v2/go-build $(O)

all: $(O)/containerd-shim-kiln-v2

# Its unit tests as a host suite (TAP, one test per Go test).
$(O)/selftests/containerd_shim: selftests/unit/containerd_shim.sh $(O)/obj/containerd-shim-kiln-v2.test
	$(Q)install -D -m 0755 $< $@

selftests: $(O)/selftests/containerd_shim

# The example server for virtual mounts (Documentation/virtual-fs.md),
# which selftests/unit/fs_virtual.c runs.
$(O)/tools/fs-example-server: tools/fs-example-server.c $(KILN_FLAGS_FILE) | pkg-check
	$(quiet) CC $<
	$(Q)mkdir -p $(dir $@)
	$(Q)$(CC) $(KILN_CFLAGS) $(CFLAGS) $(HARDEN_LD) -MMD -MP -MF $@.d \
		-o $@ $<

$(O)/selftests/fs_virtual: $(O)/tools/fs-example-server

# Tests of ebpf/ (and of the proxy on it; and the API tests, for
# vm.status's net object) link its objects and libbpf on
# top of the core.
ebpf-tests := $(filter $(O)/selftests/ebpf_% $(O)/selftests/proxy $(O)/selftests/intercept $(O)/selftests/api,$(unit-tests))
$(ebpf-tests): $(EBPF_OBJS)
$(ebpf-tests): TEST_OBJS = $(EBPF_OBJS)
$(ebpf-tests): TEST_LDLIBS = $(BPF_LDLIBS)
# The interception's tests run the proxy thread under the vmm's filter;
# the filter's own test runs calls under it.
$(O)/selftests/intercept $(O)/selftests/proxy $(O)/selftests/seccomp: $(O)/obj/vmm/seccomp.o
$(O)/selftests/intercept $(O)/selftests/proxy $(O)/selftests/seccomp: TEST_OBJS += $(O)/obj/vmm/seccomp.o

# The agent's container code, linked into its host test as the guest
# links it into init.
AGENT_CONTAINER_OBJS := $(O)/obj/guest/agent/container.o $(O)/obj/guest/agent/conn.o
$(O)/selftests/agent_container: $(AGENT_CONTAINER_OBJS)
$(O)/selftests/agent_container: TEST_OBJS = $(AGENT_CONTAINER_OBJS)

# Test binaries are compiled and linked in one step; -MMD still gives each
# its header list ($@.d), so touching a header rebuilds the tests using it.
$(O)/selftests/%: selftests/unit/%.c $(UNIT_OBJS) $(KILN_FLAGS_FILE) | pkg-check
	$(quiet) CC $<
	$(Q)mkdir -p $(dir $@)
	$(Q)$(CC) $(KILN_CFLAGS) $(CFLAGS) $(HARDEN_LD) -MMD -MP -MF $@.d \
		-o $@ $< $(UNIT_OBJS) $(TEST_OBJS) $(KILN_LDLIBS) $(TEST_LDLIBS)

# KVM selftests carry freestanding guest code: built without the stack
# protector so the guest functions need no TLS canary, and without the
# sanitizers (SAN=1), whose checks the guest code could not call.
$(O)/selftests/kvm_%: selftests/kvm/%.c $(KILN_FLAGS_FILE) | pkg-check
	$(quiet) CC $<
	$(Q)mkdir -p $(dir $@)
	$(Q)$(CC) $(filter-out $(SAN_FLAGS),$(KILN_CFLAGS) $(CFLAGS)) \
		-fno-stack-protector $(filter-out $(SAN_FLAGS),$(HARDEN_LD)) \
		$(KVM_TEST_LDFLAGS) -MMD -MP -MF $@.d -o $@ $< \
		$(KVM_TEST_OBJS) $(KILN_LDLIBS)

# The hostile-guest tests (selftests/kvm/hostile.c) run the real devices
# in the test process: they link the core objects, and with SAN=1 those
# carry the sanitizers, whose runtime the link then needs. The test's own
# code, its guest code with it, is compiled without them: a step of its
# own, as the link's -fsanitize would instrument it too.
$(O)/selftests/kvm_hostile: selftests/kvm/hostile.c $(UNIT_OBJS) $(KILN_FLAGS_FILE) | pkg-check
	$(quiet) CC $<
	$(Q)mkdir -p $(dir $@) $(O)/obj/selftests
	$(Q)$(CC) $(filter-out $(SAN_FLAGS),$(KILN_CFLAGS) $(CFLAGS)) \
		-fno-stack-protector -MMD -MP -MF $@.d -MT $@ -c \
		-o $(O)/obj/selftests/kvm_hostile.o $<
	$(Q)$(CC) $(filter-out $(SAN_FLAGS),$(KILN_CFLAGS) $(CFLAGS)) \
		$(HARDEN_LD) -o $@ $(O)/obj/selftests/kvm_hostile.o \
		$(UNIT_OBJS) $(KILN_LDLIBS)

# The control for the hostile notify flood (Documentation/harness.md): a
# KVM test guest with no Kiln code under it, a host program built like the
# KVM tests (this rule wins over the helpers' static one below).
$(O)/selftests/helpers/exit-flood: selftests/helpers/exit-flood.c $(KILN_FLAGS_FILE) | pkg-check
	$(quiet) CC $<
	$(Q)mkdir -p $(dir $@)
	$(Q)$(CC) $(filter-out $(SAN_FLAGS),$(KILN_CFLAGS) $(CFLAGS)) \
		-fno-stack-protector $(filter-out $(SAN_FLAGS),$(HARDEN_LD)) \
		-MMD -MP -MF $@.d -o $@ $< $(KILN_LDLIBS)

selftests: $(unit-tests) $(kvm-tests) $(O)/vmm $(O)/selftests/helpers/exit-flood
	@:

# The guest sides of KVM tests (vsock-peer, fs-probe, net-probe, posix-conform)
# and of bench-fs:
# static programs, each packed as an extra initramfs archive (cat
# initramfs.cpio X.cpio) with /bin/X. Deterministic like the guest's own
# archives. Helpers live in selftests/helpers/, where run_all.sh does not
# take them for suites.
define static_cc
	$(quiet) CC $<
	$(Q)mkdir -p $(dir $@)
	$(Q)$(CC) -std=gnu11 $(WARNINGS) -Werror -O2 -D_GNU_SOURCE -static \
		-MMD -MP -MF $@.d -o $@ $<
endef

define bin_cpio
	$(quiet) CPIO $@
	$(Q)rm -rf $@.root && mkdir -p $@.root/bin
	$(Q)install -m 0755 $< $@.root/bin/$(notdir $<)
	$(Q)touch -h -d @0 $@.root/bin $@.root/bin/$(notdir $<)
	$(Q)(cd $@.root && printf 'bin\nbin/$(notdir $<)\n' | \
		cpio --quiet -o -H newc --owner=0:0 --reproducible) >$@.tmp
	$(Q)rm -rf $@.root && mv $@.tmp $@
endef

$(O)/selftests/helpers/%: selftests/helpers/%.c
	$(static_cc)

.PRECIOUS: $(O)/selftests/helpers/%
$(O)/selftests/helpers/%.cpio: $(O)/selftests/helpers/%
	$(bin_cpio)

selftests: $(O)/selftests/helpers/vsock-peer.cpio $(O)/selftests/helpers/fs-probe.cpio \
	$(O)/selftests/helpers/net-probe.cpio $(O)/selftests/helpers/posix-conform.cpio \
	$(O)/selftests/helpers/hostile-agent.cpio $(O)/selftests/helpers/cpuid-dump.cpio

# hostile-agent frames with the agent's own encoder (proto/tlv.c).
$(O)/selftests/helpers/hostile-agent: selftests/helpers/hostile-agent.c proto/tlv.c
	$(quiet) CC $<
	$(Q)mkdir -p $(dir $@)
	$(Q)$(CC) -std=gnu11 $(WARNINGS) -Werror -O2 -D_GNU_SOURCE -I. -static \
		-MMD -MP -MF $@.d -o $@ $^

# The HTTPS upstream that speaks HTTP/2 alone (selftests/kvm/net.c): a
# host program, not a guest's, on nghttp2 and wolfSSL like the vmm, so
# built as the unit tests are (this rule wins over the static one above).
$(O)/selftests/helpers/h2-upstream: selftests/helpers/h2-upstream.c $(KILN_FLAGS_FILE) | pkg-check
	$(quiet) CC $<
	$(Q)mkdir -p $(dir $@)
	$(Q)$(CC) $(KILN_CFLAGS) $(CFLAGS) $(HARDEN_LD) -MMD -MP -MF $@.d \
		-o $@ $< $(KILN_LDLIBS)

selftests: $(O)/selftests/helpers/h2-upstream

# The guest side of the virtio-fs benchmark (tools/bench-fs), built and
# packed like the helpers above, as /bin/bench-fs-guest.
$(O)/tools/bench-fs-guest: tools/bench-fs-guest.c
	$(static_cc)

$(O)/tools/bench-fs-guest.cpio: $(O)/tools/bench-fs-guest
	$(bin_cpio)

# The guest agent built as a host program on a Unix socket (--unix PATH),
# which selftests/unit/agent.c runs; the guest links the same sources
# into init (guest/guest.mk).
agent-host-obj-y += guest/agent/host.o
agent-host-obj-y += guest/agent/agent.o
agent-host-obj-y += guest/agent/conn.o
agent-host-obj-y += guest/agent/proc.o
agent-host-obj-y += guest/agent/fs.o
agent-host-obj-y += guest/agent/facts.o
agent-host-obj-y += guest/agent/reseed.o
agent-host-obj-y += guest/agent/mounts.o
agent-host-obj-y += guest/agent/container.o
agent-host-obj-y += guest/init/net.o
agent-host-obj-y += proto/tlv.o
agent-host-obj-y += proto/reseed.o
agent-host-obj-y += proto/mounts.o
agent-host-obj-y += proto/env.o
AGENT_HOST_OBJS := $(addprefix $(O)/obj/,$(agent-host-obj-y))

$(O)/guest/kiln-agent-host: $(AGENT_HOST_OBJS)
	$(quiet) LD $@
	$(Q)mkdir -p $(dir $@)
	$(Q)$(CC) $(HARDEN_LD) -o $@ $^

selftests: $(O)/guest/kiln-agent-host
-include $(AGENT_HOST_OBJS:.o=.d)

# PID 1 of a namespace sandbox (vmm --isolation namespace, vmm/isolate-ns.c):
# the agent's sources built static, like init (the image's libc is not
# the host's), from the sources at once like hostile-agent.
agent-ns-src-y := guest/agent/ns.c \
	$(patsubst %.o,%.c,$(filter-out guest/agent/host.o,$(agent-host-obj-y)))
$(O)/guest/kiln-agent-ns: $(agent-ns-src-y)
	$(quiet) CC $@
	$(Q)mkdir -p $(dir $@)
	$(Q)$(CC) -std=gnu11 $(WARNINGS) -Werror -O2 -D_GNU_SOURCE -I. -static \
		-MMD -MP -MF $@.d -o $@ $(agent-ns-src-y)

all: $(O)/guest/kiln-agent-ns
-include $(O)/guest/kiln-agent-ns.d

# Fuzzing (Documentation/fuzzing.md): each selftests/fuzz/NAME.c but the
# replay driver is a libFuzzer target. `make fuzz` builds them with
# Debian's clang, libFuzzer, ASan and UBSan as $(O)/fuzz/NAME, over the
# core objects built again the same way ($(O)/fuzz/obj/); `make
# test-long` runs each for FUZZ_SECONDS. The unit run replays each
# target's corpus (selftests/fuzz/corpus/NAME/: seeds and every crash
# found) with $(O)/selftests/fuzz_NAME, the target built by $(CC) on
# selftests/fuzz/replay.c's main.
fuzz-targets := $(filter-out replay,$(patsubst selftests/fuzz/%.c,%,$(wildcard selftests/fuzz/*.c)))
FUZZ_SECONDS ?= 60
FUZZ_SAN    := -fsanitize=address,undefined -fno-sanitize-recover=all \
	-fno-omit-frame-pointer
# clang's -Wcast-align flags every container_of and every cast into
# page-aligned guest memory (gcc's says nothing on x86); UBSan checks the
# alignment of what is actually read, at run time, instead.
FUZZ_CFLAGS := $(filter-out -D_FORTIFY_SOURCE=2 $(SAN_FLAGS),$(KILN_CFLAGS)) \
	-Wno-cast-align -O1 -g $(FUZZ_SAN)
FUZZ_OBJS   := $(addprefix $(O)/fuzz/obj/,$(core-obj-y))
fuzz-bins   := $(addprefix $(O)/fuzz/,$(fuzz-targets))
fuzz-replays := $(addprefix $(O)/selftests/fuzz_,$(fuzz-targets))

.PHONY: fuzz test-long
# Only the targets name them: kept, not removed as intermediates.
.SECONDARY: $(FUZZ_OBJS)
fuzz: $(fuzz-bins)
	@:

$(O)/fuzz/obj/%.o: %.c | pkg-check
	$(quiet) CLANG $<
	$(Q)mkdir -p $(dir $@)
	$(Q)$(CLANG) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -MMD -MP \
		-c -o $@ $<

$(O)/fuzz/%: selftests/fuzz/%.c $(FUZZ_OBJS) | pkg-check
	$(quiet) CLANG $<
	$(Q)mkdir -p $(dir $@)
	$(Q)$(CLANG) $(FUZZ_CFLAGS) -fsanitize=fuzzer -MMD -MP -MF $@.d \
		-o $@ $< $(FUZZ_OBJS) $(FUZZ_TARGET_OBJS) $(KILN_LDLIBS)

$(O)/selftests/fuzz_%: selftests/fuzz/%.c selftests/fuzz/replay.c \
		$(UNIT_OBJS) $(KILN_FLAGS_FILE) | pkg-check
	$(quiet) CC $<
	$(Q)mkdir -p $(dir $@)
	$(Q)$(CC) $(KILN_CFLAGS) $(CFLAGS) $(HARDEN_LD) -MMD -MP -MF $@.d \
		-DFUZZ_CORPUS='"$(CURDIR)/selftests/fuzz/corpus/$*"' \
		-o $@ $< selftests/fuzz/replay.c $(UNIT_OBJS) \
		$(FUZZ_TARGET_OBJS) $(KILN_LDLIBS)

# agent_conn serves the stream as the guest agent does: it links the
# agent's own objects (not its main, guest/agent/host.o; proto/ is in
# the core), built each way like the core's.
fuzz-agent-obj-y := $(filter-out guest/agent/host.o proto/%,$(agent-host-obj-y))
FUZZ_AGENT_OBJS   := $(addprefix $(O)/fuzz/obj/,$(fuzz-agent-obj-y))
REPLAY_AGENT_OBJS := $(addprefix $(O)/obj/,$(fuzz-agent-obj-y))
$(O)/fuzz/agent_conn: $(FUZZ_AGENT_OBJS)
$(O)/fuzz/agent_conn: FUZZ_TARGET_OBJS = $(FUZZ_AGENT_OBJS)
$(O)/selftests/fuzz_agent_conn: $(REPLAY_AGENT_OBJS)
$(O)/selftests/fuzz_agent_conn: FUZZ_TARGET_OBJS = $(REPLAY_AGENT_OBJS)

selftests: $(fuzz-replays)

# Each target for FUZZ_SECONDS from its corpus; fails on a crash, whose
# input selftests/fuzz/run.sh names (keep it in the corpus with the fix).
# Then the long KVM suites (kvm_*_long: selftests/lib.sh) in one harness
# run; fails when one of them does.
test-long: deps
	$(Q)$(MAKE) fuzz
	$(Q)FUZZ_SECONDS=$(FUZZ_SECONDS) selftests/fuzz/run.sh $(O) $(fuzz-targets)
	$(Q)$(MAKE) -j$(JOBS) all selftests
	$(Q)$(MAKE) -f guest/guest.mk O=$(O)
	$(Q)guest/images/build-debian.sh $(O)
	$(Q)tools/vmtest --timeout 7200 selftests/run_kvm.sh $(O) \
		$$(bash -c '. selftests/lib.sh && kvm_long_suites "$$1"' - $(O))

deps:
	$(Q)tools/install-deps

# tools/check-format --fix: the files it would flag, formatted in place.
.PHONY: format
format:
	$(Q)tools/check-format --fix

guest: deps
	$(Q)$(MAKE) -f guest/guest.mk O=$(O)

# Prints its own "IMAGE" line, and only when it has to build. Then the
# image as an ES module package, $(O)/images/debian-12-agent/
# (@kiln/sandbox-image-debian-12-agent: sdk/README.md, "Image packages").
image: deps
	$(Q)guest/images/build-debian.sh $(O)
	$(Q)guest/images/image-package.sh $(O)/images/debian-12-agent.json

run: deps
	$(Q)$(MAKE) -j$(JOBS) all
	$(Q)$(MAKE) -f guest/guest.mk O=$(O)
	$(Q)tools/vmtest $(O)/vmm run --kernel $(O)/guest/vmlinux \
		--initrd $(O)/guest/initramfs.cpio -- uname -a

test: deps
	$(Q)$(MAKE) -j$(JOBS) all selftests
	$(Q)$(MAKE) -f guest/guest.mk O=$(O)
	$(Q)guest/images/build-debian.sh $(O)
	$(Q)guest/images/image-package.sh $(O)/images/debian-12-agent.json
	$(Q)tools/sdk-build $(O)
	$(Q)selftests/run_all.sh $(O)

bench: deps
	$(Q)$(MAKE) -j$(JOBS) all
	$(Q)$(MAKE) -f guest/guest.mk O=$(O)
	$(Q)tools/bench-boot --cpus 1,4 --devices $(O)

# The bench image (debian-12-bench: the agent image plus fio) is cached
# outside the tree like the agent image; the script prints its own line.
.PHONY: bench-blk
bench-blk: deps
	$(Q)$(MAKE) -j$(JOBS) all
	$(Q)$(MAKE) -f guest/guest.mk O=$(O)
	$(Q)guest/images/build-debian.sh $(O) bench
	$(Q)tools/bench-blk $(O)
	$(Q)tools/bench-blk --set layers $(O)

# virtio-fs: the guest program rides in an extra initramfs archive; QEMU's
# side needs /usr/lib/qemu/virtiofsd (Debian's qemu-system-common). The
# shared directories go on an ext4 made for the run (mkfs.ext4 from
# e2fsprogs, a loop device: root, which the harness is), which holds the
# user.* xattrs of vmm's ownership "mapped"; tmpfs before Linux 6.6 holds
# none, and there the mapped column would be skipped.
.PHONY: bench-fs
bench-fs: deps
	$(Q)$(MAKE) -j$(JOBS) all $(O)/tools/bench-fs-guest.cpio
	$(Q)$(MAKE) -f guest/guest.mk O=$(O)
	$(Q)tools/bench-fs --host-fs ext4 $(O)

# The network benchmark boots the bench image too (iperf3 and python3 in
# it); the host's iperf3 (make deps) serves as the upstream.
.PHONY: bench-net
bench-net: deps
	$(Q)$(MAKE) -j$(JOBS) all
	$(Q)$(MAKE) -f guest/guest.mk O=$(O)
	$(Q)guest/images/build-debian.sh $(O) bench
	$(Q)tools/bench-net $(O)

# The HTTPS interception benchmark boots the bench image too (python3 in
# it); openssl makes its test CA, tools/bench-https-rr.py is its upstream.
.PHONY: bench-https
bench-https: deps
	$(Q)$(MAKE) -j$(JOBS) all
	$(Q)$(MAKE) -f guest/guest.mk O=$(O)
	$(Q)guest/images/build-debian.sh $(O) bench
	$(Q)tools/bench-https $(O)

# Boots the kiln-test image (built by the guest step) with vmm start and
# times the guest agent through the control socket.
.PHONY: bench-agent
bench-agent: deps
	$(Q)$(MAKE) -j$(JOBS) all
	$(Q)$(MAKE) -f guest/guest.mk O=$(O)
	$(Q)tools/bench-agent $(O)

# The TypeScript SDK against raw JSON-RPC (tools/bench-agent-client.py) on
# the kiln-test image, in one harness run (Documentation/benchmarks.md,
# "SDK benchmark"). Needs Node.js 20 or later.
.PHONY: bench-sdk
bench-sdk: deps
	$(Q)$(MAKE) -j$(JOBS) all
	$(Q)$(MAKE) -f guest/guest.mk O=$(O)
	$(Q)tools/sdk-build $(O)
	$(Q)tools/bench-sdk $(O)

# Boots the kiln-test image read-only (what a snapshot restores) with and
# without --baseline-cache, then restores an initramfs guest under vmm and
# QEMU microvm side by side (Documentation/benchmarks.md, "Snapshot and
# baseline benchmark").
.PHONY: bench-snapshot
bench-snapshot: deps
	$(Q)$(MAKE) -j$(JOBS) all
	$(Q)$(MAKE) -f guest/guest.mk O=$(O)
	$(Q)tools/bench-snapshot $(O)

# make install, uninstall and deb (Documentation/install.md): the files
# tools/kiln-install lists, under DESTDIR and PREFIX; the man pages and
# the bash completion are generated (tools/gen-docs, Debian's pandoc)
# from the binaries' --help, which their option tables write, and from
# Documentation/. The guest must have been built (make, or make guest).
MAN_PAGES   := $(addprefix $(O)/man/,vmm.1 vmmctl.1 kiln-api.7)
COMPLETIONS := $(addprefix $(O)/completion/,vmm vmmctl)

.PHONY: install uninstall man completion deb
man: $(MAN_PAGES)
	@:

completion: $(COMPLETIONS)
	@:

# The FILES section names PREFIX's guest directory: kiln-paths.h has it.
$(MAN_PAGES) &: $(O)/vmm $(O)/vmmctl Documentation/cli.md Documentation/api.md \
		tools/gen-docs VERSION $(O)/include/kiln-paths.h
	$(quiet) GEN $(O)/man
	$(Q)tools/gen-docs man $(O) $$(cat VERSION) $(PREFIX)

$(COMPLETIONS) &: $(O)/vmm $(O)/vmmctl tools/gen-docs
	$(quiet) GEN $(O)/completion
	$(Q)tools/gen-docs completion $(O)

install: all man completion
	$(Q)tools/kiln-install install $(O) "$(DESTDIR)" $(PREFIX)

uninstall:
	$(Q)tools/kiln-install uninstall $(O) "$(DESTDIR)" $(PREFIX)

# kiln_VERSION_ARCH.deb here, from dpkg-buildpackage on a copy of the
# tracked files in $(O)/deb/kiln (debian/rules, tools/kiln-deb).
deb:
	$(Q)tools/install-deps deb
	$(Q)tools/kiln-deb $(O)

# The install's file list against the docs', the man page against
# --help, the completion against the option table (a host suite).
$(O)/selftests/install_layout: selftests/unit/install_layout.sh
	$(Q)install -D -m 0755 $< $@

selftests: $(O)/selftests/install_layout $(MAN_PAGES) $(COMPLETIONS)

# The SDK's scenarios under --isolation namespace, on the host (a host
# suite; skipped without root, Node.js, the built SDK or the image).
$(O)/selftests/sdk_ns: selftests/unit/sdk_ns.sh
	$(Q)install -D -m 0755 $< $@

selftests: $(O)/selftests/sdk_ns

# The TypeScript SDK (sdk/README.md): npm ci once per package-lock.json
# (cached in $(KILN_CACHE)), tsc, and its unit tests as the host suite
# $(O)/selftests/sdk_unit. Needs Node.js 20 or later.
.PHONY: sdk
sdk:
	$(Q)tools/sdk-build $(O)

clean:
	$(Q)rm -rf $(O)

-include $(VMM_OBJS:.o=.d)
-include $(VMMCTL_OBJS:.o=.d)
-include $(EBPF_OBJS:.o=.d) $(patsubst %,$(O)/ebpf/%.bpf.d,$(bpf-prog-y))
-include $(wildcard $(O)/selftests/*.d $(O)/selftests/helpers/*.d $(O)/tools/*.d)
-include $(wildcard $(O)/fuzz/*.d) $(FUZZ_OBJS:.o=.d) $(FUZZ_AGENT_OBJS:.o=.d)
