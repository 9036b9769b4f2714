# guest/guest.mk - the Kiln guest: kernel, init and initramfs.
#
#   make -f guest/guest.mk O=build      from the top directory
#
# Produces $(O)/guest/{init,initramfs.cpio,vmlinux,bzImage}. The kernel is
# built by guest/build-kernel.sh into ${KILN_CACHE:-~/.cache/kiln}, keyed by
# its inputs; it runs on every make because only it can tell whether the
# linux-source package changed, and on a cache hit it only refreshes links.

O ?= build
G := $(O)/guest

# Shared warning list and quiet/V=1 machinery.
include Kbuild.mk

# init is PID 1 in an initramfs with no libc: static, no PIE.
GUEST_CFLAGS := -std=gnu11 $(WARNINGS) -Werror -O2 -D_GNU_SOURCE -static

BUSYBOX ?= /bin/busybox
export BUSYBOX

.PHONY: all kernel
all: $(G)/init $(G)/initramfs.cpio kernel

$(G)/init: guest/init/init.c guest/guest.mk
	$(quiet) CC guest/init/init.c
	$(Q)mkdir -p $(G)
	$(Q)$(CC) $(GUEST_CFLAGS) -MMD -MP -o $@ $<

$(G)/initramfs.cpio: $(G)/init guest/mkinitramfs.sh $(BUSYBOX)
	$(quiet) CPIO $@
	$(Q)guest/mkinitramfs.sh $(G)/init $@

# Prints its own "KERNEL" line, and only when it has to build.
kernel:
	$(Q)guest/build-kernel.sh $(G)

-include $(G)/init.d
