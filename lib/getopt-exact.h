/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_LIB_GETOPT_EXACT_H
#define KILN_LIB_GETOPT_EXACT_H

/*
 * getopt_long with exact names only, and one line per mistake. Shared by
 * the vmm (vmm/options.c) and vmmctl, which link nothing else in common,
 * hence in a header.
 *
 * glibc's getopt_long takes any unambiguous prefix of a long option, so a
 * mistyped or shortened name quietly means another option (`--timeout 5`
 * was `--timeout-ms 5`), and its own messages are prefixed with argv[0]
 * (the subcommand). getopt_exact__next() calls it with its messages off,
 * refuses any match whose name is not exactly the one given, and returns
 * '?' with one line in err for every mistake:
 *
 *	unknown option --memroy (did you mean --memory?)
 *	--cpus needs a value
 *	--verbose takes no value
 *	unknown option -x
 *
 * optstring must start with "+:" (stop at the first non-option; ':' for
 * a missing value), the caller's as getopt_long's otherwise.
 */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

/* Names longer than this get no suggestion. */
#define GETOPT_EXACT_NAME_MAX 64

/*
 * The edit distance between a[0..an) and b (insertions, deletions,
 * substitutions and swaps of neighbours, each 1: "memroy" is 1 from
 * "memory").
 */
static inline size_t getopt_exact__distance(const char *a, size_t an,
					    const char *b)
{
	size_t rows[3][GETOPT_EXACT_NAME_MAX + 1], bn = strlen(b), i, j;
	size_t *prev2 = rows[0], *prev = rows[1], *cur = rows[2], *t, d;

	if (an > GETOPT_EXACT_NAME_MAX || bn > GETOPT_EXACT_NAME_MAX)
		return (size_t)-1;
	for (j = 0; j <= bn; j++)
		prev[j] = j;
	for (i = 1; i <= an; i++) {
		cur[0] = i;
		for (j = 1; j <= bn; j++) {
			d = prev[j - 1] + (a[i - 1] != b[j - 1]);
			if (prev[j] + 1 < d)
				d = prev[j] + 1;
			if (cur[j - 1] + 1 < d)
				d = cur[j - 1] + 1;
			if (i > 1 && j > 1 && a[i - 1] == b[j - 2] &&
			    a[i - 2] == b[j - 1] && prev2[j - 2] + 1 < d)
				d = prev2[j - 2] + 1;
			cur[j] = d;
		}
		t = prev2;
		prev2 = prev;
		prev = cur;
		cur = t;
	}
	return prev[bn];
}

/*
 * The long option name[0..n) most likely meant, or NULL when none is
 * close: the shortest of those it is a prefix of ("--mem": memory), else
 * the nearest within 2 edits and fewer edits than it has letters.
 */
static inline const char *getopt_exact__nearest(const char *name, size_t n,
						const struct option *lo)
{
	const char *best = NULL;
	size_t best_d = (size_t)-1, d;

	for (; lo->name; lo++) {
		if (n && !strncmp(lo->name, name, n) &&
		    (!best || best_d || strlen(lo->name) < strlen(best))) {
			best = lo->name;
			best_d = 0;
			continue;
		}
		d = getopt_exact__distance(name, n, lo->name);
		if (d <= 2 && d < n && d < best_d) {
			best = lo->name;
			best_d = d;
		}
	}
	return best;
}

/* The entry named exactly name[0..n), or NULL. */
static inline const struct option *
getopt_exact__find(const char *name, size_t n, const struct option *lo)
{
	for (; lo->name; lo++)
		if (strlen(lo->name) == n && !strncmp(lo->name, name, n))
			return lo;
	return NULL;
}

/* "unknown option --NAME", with the nearest spelling when one is close. */
static inline int getopt_exact__unknown(const char *name, size_t n,
					const struct option *lo, char *err,
					size_t len)
{
	const char *near = getopt_exact__nearest(name, n, lo);

	if (near)
		snprintf(err, len, "unknown option --%.*s (did you mean --%s?)",
			 (int)n, name, near);
	else
		snprintf(err, len, "unknown option --%.*s", (int)n, name);
	return '?';
}

/*
 * The next option, as getopt_long returns it (optarg, optind likewise);
 * -1 at the end; '?' with err set for a bad one.
 */
static inline int getopt_exact__next(int argc, char *const argv[],
				     const char *optstring,
				     const struct option *lo, char *err,
				     size_t len)
{
	int at = optind, idx = -1, opt;
	const char *tok, *name;
	size_t n;

	opterr = 0;
	opt = getopt_long(argc, argv, optstring, lo, &idx);
	if (opt == -1)
		return -1;
	tok = at < argc ? argv[at] : "";
	/* A long option: its token is argv[at], never inside a cluster. */
	if (!strncmp(tok, "--", 2) && (idx >= 0 || opt == '?' || opt == ':')) {
		name = tok + 2;
		n = strcspn(name, "=");
		if (!getopt_exact__find(name, n, lo))
			return getopt_exact__unknown(name, n, lo, err, len);
		if (opt == ':') {
			snprintf(err, len, "--%.*s needs a value", (int)n,
				 name);
			return '?';
		}
		if (opt == '?') {
			snprintf(err, len, "--%.*s takes no value", (int)n,
				 name);
			return '?';
		}
		return opt;
	}
	if (opt == ':') {
		snprintf(err, len, "-%c needs a value", optopt);
		return '?';
	}
	if (opt == '?') {
		snprintf(err, len, "unknown option -%c", optopt);
		return '?';
	}
	return opt;
}

#endif
