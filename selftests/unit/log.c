// SPDX-License-Identifier: GPL-2.0
/*
 * The vmm's own log (lib/log.c): the text and JSON line formats (every
 * JSON line parses, whatever bytes the message held), the level filter,
 * --log FILE; then the vmm itself with --log, --log-level and
 * --log-format: its error in the file as one JSON object, nothing on
 * stderr, and bad log options refused in one line. KILN_VMM names the
 * binary (default build/vmm).
 */
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/compiler.h"
#include "lib/log.h"
#include "selftests/kselftest.h"
#include "selftests/spawn.h"

#define VMM_EXIT_VMM_ERROR 125

TEST(text_lines_as_before)
{
	char line[256];

	EXPECT_EQ(23, log__format_line(line, sizeof(line), LOG_FORMAT_TEXT,
				       LOG_WARN, "hi there", NULL));
	EXPECT_STREQ("vmm: warning: hi there\n", line);
	log__format_line(line, sizeof(line), LOG_FORMAT_TEXT, LOG_ERR,
			 "disk: gone", NULL);
	EXPECT_STREQ("vmm: disk: gone\n", line);
	log__format_line(line, sizeof(line), LOG_FORMAT_TEXT, LOG_DEBUG, "x",
			 NULL);
	EXPECT_STREQ("vmm: debug: x\n", line);
}

TEST(json_lines_parse_whatever_the_message)
{
	static const struct {
		const char *msg, *want;
	} cases[] = {
		{ "plain", "plain" },
		{ "quote \" and \\ back", "quote \" and \\ back" },
		{ "new\nline\ttab\x01", "new\nline\ttab\x01" },
		{ "caf\xc3\xa9 \xe2\x82\xac", "caf\xc3\xa9 \xe2\x82\xac" },
		/* not UTF-8: a lone byte, an overlong '/', a surrogate */
		{ "bad \xff end", "bad \xef\xbf\xbd end" },
		{ "\xc0\xaf", "\xef\xbf\xbd\xef\xbf\xbd" },
		{ "\xed\xa0\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd" },
	};
	const struct timespec ts = { .tv_sec = 86400 + 61,
				     .tv_nsec = 500000000 };
	char line[8192];
	json_error_t jerr;
	size_t i, n;
	json_t *j;

	for (i = 0; i < ARRAY_SIZE(cases); i++) {
		n = log__format_line(line, sizeof(line), LOG_FORMAT_JSON,
				     LOG_WARN, cases[i].msg, &ts);
		ASSERT_LT(0, n);
		EXPECT_EQ('\n', line[n - 1]);
		EXPECT_EQ(line + n - 1, strchr(line, '\n'));
		j = json_loads(line, 0, &jerr);
		ASSERT_NE(NULL, j) TH_LOG("%s: %s", jerr.text, line);
		EXPECT_EQ(4, json_object_size(j));
		EXPECT_STREQ("1970-01-02T00:01:01.500Z",
			     json_string_value(json_object_get(j, "time")));
		EXPECT_STREQ("warn",
			     json_string_value(json_object_get(j, "level")));
		EXPECT_EQ(getpid(),
			  json_integer_value(json_object_get(j, "pid")));
		EXPECT_STREQ(cases[i].want,
			     json_string_value(json_object_get(j, "msg")))
		TH_LOG("case %zu: %s", i, line);
		json_decref(j);
	}
}

/* A message of control bytes, the longest there is, still one line. */
TEST(json_worst_case_fits)
{
	char msg[1024], line[8192];
	json_t *j;
	size_t n;

	memset(msg, 0x1f, sizeof(msg) - 1);
	msg[sizeof(msg) - 1] = '\0';
	n = log__format_line(line, sizeof(line), LOG_FORMAT_JSON, LOG_ERR, msg,
			     NULL);
	ASSERT_EQ('\n', line[n - 1]);
	j = json_loads(line, 0, NULL);
	ASSERT_NE(NULL, j);
	EXPECT_EQ(sizeof(msg) - 1,
		  strlen(json_string_value(json_object_get(j, "msg"))));
	json_decref(j);
}

static char *read_all(const char *path)
{
	static char buf[65536];
	FILE *f = fopen(path, "r");
	size_t n;

	if (!f)
		return NULL;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	buf[n] = '\0';
	fclose(f);
	return buf;
}

/* --log FILE at a level: what passes is appended, one line each. */
TEST(file_and_level)
{
	char path[] = "/tmp/kiln-log-XXXXXX";
	int fd = mkstemp(path), lines = 0;
	char *text, *line, *save;
	json_t *j;

	ASSERT_LE(0, fd);
	close(fd);
	ASSERT_EQ(0, log__open(path));
	log__set_format(LOG_FORMAT_JSON);
	log__set_level(LOG_WARN);
	EXPECT_FALSE(log__debug_enabled());
	pr_info("not this");
	pr_debug("nor this");
	pr_warn("a warning %d", 1);
	pr_err("an error: %s", "why");
	log__close();
	log__set_format(LOG_FORMAT_TEXT);
	log__set_level(LOG_INFO);
	text = read_all(path);
	ASSERT_NE(NULL, text);
	for (line = strtok_r(text, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save), lines++) {
		j = json_loads(line, 0, NULL);
		ASSERT_NE(NULL, j) TH_LOG("%s", line);
		EXPECT_STREQ(lines ? "error" : "warn",
			     json_string_value(json_object_get(j, "level")));
		EXPECT_STREQ(lines ? "an error: why" : "a warning 1",
			     json_string_value(json_object_get(j, "msg")));
		json_decref(j);
	}
	EXPECT_EQ(2, lines);
	unlink(path);
	EXPECT_EQ(-ENOENT, log__open("/nonexistent-kiln-dir/log"));
}

/* The vmm: its error in the --log file, as JSON, and not on stderr. */
TEST(vmm_writes_its_log_file)
{
	char dir[] = "/tmp/kiln-log-XXXXXX", path[64], missing[64];
	struct spawn_result r;
	char *text;
	json_t *j;

	ASSERT_NE(NULL, mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/vmm.log", dir);
	snprintf(missing, sizeof(missing), "%s/no-kernel", dir);
	ASSERT_EQ(0, spawn__run(ARGS(spawn__vmm_path(), "run", "--kernel",
				     missing, "--log", path, "--log-format",
				     "json", "--", "true"),
				NULL, &r));
	EXPECT_EQ(VMM_EXIT_VMM_ERROR, r.status);
	EXPECT_EQ(0, r.err_len) TH_LOG("stderr: %s", r.err);
	text = read_all(path);
	ASSERT_NE(NULL, text);
	EXPECT_EQ(1, spawn__count_lines(text)) TH_LOG("%s", text);
	j = json_loads(text, JSON_DISABLE_EOF_CHECK, NULL);
	ASSERT_NE(NULL, j) TH_LOG("%s", text);
	EXPECT_STREQ("error", json_string_value(json_object_get(j, "level")));
	EXPECT_TRUE(strstr(json_string_value(json_object_get(j, "msg")),
			   "no-kernel: No such file or directory") != NULL);
	json_decref(j);

	/* Text by default; an error passes --log-level error. */
	unlink(path);
	ASSERT_EQ(0, spawn__run(ARGS(spawn__vmm_path(), "run", "--kernel",
				     missing, "--log", path, "--log-level",
				     "error", "--", "true"),
				NULL, &r));
	EXPECT_EQ(0, r.err_len) TH_LOG("stderr: %s", r.err);
	text = read_all(path);
	ASSERT_NE(NULL, text);
	EXPECT_EQ(1, spawn__count_lines(text));
	EXPECT_EQ(0, strncmp(text, "vmm: ", 5)) TH_LOG("%s", text);
	EXPECT_TRUE(strstr(text, "no-kernel: No such file or directory\n") !=
		    NULL)
	TH_LOG("%s", text);
	unlink(path);
	rmdir(dir);
}

TEST(vmm_bad_log_options)
{
	struct spawn_result r;

	ASSERT_EQ(0, spawn__run(ARGS(spawn__vmm_path(), "run", "--kernel", "/k",
				     "--log", "/nonexistent-kiln-dir/vmm.log",
				     "--", "true"),
				NULL, &r));
	EXPECT_EQ(VMM_EXIT_VMM_ERROR, r.status);
	EXPECT_EQ(1, spawn__count_lines(r.err)) TH_LOG("%s", r.err);
	EXPECT_TRUE(strstr(r.err, "log /nonexistent-kiln-dir/vmm.log: No such "
				  "file or directory") != NULL)
	TH_LOG("%s", r.err);
	ASSERT_EQ(0, spawn__run(ARGS(spawn__vmm_path(), "run", "--kernel", "/k",
				     "--log-level", "loud", "--", "true"),
				NULL, &r));
	EXPECT_EQ(VMM_EXIT_VMM_ERROR, r.status);
	EXPECT_EQ(1, spawn__count_lines(r.err)) TH_LOG("%s", r.err);
	EXPECT_TRUE(strstr(r.err, "--log-level loud: must be error, warn, "
				  "info or debug") != NULL)
	TH_LOG("%s", r.err);
	ASSERT_EQ(0, spawn__run(ARGS(spawn__vmm_path(), "facts", "--kernel",
				     "/k", "--log-format", "xml"),
				NULL, &r));
	EXPECT_EQ(VMM_EXIT_VMM_ERROR, r.status);
	EXPECT_TRUE(strstr(r.err, "--log-format xml: must be text or json") !=
		    NULL)
	TH_LOG("%s", r.err);
}

TEST_HARNESS_MAIN
