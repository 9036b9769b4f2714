// SPDX-License-Identifier: GPL-2.0
/*
 * The console log (vmm/console-log.c): its cap and rotation driven
 * through a fake backend that records every file, so what lands where is
 * checked byte for byte; the line buffer; failures of the backend; then
 * the real files in a scratch directory (rotation names, keep, appending)
 * and the options (--console-log*, "consoleLog", the --detach default).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/compiler.h"
#include "selftests/kselftest.h"
#include "selftests/options_argv.h"
#include "vmm/config.h"
#include "vmm/console-log.h"
#include "vmm/options.h"

#define FAKE_FILES 64
#define CAP	   CONSOLE_LOG_MIN_MAX_BYTES

/* Every file the log made, [0] the first; the live one is the last. */
struct fake {
	uint8_t *data[FAKE_FILES];
	size_t len[FAKE_FILES];
	unsigned int nr;
	unsigned int writes;
	int fail_rotate;     /* -errno for the next rotations; 0: none */
	int fail_write;	     /* -errno for the next write only */
	ssize_t short_write; /* >0: the next write takes only this many */
	bool released;
};

static ssize_t fake_write(void *opaque, const void *buf, size_t n)
{
	struct fake *f = opaque;
	unsigned int i = f->nr - 1;
	int err = f->fail_write;

	f->writes++;
	if (err) {
		f->fail_write = 0;
		return err;
	}
	if (f->short_write > 0 && (size_t)f->short_write < n) {
		n = f->short_write;
		f->short_write = 0;
	}
	f->data[i] = realloc(f->data[i], f->len[i] + n);
	if (!f->data[i])
		abort();
	memcpy(f->data[i] + f->len[i], buf, n);
	f->len[i] += n;
	return n;
}

static int fake_rotate(void *opaque)
{
	struct fake *f = opaque;

	if (f->fail_rotate)
		return f->fail_rotate;
	if (f->nr == FAKE_FILES)
		abort();
	f->nr++;
	return 0;
}

static void fake_release(void *opaque)
{
	struct fake *f = opaque;

	f->released = true;
}

static const struct console_log_ops fake_ops = {
	.write = fake_write,
	.rotate = fake_rotate,
	.release = fake_release,
};

static void fake_init(struct fake *f)
{
	memset(f, 0, sizeof(*f));
	f->nr = 1; /* the live file the log starts on */
}

static void fake_free(struct fake *f)
{
	for (unsigned int i = 0; i < FAKE_FILES; i++)
		free(f->data[i]);
}

/* n bytes of numbered lines, "000001 ...\n", each 64 bytes. */
static uint8_t *lines(size_t n)
{
	uint8_t *b = malloc(n);
	size_t i;

	if (!b)
		abort();
	for (i = 0; i < n; i++)
		b[i] = i % 64 == 63 ? '\n' : 'a' + (i / 64) % 26;
	return b;
}

TEST(cap_and_rotation_keep_every_byte_in_order)
{
	const size_t n = 10 * CAP + 100;
	uint8_t *in = lines(n), *joined = malloc(n);
	struct console_log *l;
	struct fake f;
	size_t at = 0;

	fake_init(&f);
	ASSERT_EQ(0, console_log__create(&l, &fake_ops, &f, "fake", CAP, 0));
	/* In uneven pieces, as a guest would print them. */
	for (size_t i = 0; i < n; i += 37)
		console_log__write(l, in + i, n - i < 37 ? n - i : 37);
	console_log__destroy(l);
	EXPECT_TRUE(f.released);
	ASSERT_EQ(11, f.nr);
	for (unsigned int i = 0; i < f.nr; i++) {
		EXPECT_EQ(i < 10 ? CAP : 100, f.len[i]) TH_LOG("file %u", i);
		ASSERT_LE(at + f.len[i], n);
		memcpy(joined + at, f.data[i], f.len[i]);
		at += f.len[i];
	}
	ASSERT_EQ(n, at);
	EXPECT_EQ(0, memcmp(in, joined, n));
	free(in);
	free(joined);
	fake_free(&f);
}

/* A guest printing without end: no file ever passes the cap. */
TEST(endless_output_stays_under_the_cap)
{
	uint8_t chunk[4000];
	struct console_log *l;
	struct fake f;

	memset(chunk, 'x', sizeof(chunk));
	fake_init(&f);
	ASSERT_EQ(0, console_log__create(&l, &fake_ops, &f, "fake", CAP, 0));
	for (int i = 0; i < 14; i++) /* about 56 KB, no newline at all */
		console_log__write(l, chunk, sizeof(chunk));
	console_log__flush(l);
	for (unsigned int i = 0; i < f.nr; i++)
		EXPECT_LE(f.len[i], CAP) TH_LOG("file %u", i);
	EXPECT_EQ(14 * sizeof(chunk), (f.nr - 1) * CAP + f.len[f.nr - 1]);
	/*
	 * One write per CONSOLE_LOG_LINE_MAX held, and one for the rest; the
	 * cap is a multiple of it, so no write is split across two files.
	 */
	EXPECT_EQ(0, CAP % CONSOLE_LOG_LINE_MAX);
	EXPECT_EQ((14 * sizeof(chunk) + CONSOLE_LOG_LINE_MAX - 1) /
			  CONSOLE_LOG_LINE_MAX,
		  f.writes);
	console_log__destroy(l);
	fake_free(&f);
}

TEST(lines_are_held_until_a_newline_or_full)
{
	uint8_t full[CONSOLE_LOG_LINE_MAX];
	struct console_log *l;
	struct fake f;

	fake_init(&f);
	ASSERT_EQ(0, console_log__create(&l, &fake_ops, &f, "fake", CAP, 0));
	console_log__write(l, "boot", 4);
	EXPECT_EQ(0, f.writes);
	console_log__write(l, " mark\nnext", 10);
	EXPECT_EQ(1, f.writes);
	ASSERT_EQ(10, f.len[0]);
	EXPECT_EQ(0, memcmp("boot mark\n", f.data[0], 10));
	/* "next" and a full buffer's worth: written as the buffer fills. */
	memset(full, 'y', sizeof(full));
	console_log__write(l, full, sizeof(full));
	EXPECT_EQ(2, f.writes);
	EXPECT_EQ(10 + CONSOLE_LOG_LINE_MAX, f.len[0]);
	/* The rest ("next" was 4 bytes ahead) only when flushed. */
	console_log__destroy(l);
	EXPECT_EQ(3, f.writes);
	EXPECT_EQ(14 + CONSOLE_LOG_LINE_MAX, f.len[0]);
	fake_free(&f);
}

/* An existing file counts towards the cap: the log appends to it. */
TEST(existing_bytes_count)
{
	struct console_log *l;
	uint8_t *in = lines(128);
	struct fake f;

	fake_init(&f);
	ASSERT_EQ(0, console_log__create(&l, &fake_ops, &f, "fake", CAP,
					 CAP - 64));
	console_log__write(l, in, 128);
	console_log__destroy(l);
	ASSERT_EQ(2, f.nr);
	EXPECT_EQ(64, f.len[0]);
	EXPECT_EQ(64, f.len[1]);
	EXPECT_EQ(0, memcmp(in + 64, f.data[1], 64));
	free(in);
	fake_free(&f);
}

/* A rotation that fails drops what is past the cap, and is tried again. */
TEST(failed_rotation_keeps_the_cap)
{
	uint8_t *in = lines(3 * CAP);
	struct console_log *l;
	struct fake f;

	fake_init(&f);
	ASSERT_EQ(0, console_log__create(&l, &fake_ops, &f, "fake", CAP, 0));
	f.fail_rotate = -EACCES;
	console_log__write(l, in, 2 * CAP);
	console_log__flush(l);
	EXPECT_EQ(1, f.nr);
	EXPECT_EQ(CAP, f.len[0]);
	f.fail_rotate = 0;
	console_log__write(l, in + 2 * CAP, CAP);
	console_log__destroy(l);
	ASSERT_EQ(2, f.nr);
	EXPECT_EQ(CAP, f.len[1]);
	EXPECT_EQ(0, memcmp(in + 2 * CAP, f.data[1], CAP));
	free(in);
	fake_free(&f);
}

/* A failed or short write drops its line; the next line is written. */
TEST(failed_write_drops_one_line)
{
	struct console_log *l;
	struct fake f;

	fake_init(&f);
	ASSERT_EQ(0, console_log__create(&l, &fake_ops, &f, "fake", CAP, 0));
	f.fail_write = -ENOSPC;
	console_log__write(l, "lost\n", 5);
	console_log__write(l, "kept\n", 5);
	f.short_write = 2;
	console_log__write(l, "half\n", 5);
	console_log__write(l, "whole\n", 6);
	console_log__destroy(l);
	ASSERT_EQ(13, f.len[0]);
	EXPECT_EQ(0, memcmp("kept\nhawhole\n", f.data[0], 13));
	fake_free(&f);
}

TEST(cap_below_the_minimum_is_refused)
{
	struct console_log *l = (void *)1;
	struct fake f;

	fake_init(&f);
	EXPECT_EQ(-EINVAL,
		  console_log__create(&l, &fake_ops, &f, "fake", CAP - 1, 0));
	EXPECT_EQ(NULL, l);
	EXPECT_TRUE(f.released);
}

/* ---- the files ------------------------------------------------------- */

FIXTURE(dir)
{
	char dir[64];
	char path[128];
};

FIXTURE_SETUP(dir)
{
	strcpy(self->dir, "/tmp/kiln-conlog-XXXXXX");
	ASSERT_TRUE(mkdtemp(self->dir) != NULL);
	snprintf(self->path, sizeof(self->path), "%s/vm.console.log",
		 self->dir);
}

FIXTURE_TEARDOWN(dir)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", self->dir);
	if (system(cmd))
		TH_LOG("could not remove %s", self->dir);
}

/* Size of path.N (N 0: path itself); -1 if there is none. */
static long long size_of(const char *path, int n)
{
	char p[160];
	struct stat st;

	if (n)
		snprintf(p, sizeof(p), "%s.%d", path, n);
	else
		snprintf(p, sizeof(p), "%s", path);
	return stat(p, &st) ? -1 : (long long)st.st_size;
}

static uint8_t *slurp(const char *path, int n, size_t *len)
{
	char p[160];
	uint8_t *b;
	FILE *f;

	snprintf(p, sizeof(p), n ? "%s.%d" : "%s", path, n);
	f = fopen(p, "r");
	if (!f)
		return NULL;
	b = malloc(1 << 20);
	*len = fread(b, 1, 1 << 20, f);
	fclose(f);
	return b;
}

TEST_F(dir, rotation_names_and_keep)
{
	const size_t n = 5 * CAP + 300;
	uint8_t *in = lines(n), *last, *prev;
	char err[256] = "";
	struct console_log *l;
	size_t len, plen;

	ASSERT_EQ(0,
		  console_log__open(&l, self->path, CAP, 2, err, sizeof(err)))
	TH_LOG("%s", err);
	EXPECT_LE(0, console_log__dirfd(l));
	console_log__write(l, in, n);
	console_log__destroy(l);
	EXPECT_EQ(300, size_of(self->path, 0));
	EXPECT_EQ(CAP, size_of(self->path, 1));
	EXPECT_EQ(CAP, size_of(self->path, 2));
	EXPECT_EQ(-1, size_of(self->path, 3));
	/* The newest bytes: .1 then the live file end the input. */
	last = slurp(self->path, 0, &len);
	prev = slurp(self->path, 1, &plen);
	ASSERT_TRUE(last && prev);
	EXPECT_EQ(0, memcmp(in + n - 300, last, 300));
	EXPECT_EQ(0, memcmp(in + n - 300 - CAP, prev, CAP));
	free(last);
	free(prev);
	free(in);
}

TEST_F(dir, keep_zero_starts_the_file_again)
{
	uint8_t *in = lines(3 * CAP + 64);
	char err[256] = "";
	struct console_log *l;

	ASSERT_EQ(0,
		  console_log__open(&l, self->path, CAP, 0, err, sizeof(err)));
	console_log__write(l, in, 3 * CAP + 64);
	console_log__destroy(l);
	EXPECT_EQ(64, size_of(self->path, 0));
	EXPECT_EQ(-1, size_of(self->path, 1));
	free(in);
}

/* A second VM on the same path appends, its cap counting the old bytes. */
TEST_F(dir, appends_to_an_existing_log)
{
	char err[256] = "";
	struct console_log *l;

	ASSERT_EQ(0,
		  console_log__open(&l, self->path, CAP, 1, err, sizeof(err)));
	console_log__write(l, "first boot\n", 11);
	console_log__destroy(l);
	ASSERT_EQ(0,
		  console_log__open(&l, self->path, CAP, 1, err, sizeof(err)));
	console_log__write(l, "second boot\n", 12);
	console_log__destroy(l);
	EXPECT_EQ(23, size_of(self->path, 0));
}

TEST_F(dir, open_errors_name_the_file)
{
	char err[256] = "", path[160];
	struct console_log *l;

	snprintf(path, sizeof(path), "%s/no/such/dir/log", self->dir);
	EXPECT_EQ(-ENOENT,
		  console_log__open(&l, path, CAP, 1, err, sizeof(err)));
	EXPECT_TRUE(strstr(err, "console log ") == err) TH_LOG("%s", err);
	EXPECT_TRUE(strstr(err, "No such file or directory") != NULL);
	EXPECT_EQ(NULL, l);
	snprintf(path, sizeof(path), "%s/", self->dir);
	EXPECT_EQ(-EINVAL,
		  console_log__open(&l, path, CAP, 1, err, sizeof(err)));
	EXPECT_TRUE(strstr(err, "not a file name") != NULL) TH_LOG("%s", err);
	ASSERT_EQ(0, mkdir(self->path, 0755));
	EXPECT_NE(0,
		  console_log__open(&l, self->path, CAP, 1, err, sizeof(err)));
	EXPECT_TRUE(strstr(err, self->path) != NULL) TH_LOG("%s", err);
}

TEST(default_path_next_to_the_socket)
{
	char *p;

	p = console_log__default_path("/run/kiln/vm1.sock");
	EXPECT_STREQ("/run/kiln/vm1.console.log", p);
	free(p);
	p = console_log__default_path("ctl");
	EXPECT_STREQ("ctl.console.log", p);
	free(p);
	p = console_log__default_path(".sock");
	EXPECT_STREQ(".sock.console.log", p);
	free(p);
}

/* ---- the options ----------------------------------------------------- */

static int parse(struct vm_config *c, const char *cmd, const char *const args[],
		 char *err, size_t len)
{
	config__init(c);
	c->start = !strcmp(cmd, "start");
	return options_argv__check(c, ARGS(cmd, "--kernel", "/k"), args, err,
				   len);
}

TEST(options)
{
	char err[CONFIG_ERR_LEN];
	struct vm_config c;

	ASSERT_EQ(0, parse(&c, "run", NULL, err, sizeof(err)));
	EXPECT_EQ(NULL, c.console_log);
	EXPECT_EQ(CONSOLE_LOG_DEFAULT_MAX_BYTES, c.console_log_max_bytes);
	EXPECT_EQ(CONSOLE_LOG_DEFAULT_KEEP, c.console_log_keep);
	config__free(&c);

	ASSERT_EQ(0, parse(&c, "run",
			   ARGS("--console-log", "/tmp/c.log",
				"--console-log-max-bytes", "64KiB",
				"--console-log-keep", "3"),
			   err, sizeof(err)))
	TH_LOG("%s", err);
	EXPECT_STREQ("/tmp/c.log", c.console_log);
	EXPECT_EQ(64 << 10, c.console_log_max_bytes);
	EXPECT_EQ(3, c.console_log_keep);
	config__free(&c);

	/* --detach: next to the control socket, unless given. */
	ASSERT_EQ(0,
		  parse(&c, "start",
			ARGS("--control-socket", "/run/v/a.sock", "--detach"),
			err, sizeof(err)))
	TH_LOG("%s", err);
	EXPECT_STREQ("/run/v/a.console.log", c.console_log);
	config__free(&c);
	ASSERT_EQ(0, parse(&c, "start",
			   ARGS("--control-socket", "/run/v/a.sock", "--detach",
				"--console-log", "/var/log/a"),
			   err, sizeof(err)));
	EXPECT_STREQ("/var/log/a", c.console_log);
	config__free(&c);
	/* Attached, no default: the console is on the vmm's stdout. */
	ASSERT_EQ(0,
		  parse(&c, "start", ARGS("--control-socket", "/run/v/a.sock"),
			err, sizeof(err)));
	EXPECT_EQ(NULL, c.console_log);
	config__free(&c);
}

TEST(bad_options_say_why)
{
	char err[CONFIG_ERR_LEN];
	struct vm_config c;

	EXPECT_EQ(-EINVAL,
		  parse(&c, "run", ARGS("--console-log-max-bytes", "100"), err,
			sizeof(err)));
	EXPECT_STREQ("console log max bytes 100: must be at least 4096", err);
	config__free(&c);
	EXPECT_EQ(-EINVAL, parse(&c, "run", ARGS("--console-log", ""), err,
				 sizeof(err)));
	EXPECT_STREQ("console log: empty path", err);
	config__free(&c);
	/* The option table's range check (on stderr), before validation. */
	EXPECT_EQ(-ERANGE, parse(&c, "run", ARGS("--console-log-keep", "10"),
				 err, sizeof(err)));
	config__free(&c);
}

TEST(json_section)
{
	char path[] = "/tmp/kiln-conlog-json-XXXXXX", err[CONFIG_ERR_LEN];
	static const char doc[] =
		"{\"consoleLog\": {\"path\": \"/tmp/j.log\", \"maxBytes\": "
		"\"8KiB\", \"keep\": 0}}";
	struct vm_config c;
	int fd = mkstemp(path);

	ASSERT_LE(0, fd);
	ASSERT_EQ((ssize_t)strlen(doc), write(fd, doc, strlen(doc)));
	close(fd);
	config__init(&c);
	ASSERT_EQ(0, options__load_json(&c, path, err, sizeof(err)))
	TH_LOG("%s", err);
	EXPECT_STREQ("/tmp/j.log", c.console_log);
	EXPECT_EQ(8192, c.console_log_max_bytes);
	EXPECT_EQ(0, c.console_log_keep);
	config__free(&c);
	unlink(path);
}

TEST_HARNESS_MAIN
