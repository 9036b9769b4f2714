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
KILN_CFLAGS := -std=gnu11 $(WARNINGS) -Werror $(HARDEN) -D_GNU_SOURCE \
	-I. -I$(O)/include $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
KILN_LDLIBS := $(shell pkg-config --libs $(PKGS) 2>/dev/null) -lpthread

ifeq ($(V),1)
Q :=
quiet = @true
else
Q := @
quiet = @printf '  %-6s %s\n'
endif

$(O)/obj/%.o: %.c
	$(quiet) CC $<
	$(Q)mkdir -p $(dir $@)
	$(Q)$(CC) $(KILN_CFLAGS) $(CFLAGS) -MMD -MP -c -o $@ $<
