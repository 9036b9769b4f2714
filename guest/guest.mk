# guest/guest.mk - the Kiln guest: kernel, init and initramfs.
#
#   make -f guest/guest.mk O=build      from the top directory
#
# Produces $(O)/guest/{init,initramfs.cpio,e2fsck.cpio,vmlinux,bzImage} and
# $(O)/images/kiln-test.json. The kernel is built by guest/build-kernel.sh
# into ${KILN_CACHE:-~/.cache/kiln}, keyed by its inputs; it runs on every
# make because only it can tell whether the linux-source package changed,
# and on a cache hit it only refreshes links. The test image works the same
# way (guest/images/build-test-image.sh), for the same reason.

O ?= build
G := $(O)/guest

# Shared warning list and quiet/V=1 machinery.
include Kbuild.mk

# init is PID 1 in an initramfs with no libc: static, no PIE. It carries
# the guest agent (guest/agent/, shared with the vmm and with the host
# build kiln-agent-host), whose headers are included from the top.
GUEST_CFLAGS := -std=gnu11 $(WARNINGS) -Werror -O2 -D_GNU_SOURCE -static -I.

init-obj-y += guest/init/init.o
init-obj-y += guest/init/mounts.o
init-obj-y += guest/init/env.o
init-obj-y += guest/init/net.o
init-obj-y += guest/init/trust.o
init-obj-y += guest/agent/agent.o
init-obj-y += guest/agent/conn.o
init-obj-y += guest/agent/proc.o
init-obj-y += guest/agent/fs.o
init-obj-y += guest/agent/facts.o
init-obj-y += guest/agent/reseed.o
init-obj-y += guest/agent/mounts.o
init-obj-y += guest/agent/container.o
init-obj-y += proto/tlv.o
init-obj-y += proto/reseed.o
init-obj-y += proto/mounts.o
init-obj-y += proto/env.o
INIT_OBJS := $(addprefix $(G)/obj/,$(init-obj-y))

BUSYBOX ?= /bin/busybox
export BUSYBOX
# Debian's e2fsck-static: needs no libraries in the initramfs.
E2FSCK ?= /sbin/e2fsck.static

.PHONY: all kernel test-image pins
all: $(G)/init $(G)/initramfs.cpio $(G)/e2fsck.cpio kernel test-image pins

$(G)/obj/%.o: %.c guest/guest.mk
	$(quiet) CC $<
	$(Q)mkdir -p $(dir $@)
	$(Q)$(CC) $(GUEST_CFLAGS) -MMD -MP -c -o $@ $<

$(G)/init: $(INIT_OBJS)
	$(quiet) LD $@
	$(Q)$(CC) $(GUEST_CFLAGS) -o $@ $^

$(G)/initramfs.cpio: $(G)/init guest/mkinitramfs.sh $(BUSYBOX)
	$(quiet) CPIO $@
	$(Q)guest/mkinitramfs.sh $(G)/init $@

# A second archive with /sbin/e2fsck, for tests that check a root disk
# from the initramfs (kiln.root=none): cat initramfs.cpio e2fsck.cpio.
# Deterministic like initramfs.cpio: sorted, owner 0:0, mtime 0.
$(G)/e2fsck.cpio: $(E2FSCK) guest/guest.mk
	$(quiet) CPIO $@
	$(Q)rm -rf $@.root && mkdir -p $@.root/sbin
	$(Q)install -m 0755 $(E2FSCK) $@.root/sbin/e2fsck
	$(Q)touch -h -d @0 $@.root/sbin $@.root/sbin/e2fsck
	$(Q)(cd $@.root && printf 'sbin\nsbin/e2fsck\n' | \
		cpio --quiet -o -H newc --owner=0:0 --reproducible) >$@.tmp
	$(Q)rm -rf $@.root && mv $@.tmp $@

# Prints its own "KERNEL" line, and only when it has to build.
kernel:
	$(Q)guest/build-kernel.sh $(G)

# $(G)/pins.json: the sha256 of the kernel and the initramfs as built, which
# the TypeScript SDK checks before it boots them (sdk/README.md, "Locating
# Kiln"). Rewritten only when a digest changed.
pins: kernel $(G)/initramfs.cpio
	$(Q)printf '{\n  "vmlinux": "sha256:%s",\n  "bzImage": "sha256:%s",\n  "initramfs.cpio": "sha256:%s"\n}\n' \
		$$(sha256sum $(G)/vmlinux $(G)/bzImage $(G)/initramfs.cpio | cut -c1-64) >$(G)/pins.json.tmp
	$(Q)if cmp -s $(G)/pins.json.tmp $(G)/pins.json; then rm $(G)/pins.json.tmp; \
		else mv $(G)/pins.json.tmp $(G)/pins.json; fi

# kiln-test.ext4 in the cache, $(O)/images/kiln-test.json here; prints its
# own "IMAGE" line, and only when it has to build.
test-image:
	$(Q)guest/images/build-test-image.sh $(O)

-include $(INIT_OBJS:.o=.d)
