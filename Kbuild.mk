# Kbuild.mk - shared flags and quiet rules for Kiln.
# Included by the top-level Makefile; nothing here builds on its own.

CC      ?= gcc
O       ?= build
PKGS    := liburing jansson libseccomp wolfssl libnghttp2 libzstd zlib
# Linked only into what uses ebpf/ (BPF_LDLIBS), not into everything.
BPF_PKGS := libbpf

WARNINGS := -Wall -Wextra -Wformat=2 -Wformat-security -Wshadow \
	-Wstrict-prototypes -Wmissing-prototypes -Wold-style-definition \
	-Wpointer-arith -Wcast-align -Wwrite-strings -Wundef \
	-Wvla -Wimplicit-fallthrough -Wno-unused-parameter \
	-Wno-missing-field-initializers

HARDEN   := -fstack-protector-strong -D_FORTIFY_SOURCE=2 -fPIE \
	-fno-strict-aliasing
HARDEN_LD := -pie -Wl,-z,relro -Wl,-z,now -Wl,-z,noexecstack

CFLAGS   ?= -O2 -g

# SAN=1: everything the host runs (vmm, tools, unit tests) built with
# AddressSanitizer and UndefinedBehaviorSanitizer, which stop at the first
# finding (Documentation/fuzzing.md). The guest's programs are not.
# _FORTIFY_SOURCE's checked copies would hide accesses from ASan.
ifeq ($(SAN),1)
SAN_FLAGS := -fsanitize=address,undefined -fno-sanitize-recover=all \
	-fno-omit-frame-pointer
HARDEN   := $(filter-out -D_FORTIFY_SOURCE=2,$(HARDEN)) $(SAN_FLAGS)
HARDEN_LD += $(SAN_FLAGS)
endif
# A package pkg-config cannot find is named, and stops the build of anything
# that compiles (objects depend on pkg-check); `make deps` installs them.
# Goals that only install or clean (deps, clean) never need it.
PKG_MISSING := $(strip $(foreach p,$(PKGS) $(BPF_PKGS),$(if $(shell pkg-config --exists $(p) && echo y),,$(p))))
# Libraries Debian ships without a .pc file, as header:package: found by
# their header (the compiler's preprocessor looks), linked by name.
HDR_PKGS    := http_parser.h:libhttp-parser-dev
HDR_LDLIBS  := -lhttp_parser
HDR_MISSING := $(strip $(foreach d,$(HDR_PKGS),$(if $(shell printf '\043include <%s>\n' $(firstword $(subst :, ,$(d))) | $(CC) -E -x c - >/dev/null 2>&1 && echo y),,$(lastword $(subst :, ,$(d))))))
KILN_CFLAGS := -std=gnu11 $(WARNINGS) -Werror $(HARDEN) -D_GNU_SOURCE \
	-I. -I$(O)/include \
	$(if $(PKG_MISSING),,$(shell pkg-config --cflags $(PKGS)))
KILN_LDLIBS := $(if $(PKG_MISSING),,$(shell pkg-config --libs $(PKGS))) \
	$(HDR_LDLIBS) -lpthread
BPF_LDLIBS  := $(if $(PKG_MISSING),,$(shell pkg-config --libs $(BPF_PKGS)))
# The vmm links its libraries' archives (the same Debian -dev packages
# ship them): every start then maps one file,
# not twelve, and binds no symbols at load. In the harness that took
# ~65 ms off each start of the vmm (170 to 105 ms for `vmm --version`,
# /bin/true 80 ms; Documentation/benchmarks.md, "Snapshot"), which a
# restore pays as much as a cold boot. A library's security update
# needs a rebuild of the vmm. STATIC_LIBS=0 links them shared.
#
# libc and libm too, as a static PIE (still placed at a random address):
# no dynamic loader, and only the parts of libc the vmm calls are mapped,
# not all of libc.so.6 and libm.so.6; its relative relocations packed
# (DT_RELR, glibc 2.36), 1 KiB read at start instead of 112. That is most
# of what the monitor's RSS lost (benchmarks.md, "RSS by mapping").
# getaddrinfo is bound to vmm/static-libc.c (no NSS in the binary). A
# SAN=1 build keeps libc shared: ASan's runtime needs the loader.
STATIC_LIBS ?= 1
VMM_LD      := $(HARDEN_LD)
ifeq ($(STATIC_LIBS),1)
ifeq ($(SAN),1)
VMM_LDLIBS  := -Wl,-Bstatic \
	$(if $(PKG_MISSING),,$(shell pkg-config --libs --static $(PKGS) $(BPF_PKGS))) \
	$(HDR_LDLIBS) -Wl,-Bdynamic -lm -lpthread
else
VMM_LD      := $(filter-out -pie,$(HARDEN_LD)) -static-pie \
	-Wl,-z,pack-relative-relocs
VMM_LDLIBS  := \
	$(if $(PKG_MISSING),,$(shell pkg-config --libs --static $(PKGS) $(BPF_PKGS))) \
	$(HDR_LDLIBS) -lm -lpthread \
	-Wl,--wrap=getaddrinfo,--wrap=freeaddrinfo
endif
else
VMM_LDLIBS  := $(KILN_LDLIBS) $(BPF_LDLIBS)
endif

# BPF programs (ebpf/*.bpf.c): Debian's clang for the BPF target, then
# bpftool turns each object into a skeleton header, $(O)/include/ebpf/
# X.skel.h, which the loader includes. The uapi headers' <asm/...> live
# in the multiarch folder, which clang does not search for -target bpf.
CLANG   ?= clang
BPFTOOL ?= $(firstword $(shell command -v bpftool) /usr/sbin/bpftool)
# Programs are global functions without prototypes, by nature.
BPF_WARNINGS := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wpointer-arith \
	-Wundef -Wvla -Wimplicit-fallthrough -Wno-unused-parameter
BPF_CFLAGS := -O2 -g -target bpf $(BPF_WARNINGS) -Werror \
	-idirafter /usr/include/$(shell $(CC) -dumpmachine)
TOOLS_MISSING := $(strip $(foreach t,$(CLANG) $(BPFTOOL),$(if $(shell command -v $(t)),,$(t))))

# Defined here, but not the includer's default goal (make's first target).
kiln_default_goal := $(.DEFAULT_GOAL)
.PHONY: pkg-check
pkg-check:
	$(if $(PKG_MISSING),$(error pkg-config finds no $(PKG_MISSING) (Debian's -dev package missing?): run 'make deps'))
	$(if $(HDR_MISSING),$(error no header of $(HDR_MISSING) (Debian's package missing?): run 'make deps'))
	$(if $(TOOLS_MISSING),$(error no $(TOOLS_MISSING) (Debian's clang, bpftool): run 'make deps'))
.DEFAULT_GOAL := $(kiln_default_goal)

ifeq ($(V),1)
Q :=
quiet = @true
else
Q := @
quiet = @printf '  %-6s %s\n'
endif

# The flags every host object is built with, kept in $(O)/.cflags: an
# object (and a test, a tool) whose flags changed, say by SAN=1 on a tree
# built without, is rebuilt. The file is rewritten only when they differ.
# The vmm's libraries are in it too, so STATIC_LIBS relinks it.
KILN_FLAGS_FILE := $(O)/.cflags
kiln_flags := $(CC) $(KILN_CFLAGS) $(CFLAGS) $(HARDEN_LD) $(VMM_LD) $(VMM_LDLIBS)
ifneq ($(kiln_flags),$(shell cat $(KILN_FLAGS_FILE) 2>/dev/null))
$(shell mkdir -p $(O) && printf '%s\n' '$(kiln_flags)' >$(KILN_FLAGS_FILE))
endif

$(O)/obj/%.o: %.c $(KILN_FLAGS_FILE) | pkg-check
	$(quiet) CC $<
	$(Q)mkdir -p $(dir $@)
	$(Q)$(CC) $(KILN_CFLAGS) $(CFLAGS) -MMD -MP -c -o $@ $<

# Kept: the skeleton's input, and what bpftool or llvm-objdump look at.
.PRECIOUS: $(O)/ebpf/%.bpf.o
$(O)/ebpf/%.bpf.o: ebpf/%.bpf.c | pkg-check
	$(quiet) CLANG $<
	$(Q)mkdir -p $(dir $@)
	$(Q)$(CLANG) $(BPF_CFLAGS) -MMD -MP -c -o $@ $<

$(O)/include/ebpf/%.skel.h: $(O)/ebpf/%.bpf.o
	$(quiet) GEN $@
	$(Q)mkdir -p $(dir $@)
	$(Q)$(BPFTOOL) gen skeleton $< name $(subst -,_,$*)_bpf >$@.tmp
	$(Q)mv $@.tmp $@
