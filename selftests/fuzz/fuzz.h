/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_SELFTESTS_FUZZ_H
#define KILN_SELFTESTS_FUZZ_H

/*
 * What the fuzz targets share (Documentation/fuzzing.md). Each file in
 * selftests/fuzz/ but replay.c is one target: it defines
 * LLVMFuzzerTestOneInput() and is linked two ways, by `make fuzz` with
 * clang's libFuzzer and sanitizers ($(O)/fuzz/NAME), and by `make
 * selftests` with replay.c's main ($(O)/selftests/fuzz_NAME), which runs
 * it once on every file of selftests/fuzz/corpus/NAME/ in the unit run.
 *
 * A target returns 0 whatever the input; what must hold for every input
 * is checked with fuzz_check(), which aborts, so both the fuzzer and the
 * replay see a broken invariant as a crash.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/log.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define fuzz_check(cond)                                                  \
	do {                                                              \
		if (!(cond)) {                                            \
			fprintf(stderr, "%s:%d: fuzz_check(%s) failed\n", \
				__FILE__, __LINE__, #cond);               \
			abort();                                          \
		}                                                         \
	} while (0)

/*
 * An input read as a series of values: a structured target takes its
 * choices (sizes, flags, which call) and its byte strings from it. Past
 * the end every value is 0 and every string empty, so any input works.
 */
struct fuzz_in {
	const uint8_t *p;
	size_t left;
};

static inline void fuzz_in__init(struct fuzz_in *in, const uint8_t *data,
				 size_t size)
{
	in->p = data;
	in->left = size;
}

static inline uint8_t fuzz_in__u8(struct fuzz_in *in)
{
	if (!in->left)
		return 0;
	in->left--;
	return *in->p++;
}

static inline uint16_t fuzz_in__u16(struct fuzz_in *in)
{
	uint16_t v = fuzz_in__u8(in);

	return (uint16_t)(v | fuzz_in__u8(in) << 8);
}

static inline uint32_t fuzz_in__u32(struct fuzz_in *in)
{
	uint32_t v = fuzz_in__u16(in);

	return v | (uint32_t)fuzz_in__u16(in) << 16;
}

/* Up to n bytes (fewer at the end): where they are, *len of them. */
static inline const uint8_t *fuzz_in__bytes(struct fuzz_in *in, size_t n,
					    size_t *len)
{
	const uint8_t *p = in->p;

	*len = n < in->left ? n : in->left;
	in->p += *len;
	in->left -= *len;
	return p;
}

/*
 * The targets' logs: the code under test may log what a hostile input
 * did (rate-limited); at the fuzzer's speed that is noise, so only
 * errors go through.
 */
static inline void fuzz__quiet(void)
{
	static bool done;

	if (!done) {
		log__set_level(LOG_ERR);
		done = true;
	}
}

#endif
