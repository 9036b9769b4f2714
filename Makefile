# Kiln - a microVM monitor on Linux KVM.
#
#   make          build build/vmm
#   make deps     install the Debian 12 packages Kiln needs (idempotent)
#   make guest    build the guest kernel and initramfs (cached outside the tree)
#   make image    build the debian-12-agent root image (cached outside the tree)
#   make run      deps + build + guest, then boot a VM and run `uname -a` in it
#   make test     deps + build + guest + image, then every selftest (unit + KVM)
#   make bench    boot benchmark against QEMU microvm
#   make bench-blk  block I/O benchmark (fio on the bench image) against QEMU microvm
#   make bench-fs   virtio-fs benchmark (metadata, sequential MB/s) against QEMU microvm + virtiofsd
#   make bench-agent  guest agent benchmark: exec round trip, stdout streaming, boot to agent ready
#   V=1           show full commands

O          ?= build
KILN_CACHE ?= $(HOME)/.cache/kiln
export KILN_CACHE
MAKEFLAGS += --no-print-directory

include Kbuild.mk

obj-y += vmm/main.o
obj-y += vmm/config.o
obj-y += vmm/kvm.o
obj-y += vmm/vm.o
obj-y += vmm/vcpu.o
obj-y += vmm/cpuid.o
obj-y += vmm/bus.o
obj-y += vmm/log.o
obj-y += vmm/worker.o
obj-y += vmm/seccomp.o
obj-y += vmm/api.o
obj-y += vmm/api-base64.o
obj-y += guest/agent/tlv.o
obj-y += devices/uart.o
obj-y += devices/i8042.o
obj-y += devices/exit-dev.o
obj-y += devices/console.o
obj-y += devices/virtio/guest-mem.o
obj-y += devices/virtio/queue.o
obj-y += devices/virtio/mmio.o
obj-y += devices/virtio/blk.o
obj-y += devices/virtio/vsock.o
obj-y += devices/virtio/fs.o
obj-y += devices/fs/fuse.o
obj-y += devices/block/disk.o
obj-y += devices/fs/virtual.o
obj-y += devices/fs/memfs.o
obj-y += devices/fs/passthrough.o
obj-y += vmm/rootfs.o
obj-y += vmm/control.o
obj-y += vmm/mounts.o
obj-y += bootloader/loader.o
obj-y += bootloader/elf.o
obj-y += bootloader/bzimage.o
obj-y += bootloader/bootparams.o
obj-y += bootloader/pagetable.o
obj-y += bootloader/mptable.o
obj-y += bootloader/initrd.o

# Objects the unit tests link against: everything that needs no KVM.
unit-obj-y += bootloader/loader.o
unit-obj-y += bootloader/elf.o
unit-obj-y += bootloader/bzimage.o
unit-obj-y += bootloader/bootparams.o
unit-obj-y += bootloader/pagetable.o
unit-obj-y += bootloader/mptable.o
unit-obj-y += bootloader/initrd.o
unit-obj-y += vmm/config.o
unit-obj-y += vmm/log.o
unit-obj-y += vmm/worker.o
unit-obj-y += vmm/bus.o
unit-obj-y += devices/uart.o
unit-obj-y += devices/virtio/guest-mem.o
unit-obj-y += devices/virtio/queue.o
unit-obj-y += devices/virtio/mmio.o
unit-obj-y += devices/virtio/blk.o
unit-obj-y += devices/virtio/vsock.o
unit-obj-y += devices/virtio/fs.o
unit-obj-y += devices/fs/fuse.o
unit-obj-y += devices/block/disk.o
unit-obj-y += devices/fs/virtual.o
unit-obj-y += devices/fs/memfs.o
unit-obj-y += devices/fs/passthrough.o
unit-obj-y += vmm/rootfs.o
unit-obj-y += vmm/mounts.o
unit-obj-y += vmm/api.o
unit-obj-y += vmm/api-base64.o
unit-obj-y += guest/agent/tlv.o

# vmmctl, the control socket's client: shares only the base64 code.
vmmctl-obj-y += tools/vmmctl.o
vmmctl-obj-y += vmm/api-base64.o

unit-tests   := $(patsubst selftests/unit/%.c,$(O)/selftests/%,$(wildcard selftests/unit/*.c))
kvm-tests    := $(patsubst selftests/kvm/%.c,$(O)/selftests/kvm_%,$(wildcard selftests/kvm/*.c))

VMM_OBJS  := $(addprefix $(O)/obj/,$(obj-y))
UNIT_OBJS := $(addprefix $(O)/obj/,$(unit-obj-y))
VMMCTL_OBJS := $(addprefix $(O)/obj/,$(vmmctl-obj-y))

.PHONY: all deps guest image run test bench clean selftests check-deps
all: $(O)/vmm $(O)/vmmctl $(O)/tools/fs-example-server
	@:

$(O)/vmm: $(VMM_OBJS)
	$(quiet) LD $@
	$(Q)$(CC) $(HARDEN_LD) -o $@ $^ $(KILN_LDLIBS)

$(O)/vmmctl: $(VMMCTL_OBJS)
	$(quiet) LD $@
	$(Q)$(CC) $(HARDEN_LD) -o $@ $^ $(shell pkg-config --libs jansson)

# The example server for virtual mounts (Documentation/virtual-fs.md),
# which selftests/unit/fs_virtual.c runs.
$(O)/tools/fs-example-server: tools/fs-example-server.c
	$(quiet) CC $<
	$(Q)mkdir -p $(dir $@)
	$(Q)$(CC) $(KILN_CFLAGS) $(CFLAGS) $(HARDEN_LD) -o $@ $<

$(O)/selftests/fs_virtual: $(O)/tools/fs-example-server

$(O)/selftests/%: selftests/unit/%.c $(UNIT_OBJS) selftests/kselftest.h selftests/fake_kernel.h selftests/spawn.h selftests/testutil.h selftests/jsonrpc_client.h
	$(quiet) CC $<
	$(Q)mkdir -p $(dir $@)
	$(Q)$(CC) $(KILN_CFLAGS) $(CFLAGS) $(HARDEN_LD) -o $@ $< $(UNIT_OBJS) $(KILN_LDLIBS)

# KVM selftests carry freestanding guest code: built without the stack
# protector so the guest functions need no TLS canary.
$(O)/selftests/kvm_%: selftests/kvm/%.c selftests/kselftest.h selftests/kvm/harness_watch.h selftests/kvm/kvm_util.h selftests/kvm/vmm_util.h selftests/spawn.h selftests/jsonrpc_client.h
	$(quiet) CC $<
	$(Q)mkdir -p $(dir $@)
	$(Q)$(CC) $(KILN_CFLAGS) $(CFLAGS) -fno-stack-protector $(HARDEN_LD) -o $@ $< $(KILN_LDLIBS)

selftests: $(unit-tests) $(kvm-tests) $(O)/vmm
	@:

# The guest sides of KVM tests (vsock-peer, fs-probe) and of bench-fs:
# static programs, each packed as an extra initramfs archive (cat
# initramfs.cpio X.cpio) with /bin/X. Deterministic like the guest's own
# archives. Helpers live in selftests/helpers/, where run_all.sh does not
# take them for suites.
define static_cc
	$(quiet) CC $<
	$(Q)mkdir -p $(dir $@)
	$(Q)$(CC) -std=gnu11 $(WARNINGS) -Werror -O2 -D_GNU_SOURCE -static \
		-o $@ $<
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

selftests: $(O)/selftests/helpers/vsock-peer.cpio $(O)/selftests/helpers/fs-probe.cpio

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
agent-host-obj-y += guest/agent/tlv.o
AGENT_HOST_OBJS := $(addprefix $(O)/obj/,$(agent-host-obj-y))

$(O)/guest/kiln-agent-host: $(AGENT_HOST_OBJS)
	$(quiet) LD $@
	$(Q)mkdir -p $(dir $@)
	$(Q)$(CC) $(HARDEN_LD) -o $@ $^

selftests: $(O)/guest/kiln-agent-host
$(O)/selftests/agent: selftests/agent_client.h
-include $(AGENT_HOST_OBJS:.o=.d)

deps:
	$(Q)tools/install-deps

guest: deps
	$(Q)$(MAKE) -f guest/guest.mk O=$(O)

# Prints its own "IMAGE" line, and only when it has to build.
image: deps
	$(Q)guest/images/build-debian.sh $(O)

run: deps
	$(Q)$(MAKE) all
	$(Q)$(MAKE) -f guest/guest.mk O=$(O)
	$(Q)tools/vmtest $(O)/vmm run --kernel $(O)/guest/vmlinux \
		--initrd $(O)/guest/initramfs.cpio -- uname -a

test: deps
	$(Q)$(MAKE) all selftests
	$(Q)$(MAKE) -f guest/guest.mk O=$(O)
	$(Q)guest/images/build-debian.sh $(O)
	$(Q)selftests/run_all.sh $(O)

bench: deps
	$(Q)$(MAKE) all
	$(Q)$(MAKE) -f guest/guest.mk O=$(O)
	$(Q)tools/bench-boot $(O)

# The bench image (debian-12-bench: the agent image plus fio) is cached
# outside the tree like the agent image; the script prints its own line.
.PHONY: bench-blk
bench-blk: deps
	$(Q)$(MAKE) all
	$(Q)$(MAKE) -f guest/guest.mk O=$(O)
	$(Q)guest/images/build-debian.sh $(O) bench
	$(Q)tools/bench-blk $(O)

# virtio-fs: the guest program rides in an extra initramfs archive; QEMU's
# side needs /usr/lib/qemu/virtiofsd (Debian's qemu-system-common).
.PHONY: bench-fs
bench-fs: deps
	$(Q)$(MAKE) all $(O)/tools/bench-fs-guest.cpio
	$(Q)$(MAKE) -f guest/guest.mk O=$(O)
	$(Q)tools/bench-fs $(O)

# Boots the kiln-test image (built by the guest step) with vmm start and
# times the guest agent through the control socket.
.PHONY: bench-agent
bench-agent: deps
	$(Q)$(MAKE) all
	$(Q)$(MAKE) -f guest/guest.mk O=$(O)
	$(Q)tools/bench-agent $(O)

clean:
	$(Q)rm -rf $(O)

-include $(VMM_OBJS:.o=.d)
-include $(VMMCTL_OBJS:.o=.d)
