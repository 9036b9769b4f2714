/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_VMM_OPTIONS_INTERNAL_H
#define KILN_VMM_OPTIONS_INTERNAL_H

/*
 * Between options.c (the table and the options' own apply functions) and
 * options-parse.c (values by kind, the command line, JSON): callers see
 * options.h only.
 */
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/compiler.h"
#include "net/netcfg.h"
#include "vmm/config.h"

enum option_kind {
	OPTION_STRING, /* text as given; JSON: a string */
	OPTION_UINT,   /* decimal count up to max; JSON: an integer */
	OPTION_SIZE,   /* byte count (parse__size) up to max; JSON:
			* an integer, or a string with a suffix */
	OPTION_MIB,    /* MiB up to max: a plain count, or a byte count
			* with a suffix (parse__size) in whole MiB; JSON:
			* an integer, or a string as on the command line */
	OPTION_FLAG,   /* command line: no argument, true; JSON: a boolean */
	OPTION_CHOICE, /* one of choices[], as its index; JSON: a string */
	OPTION_JSON,   /* JSON only: the value as it is, for apply to walk */
	OPTION_IPV4,   /* "A.B.C.D"; JSON: a string */
	OPTION_CIDR,   /* "A.B.C.D/N"; JSON: a string */
	OPTION_MAC,    /* "xx:xx:xx:xx:xx:xx"; JSON: a string */
};

/* A value converted by its option's kind. */
union option_value {
	const char *s;	     /* OPTION_STRING */
	uint64_t u;	     /* OPTION_UINT, OPTION_SIZE, OPTION_MIB */
	bool b;		     /* OPTION_FLAG */
	unsigned int choice; /* OPTION_CHOICE: index into choices[] */
	json_t *json;	     /* OPTION_JSON */
	struct {
		uint32_t addr;	     /* network byte order */
		unsigned int prefix; /* OPTION_CIDR: bits */
	} ip;			     /* OPTION_IPV4, OPTION_CIDR */
	uint8_t mac[NET_MAC_LEN];    /* OPTION_MAC */
};

struct option_desc {
	const char *flag; /* --flag; NULL: JSON only */
	char short_flag;  /* -x as well; 0: none */
	/* --help's name for the argument, one line per form; NULL: none */
	const char *arg;
	/* JSON key; "section.key" inside an object; NULL: command line only */
	const char *key;
	const char *help; /* --help lines; NULL: not listed */
	enum option_kind kind;
	uint64_t max;		    /* OPTION_UINT, OPTION_SIZE, OPTION_MIB */
	const char *const *choices; /* OPTION_CHOICE, NULL-terminated */
	/*
	 * Stores the value; err receives "what: why". NULL: the value is
	 * assigned to the vm_config field at offset (FIELD()).
	 */
	int (*apply)(struct vm_config *c, const union option_value *v,
		     char *err, size_t len);
	size_t offset;
};

/* A command-line error buffer holds what a log line holds (lib/log.c). */
#define OPTIONS_ERR_LEN 1024
/* Where --help starts an option's description. */
#define HELP_COLUMN 20
/* getopt_long's value for table entry i (above any short option). */
#define OPTION_VAL_BASE 0x100

/* In --help order; options__nr entries, at most OPTIONS_MAX. */
#define OPTIONS_MAX 128
extern const struct option_desc options__table[];
extern const size_t options__nr;

/* The index of s in the NULL-terminated choices, or -1. */
int options__choice_index(const char *const *choices, const char *s);
/* *field freed and set to a copy of value: 0 or -ENOMEM. */
int __must_check options__replace_string(char **field, const char *value);

#endif
