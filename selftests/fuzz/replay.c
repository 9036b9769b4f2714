// SPDX-License-Identifier: GPL-2.0
/*
 * replay - a fuzz target's corpus, once, in the unit run (selftests/fuzz/
 * fuzz.h). `fuzz_NAME [PATH...]` runs LLVMFuzzerTestOneInput on each
 * file, or each file of each directory, given; with none, on every file
 * of FUZZ_CORPUS (selftests/fuzz/corpus/NAME, where the seeds and every
 * crash ever found are kept). TAP: one line per file; a crash or a
 * broken fuzz_check() ends the suite with its signal, so run_all.sh
 * counts it failed. Each input is read into a buffer of exactly its size,
 * so that a sanitizer (SAN=1) sees a read past its end.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "selftests/fuzz/fuzz.h"

#ifndef FUZZ_CORPUS
#error "FUZZ_CORPUS: the target's corpus directory, set by the Makefile"
#endif

#define REPLAY_MAX_INPUT (16U << 20) /* libFuzzer's own inputs are far less */

static int read_input(const char *path, uint8_t **out, size_t *len)
{
	struct stat st;
	uint8_t *buf;
	FILE *f;
	size_t n;

	f = fopen(path, "rb");
	if (!f)
		return -errno;
	if (fstat(fileno(f), &st) || st.st_size > REPLAY_MAX_INPUT) {
		fclose(f);
		return -EFBIG;
	}
	/* malloc(0) may be NULL: an empty input gets a 1-byte buffer. */
	buf = malloc(st.st_size ? (size_t)st.st_size : 1);
	if (!buf) {
		fclose(f);
		return -ENOMEM;
	}
	n = fread(buf, 1, st.st_size, f);
	fclose(f);
	if (n != (size_t)st.st_size) {
		free(buf);
		return -EIO;
	}
	*out = buf;
	*len = n;
	return 0;
}

/* The files to replay: each path, or each regular file in it (sorted). */
struct list {
	char **paths;
	size_t nr, cap;
};

static int list_add(struct list *l, const char *dir, const char *name)
{
	char **grown;
	char *p;

	if (l->nr == l->cap) {
		l->cap = l->cap ? l->cap * 2 : 64;
		grown = realloc(l->paths, l->cap * sizeof(*grown));
		if (!grown)
			return -ENOMEM;
		l->paths = grown;
	}
	if (asprintf(&p, "%s%s%s", dir, name ? "/" : "", name ? name : "") < 0)
		return -ENOMEM;
	l->paths[l->nr++] = p;
	return 0;
}

static int only_files(const struct dirent *d)
{
	return d->d_name[0] != '.';
}

static int list_path(struct list *l, const char *path)
{
	struct dirent **ents;
	struct stat st;
	int n, i, ret = 0;

	if (stat(path, &st))
		return -errno;
	if (!S_ISDIR(st.st_mode))
		return list_add(l, path, NULL);
	n = scandir(path, &ents, only_files, alphasort);
	if (n < 0)
		return -errno;
	for (i = 0; i < n; i++) {
		if (!ret)
			ret = list_add(l, path, ents[i]->d_name);
		free(ents[i]);
	}
	free(ents);
	return ret;
}

int main(int argc, char **argv)
{
	struct list l = { 0 };
	const char *name;
	uint8_t *buf = NULL;
	size_t len = 0, i;
	int ret, fails = 0;

	for (i = 1; i < (size_t)argc || (argc < 2 && i == 1); i++) {
		const char *path = argc < 2 ? FUZZ_CORPUS : argv[i];

		ret = list_path(&l, path);
		if (ret) {
			printf("TAP version 13\n1..1\nnot ok 1 %s: %s\n", path,
			       strerror(-ret));
			return 1;
		}
	}
	printf("TAP version 13\n1..%zu\n", l.nr);
	fflush(stdout);
	for (i = 0; i < l.nr; i++) {
		name = strrchr(l.paths[i], '/');
		name = name ? name + 1 : l.paths[i];
		ret = read_input(l.paths[i], &buf, &len);
		if (ret) {
			printf("not ok %zu %s: %s\n", i + 1, name,
			       strerror(-ret));
			fails++;
		} else {
			LLVMFuzzerTestOneInput(buf, len);
			free(buf);
			printf("ok %zu %s\n", i + 1, name);
		}
		fflush(stdout);
		free(l.paths[i]);
	}
	free(l.paths);
	return fails ? 1 : 0;
}
