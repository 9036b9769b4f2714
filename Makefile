# Kiln - a microVM monitor on Linux KVM.
#
#   make          build build/vmm
#   make deps     install the Debian 12 packages Kiln needs (idempotent)
#   make guest    build the guest kernel and initramfs (cached outside the tree)
#   make image    build the debian-12-agent root image (cached outside the tree)
#   make run      deps + build + guest, then boot a VM and run `uname -a` in it
#   make test     deps + build + guest, then every selftest (unit + KVM)
#   make bench    boot benchmark against QEMU microvm
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
obj-y += vmm/seccomp.o
obj-y += devices/uart.o
obj-y += devices/i8042.o
obj-y += devices/exit-dev.o
obj-y += devices/console.o
obj-y += devices/virtio/guest-mem.o
obj-y += devices/virtio/queue.o
obj-y += devices/virtio/mmio.o
obj-y += devices/virtio/blk.o
obj-y += devices/block/disk.o
obj-y += vmm/rootfs.o
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
unit-obj-y += vmm/bus.o
unit-obj-y += devices/uart.o
unit-obj-y += devices/virtio/guest-mem.o
unit-obj-y += devices/virtio/queue.o
unit-obj-y += devices/virtio/mmio.o
unit-obj-y += devices/virtio/blk.o
unit-obj-y += devices/block/disk.o
unit-obj-y += vmm/rootfs.o

unit-tests   := $(patsubst selftests/unit/%.c,$(O)/selftests/%,$(wildcard selftests/unit/*.c))
kvm-tests    := $(patsubst selftests/kvm/%.c,$(O)/selftests/kvm_%,$(wildcard selftests/kvm/*.c))

VMM_OBJS  := $(addprefix $(O)/obj/,$(obj-y))
UNIT_OBJS := $(addprefix $(O)/obj/,$(unit-obj-y))

.PHONY: all deps guest image run test bench clean selftests check-deps
all: $(O)/vmm
	@:

$(O)/vmm: $(VMM_OBJS)
	$(quiet) LD $@
	$(Q)$(CC) $(HARDEN_LD) -o $@ $^ $(KILN_LDLIBS)

$(O)/selftests/%: selftests/unit/%.c $(UNIT_OBJS) selftests/kselftest.h selftests/fake_kernel.h selftests/spawn.h selftests/testutil.h
	$(quiet) CC $<
	$(Q)mkdir -p $(dir $@)
	$(Q)$(CC) $(KILN_CFLAGS) $(CFLAGS) $(HARDEN_LD) -o $@ $< $(UNIT_OBJS) $(KILN_LDLIBS)

# KVM selftests carry freestanding guest code: built without the stack
# protector so the guest functions need no TLS canary.
$(O)/selftests/kvm_%: selftests/kvm/%.c selftests/kselftest.h selftests/kvm/kvm_util.h selftests/kvm/vmm_util.h selftests/spawn.h
	$(quiet) CC $<
	$(Q)mkdir -p $(dir $@)
	$(Q)$(CC) $(KILN_CFLAGS) $(CFLAGS) -fno-stack-protector $(HARDEN_LD) -o $@ $< $(KILN_LDLIBS)

selftests: $(unit-tests) $(kvm-tests) $(O)/vmm
	@:

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
	$(Q)selftests/run_all.sh $(O)

bench: deps
	$(Q)$(MAKE) all
	$(Q)$(MAKE) -f guest/guest.mk O=$(O)
	$(Q)tools/bench-boot $(O)

clean:
	$(Q)rm -rf $(O)

-include $(VMM_OBJS:.o=.d)
