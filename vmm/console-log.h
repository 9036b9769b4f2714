/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_CONSOLE_LOG_H
#define KILN_CONSOLE_LOG_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "lib/compiler.h"
#include "lib/log.h"

/*
 * The guest console's log (--console-log FILE, Documentation/cli.md):
 * every byte the serial port sends, whether or not anyone reads the vmm's
 * stdout (start --detach). Capped and rotated so that a guest printing
 * without end cannot fill the host's disk: the live file never holds more
 * than max_bytes; the byte that would pass the cap first renames it to
 * FILE.1 (FILE.1 to FILE.2 and so on, keep files in all, the oldest
 * dropped; with keep 0 the file just starts again empty) and goes to a
 * new FILE. At most (keep + 1) * max_bytes on disk.
 *
 * Bytes are held until a newline or CONSOLE_LOG_LINE_MAX of them, then
 * written with one write(2); destroy writes what is held. A write that
 * fails (a full disk) drops its bytes, warns once and is tried again with
 * the next line.
 */

#define CONSOLE_LOG_DEFAULT_MAX_BYTES (1ULL << 20) /* 1 MiB */
#define CONSOLE_LOG_MIN_MAX_BYTES     4096ULL
#define CONSOLE_LOG_MAX_MAX_BYTES     (1ULL << 40) /* 1 TiB */
#define CONSOLE_LOG_DEFAULT_KEEP      1U	   /* FILE.1 */
#define CONSOLE_LOG_MAX_KEEP	      9U	   /* FILE.1 .. FILE.9 */
#define CONSOLE_LOG_LINE_MAX	      512U /* bytes held for one write */
/* start --detach without --console-log: SOCKET less ".sock", plus this. */
#define CONSOLE_LOG_DETACH_SUFFIX ".console.log"

/* Where the bytes go: the file (console_log__open), or a test's fake. */
struct console_log_ops {
	/*
	 * Append n bytes to the live file: how many it took (fewer than n
	 * only when it failed midway), or -errno when it took none.
	 */
	ssize_t (*write)(void *opaque, const void *buf, size_t n);
	/* Shift the kept files by one, start an empty live file: 0/-errno. */
	int (*rotate)(void *opaque);
	/* Release what opaque holds (NULL: nothing to release). */
	void (*release)(void *opaque);
};

struct console_log;

/*
 * A log over ops; size: bytes already in the live file. max_bytes from
 * CONSOLE_LOG_MIN_MAX_BYTES; name is for messages. Takes opaque (ops'
 * release), also on failure.
 */
int __must_check console_log__create(struct console_log **out,
				     const struct console_log_ops *ops,
				     void *opaque, const char *name,
				     uint64_t max_bytes, uint64_t size);
/*
 * The file at path (created 0640, appended to if it is there) with its
 * rotation. Its directory stays open for the rotations, which rename and
 * create files only by that descriptor (console_log__dirfd). err receives
 * "console log PATH: why".
 */
int __must_check console_log__open(struct console_log **out, const char *path,
				   uint64_t max_bytes, unsigned int keep,
				   char *err, size_t len);
/*
 * The console's bytes; one writer at a time (the UART's transmit lock
 * serialises them).
 */
void console_log__write(struct console_log *l, const void *buf, size_t n);
/* Writes what is held; the log stays. */
void console_log__flush(struct console_log *l);
/* The directory the file rotates in (seccomp's rules); -1 for a fake. */
int console_log__dirfd(const struct console_log *l);
/* Flushes and frees; NULL ok. */
void console_log__destroy(struct console_log *l);

/*
 * The default for start --detach: socket_path with a final ".sock"
 * replaced by CONSOLE_LOG_DETACH_SUFFIX (else the suffix appended). A
 * new string, or NULL when out of memory.
 */
char *console_log__default_path(const char *socket_path);

#endif
