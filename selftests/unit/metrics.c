// SPDX-License-Identifier: GPL-2.0
/*
 * vm.metrics' pieces (vmm/metrics.c): the vCPU, device and usage objects
 * from known counters, a device's sums over its queues, /proc/self/status
 * parsed (made-up text, then this process's own as it grows), the
 * --metrics file (lines whole, growing counters, a full disk and a FIFO
 * nobody reads: dropped and counted, never fatal) and the options.
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
#include "vmm/metrics.h"
#include "vmm/options.h"

static json_int_t int_at(const json_t *o, const char *key)
{
	return json_integer_value(json_object_get(o, key));
}

TEST(vcpu_object)
{
	struct vcpu_stats s = { .cpu_ns = 123456789 };
	json_t *o, *exits;

	s.exits[VCPU_EXIT_IO] = 10;
	s.exits[VCPU_EXIT_MMIO] = 20;
	s.exits[VCPU_EXIT_INTR] = 3;
	o = metrics__vcpu_json(2, &s);
	ASSERT_TRUE(o != NULL);
	EXPECT_EQ(2, int_at(o, "id"));
	EXPECT_EQ(123456789, int_at(o, "cpuNs"));
	exits = json_object_get(o, "exits");
	ASSERT_TRUE(json_is_object(exits));
	EXPECT_EQ(10, int_at(exits, "io"));
	EXPECT_EQ(20, int_at(exits, "mmio"));
	EXPECT_EQ(3, int_at(exits, "interrupted"));
	EXPECT_EQ(0, int_at(exits, "hlt"));
	EXPECT_EQ(33, int_at(exits, "total"));
	/* Every kind named, plus the total. */
	EXPECT_EQ(VCPU_EXIT_NR + 1, json_object_size(exits));
	json_decref(o);
}

/* A device's sums over its queues, with errors and queue-full its own. */
TEST(device_sums_its_queues)
{
	struct virtio_queue qs[2];
	struct virtio_device dev;
	struct virtio_device_stats s;
	json_t *o;

	memset(&dev, 0, sizeof(dev));
	memset(qs, 0, sizeof(qs));
	dev.queues = qs;
	dev.nr_queues = 2;
	qs[0].vq.stats = (struct vq_stats){
		.popped = 5, .used = 3, .bytes_out = 4096, .bytes_in = 10
	};
	/* Two were forgotten by a reset: not in flight. */
	qs[1].vq.stats = (struct vq_stats){ .popped = 7,
					    .used = 4,
					    .forgotten = 2,
					    .bytes_out = 1,
					    .bytes_in = 8192 };
	virtio_device__count_error(&dev);
	virtio_device__count_error(&dev);
	virtio_device__count_queue_full(&dev);
	virtio_device__stats(&dev, &s);
	EXPECT_EQ(12, s.requests);
	EXPECT_EQ(7, s.completed);
	EXPECT_EQ(2 + 1, s.in_flight);
	EXPECT_EQ(4097, s.bytes_out);
	EXPECT_EQ(8202, s.bytes_in);
	EXPECT_EQ(2, s.errors);
	EXPECT_EQ(1, s.queue_full);

	o = metrics__device_json("virtio-blk0", "virtio-blk", &s);
	ASSERT_TRUE(o != NULL);
	EXPECT_STREQ("virtio-blk0",
		     json_string_value(json_object_get(o, "name")));
	EXPECT_STREQ("virtio-blk",
		     json_string_value(json_object_get(o, "type")));
	EXPECT_EQ(12, int_at(o, "requests"));
	EXPECT_EQ(7, int_at(o, "completed"));
	EXPECT_EQ(3, int_at(o, "inFlight"));
	EXPECT_EQ(4097, int_at(o, "bytesFromGuest"));
	EXPECT_EQ(8202, int_at(o, "bytesToGuest"));
	EXPECT_EQ(2, int_at(o, "errors"));
	EXPECT_EQ(1, int_at(o, "queueFull"));
	json_decref(o);

	o = metrics__usage_json(3 << 20, 64 << 20);
	EXPECT_EQ(3 << 20, int_at(o, "bytes"));
	EXPECT_EQ(64 << 20, int_at(o, "limitBytes"));
	json_decref(o);
}

TEST(status_text)
{
	static const char good[] = "Name:\tvmm\n"
				   "VmRSSx:\t1 kB\n"
				   "VmRSS:\t  20480 kB\n"
				   "RssAnon:\t   12288 kB\n"
				   "RssFile:\t    8192 kB\n";
	static const char no_anon[] = "VmRSS:\t20480 kB\n";
	static const char junk[] = "VmRSS:\tlots kB\nRssAnon:\t1 kB\n";
	static const char unit[] = "VmRSS:\t1 MB\nRssAnon:\t1 kB\n";
	struct proc_mem m;

	ASSERT_EQ(0, metrics__parse_status(good, strlen(good), &m));
	EXPECT_EQ(20480ULL << 10, m.rss);
	EXPECT_EQ(12288ULL << 10, m.anon);
	/* Without its NUL, cut anywhere: never read past len. */
	EXPECT_EQ(-EINVAL, metrics__parse_status(good, 30, &m));
	EXPECT_EQ(-EINVAL, metrics__parse_status(no_anon, strlen(no_anon), &m));
	EXPECT_EQ(-EINVAL, metrics__parse_status(junk, strlen(junk), &m));
	EXPECT_EQ(-EINVAL, metrics__parse_status(unit, strlen(unit), &m));
}

/* This process's own numbers, before and after it touches 16 MiB. */
TEST(status_of_this_process)
{
	const size_t grow = 16 << 20;
	struct proc_mem before, after;
	int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
	char *p;

	ASSERT_LE(0, fd);
	ASSERT_EQ(0, metrics__read_status(fd, &before));
	EXPECT_LT(0, before.anon);
	EXPECT_LE(before.anon, before.rss);
	p = malloc(grow);
	ASSERT_TRUE(p != NULL);
	memset(p, 1, grow);
	/* The same fd, read again from offset 0: fresh numbers. */
	ASSERT_EQ(0, metrics__read_status(fd, &after));
	EXPECT_LE(before.anon + grow / 2, after.anon);
	EXPECT_LE(before.rss + grow / 2, after.rss);
	EXPECT_EQ(1, p[grow - 1]);
	free(p);
	close(fd);
}

static json_t *line_obj(unsigned int n)
{
	return json_pack("{s:I, s:[{s:I}]}", "seq", (json_int_t)n, "vcpus",
			 "cpuNs", (json_int_t)n * 1000);
}

TEST(file_lines_grow)
{
	char path[] = "/tmp/kiln-metrics-XXXXXX";
	struct metrics_file *f;
	char line[256];
	unsigned int n = 0;
	json_int_t last = -1;
	FILE *in;
	int fd = mkstemp(path);

	ASSERT_LE(0, fd);
	/* Appended after what is there. */
	ASSERT_EQ(4, write(fd, "{}\n\n", 4));
	close(fd);
	ASSERT_EQ(0, metrics_file__open(&f, path));
	for (unsigned int i = 1; i <= 3; i++) {
		json_t *o = line_obj(i);

		EXPECT_EQ(0, metrics_file__write(f, o));
		json_decref(o);
	}
	EXPECT_EQ(3, metrics_file__lines(f));
	EXPECT_EQ(0, metrics_file__dropped(f));
	metrics_file__close(f);

	in = fopen(path, "r");
	ASSERT_TRUE(in != NULL);
	while (fgets(line, sizeof(line), in)) {
		json_error_t jerr;
		json_t *o;

		if (!strcmp(line, "{}\n") || !strcmp(line, "\n"))
			continue;
		ASSERT_EQ('\n', line[strlen(line) - 1]);
		o = json_loads(line, 0, &jerr);
		ASSERT_TRUE(o != NULL) TH_LOG("line %u: %s", n, jerr.text);
		EXPECT_LT(last, int_at(o, "seq"));
		last = int_at(o, "seq");
		json_decref(o);
		n++;
	}
	fclose(in);
	EXPECT_EQ(3, n);
	EXPECT_EQ(3, last);
	unlink(path);
	EXPECT_EQ(-ENOENT, metrics_file__open(&f, "/nonexistent/dir/m"));
}

/* A full disk: every line dropped and counted, the writer goes on. */
TEST(file_full_disk_is_not_fatal)
{
	struct metrics_file *f;
	json_t *o = line_obj(1);

	if (access("/dev/full", W_OK))
		SKIP(return, "no /dev/full");
	ASSERT_EQ(0, metrics_file__open(&f, "/dev/full"));
	EXPECT_EQ(-ENOSPC, metrics_file__write(f, o));
	EXPECT_EQ(-ENOSPC, metrics_file__write(f, o));
	EXPECT_EQ(0, metrics_file__lines(f));
	EXPECT_EQ(2, metrics_file__dropped(f));
	metrics_file__close(f);
	json_decref(o);
}

/*
 * A FIFO whose reader never reads: once the pipe is full the lines are
 * dropped (the writer never blocks, holds nothing); what the pipe holds
 * is whole lines.
 */
TEST(file_fifo_reader_behind)
{
	char dir[] = "/tmp/kiln-metrics-fifo-XXXXXX", path[64], buf[256];
	unsigned int i, written = 0;
	struct metrics_file *f;
	int rfd, ret = 0;
	FILE *in;

	ASSERT_TRUE(mkdtemp(dir) != NULL);
	snprintf(path, sizeof(path), "%s/m", dir);
	ASSERT_EQ(0, mkfifo(path, 0600));
	rfd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	ASSERT_LE(0, rfd);
	ASSERT_EQ(0, metrics_file__open(&f, path));
	/* A pipe holds 64 KiB by default; a line is about 40 bytes. */
	for (i = 0; i < 100000 && !ret; i++) {
		json_t *o = line_obj(i);

		ret = metrics_file__write(f, o);
		json_decref(o);
		written += !ret;
	}
	EXPECT_EQ(-EAGAIN, ret);
	EXPECT_EQ(1, metrics_file__dropped(f));
	EXPECT_EQ(written, metrics_file__lines(f));
	metrics_file__close(f);

	in = fdopen(rfd, "r");
	ASSERT_TRUE(in != NULL);
	for (i = 0; fgets(buf, sizeof(buf), in); i++) {
		json_t *o = json_loads(buf, 0, NULL);

		ASSERT_TRUE(o != NULL) TH_LOG("line %u: %s", i, buf);
		EXPECT_EQ(i, int_at(o, "seq"));
		json_decref(o);
	}
	EXPECT_EQ(written, i);
	fclose(in);
	unlink(path);
	rmdir(dir);
}

static int parse(struct vm_config *c, const char *const args[], char *err,
		 size_t len)
{
	return options_argv__run(c, args, err, len);
}

TEST(options)
{
	char path[] = "/tmp/kiln-metrics-json-XXXXXX", err[CONFIG_ERR_LEN];
	static const char doc[] = "{\"metrics\": {\"path\": \"/tmp/m.jsonl\", "
				  "\"intervalMs\": 250}}";
	struct vm_config c;
	int fd;

	ASSERT_EQ(0, parse(&c, NULL, err, sizeof(err)));
	EXPECT_EQ(NULL, c.metrics_path);
	EXPECT_EQ(METRICS_DEFAULT_INTERVAL_MS, c.metrics_interval_ms);
	config__free(&c);
	ASSERT_EQ(0, parse(&c,
			   ARGS("--metrics", "/tmp/m", "--metrics-interval-ms",
				"500"),
			   err, sizeof(err)))
	TH_LOG("%s", err);
	EXPECT_STREQ("/tmp/m", c.metrics_path);
	EXPECT_EQ(500, c.metrics_interval_ms);
	config__free(&c);

	EXPECT_EQ(-EINVAL, parse(&c, ARGS("--metrics-interval-ms", "99"), err,
				 sizeof(err)));
	EXPECT_STREQ("metrics interval 99 ms: must be 100 to 3600000", err);
	config__free(&c);
	EXPECT_EQ(-EINVAL, parse(&c, ARGS("--metrics", ""), err, sizeof(err)));
	EXPECT_STREQ("metrics: empty path", err);
	config__free(&c);

	fd = mkstemp(path);
	ASSERT_LE(0, fd);
	ASSERT_EQ((ssize_t)strlen(doc), write(fd, doc, strlen(doc)));
	close(fd);
	config__init(&c);
	ASSERT_EQ(0, options__load_json(&c, path, err, sizeof(err)))
	TH_LOG("%s", err);
	EXPECT_STREQ("/tmp/m.jsonl", c.metrics_path);
	EXPECT_EQ(250, c.metrics_interval_ms);
	config__free(&c);
	unlink(path);
}

TEST_HARNESS_MAIN
