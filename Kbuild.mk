# Kbuild.mk - shared flags and quiet rules for Kiln.
# Included by the top-level Makefile; nothing here builds on its own.

CC      ?= gcc
O       ?= build
PKGS    := liburing jansson libseccomp wolfssl

WARNINGS := -Wall -Wextra -Wformat=2 -Wformat-security -Wshadow \
	-Wstrict-prototypes -Wmissing-prototypes -Wold-style-definition \
	-Wpointer-arith -Wcast-align -Wwrite-strings -Wundef \
	-Wvla -Wimplicit-fallthrough -Wno-unused-parameter \
	-Wno-missing-field-initializers

HARDEN   := -fstack-protector-strong -D_FORTIFY_SOURCE=2 -fPIE \
	-fno-strict-aliasing
HARDEN_LD := -pie -Wl,-z,relro -Wl,-z,now -Wl,-z,noexecstack

CFLAGS   ?= -O2 -g
# A package pkg-config cannot find is named, and stops the build of anything
# that compiles (objects depend on pkg-check); `make deps` installs them.
# Goals that only install or clean (deps, clean) never need it.
PKG_MISSING := $(strip $(foreach p,$(PKGS),$(if $(shell pkg-config --exists $(p) && echo y),,$(p))))
KILN_CFLAGS := -std=gnu11 $(WARNINGS) -Werror $(HARDEN) -D_GNU_SOURCE \
	-I. -I$(O)/include \
	$(if $(PKG_MISSING),,$(shell pkg-config --cflags $(PKGS)))
KILN_LDLIBS := $(if $(PKG_MISSING),,$(shell pkg-config --libs $(PKGS))) -lpthread

# Defined here, but not the includer's default goal (make's first target).
kiln_default_goal := $(.DEFAULT_GOAL)
.PHONY: pkg-check
pkg-check:
	$(if $(PKG_MISSING),$(error pkg-config finds no $(PKG_MISSING) (Debian's -dev package missing?): run 'make deps'))
.DEFAULT_GOAL := $(kiln_default_goal)

ifeq ($(V),1)
Q :=
quiet = @true
else
Q := @
quiet = @printf '  %-6s %s\n'
endif

$(O)/obj/%.o: %.c | pkg-check
	$(quiet) CC $<
	$(Q)mkdir -p $(dir $@)
	$(Q)$(CC) $(KILN_CFLAGS) $(CFLAGS) -MMD -MP -c -o $@ $<
