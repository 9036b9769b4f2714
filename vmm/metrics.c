// SPDX-License-Identifier: GPL-2.0
/*
 * The metrics object's pieces and the --metrics file (see metrics.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/counter.h"
#include "vmm/metrics.h"

#define KIB 1024ULL

const char *const metrics__exit_names[VCPU_EXIT_NR] = {
	[VCPU_EXIT_IO] = "io",
	[VCPU_EXIT_MMIO] = "mmio",
	[VCPU_EXIT_HLT] = "hlt",
	[VCPU_EXIT_SHUTDOWN] = "shutdown",
	[VCPU_EXIT_SYSTEM_EVENT] = "systemEvent",
	[VCPU_EXIT_INTR] = "interrupted",
	[VCPU_EXIT_OTHER] = "other",
};

static json_t *uint_json(uint64_t v)
{
	/* JSON integers are signed 64-bit here; no counter gets that far. */
	return json_integer((json_int_t)(v > INT64_MAX ? INT64_MAX : v));
}

json_t *metrics__vcpu_json(unsigned int id, const struct vcpu_stats *s)
{
	json_t *exits = json_object();
	json_t *o = json_object();
	uint64_t total = 0;

	if (!o || !exits) {
		json_decref(o);
		json_decref(exits);
		return NULL;
	}
	for (unsigned int i = 0; i < VCPU_EXIT_NR; i++) {
		json_object_set_new(exits, metrics__exit_names[i],
				    uint_json(s->exits[i]));
		total += s->exits[i];
	}
	json_object_set_new(exits, "total", uint_json(total));
	json_object_set_new(o, "id", json_integer(id));
	json_object_set_new(o, "cpuNs", uint_json(s->cpu_ns));
	json_object_set_new(o, "exits", exits);
	return o;
}

json_t *metrics__device_json(const char *name, const char *type,
			     const struct virtio_device_stats *s)
{
	json_t *o = json_object();

	if (!o)
		return NULL;
	json_object_set_new(o, "name", json_string(name));
	json_object_set_new(o, "type", json_string(type));
	json_object_set_new(o, "requests", uint_json(s->requests));
	json_object_set_new(o, "completed", uint_json(s->completed));
	json_object_set_new(o, "inFlight", uint_json(s->in_flight));
	json_object_set_new(o, "bytesFromGuest", uint_json(s->bytes_out));
	json_object_set_new(o, "bytesToGuest", uint_json(s->bytes_in));
	json_object_set_new(o, "errors", uint_json(s->errors));
	json_object_set_new(o, "queueFull", uint_json(s->queue_full));
	return o;
}

json_t *metrics__usage_json(uint64_t used, uint64_t max)
{
	return json_pack("{s:o, s:o}", "bytes", uint_json(used), "limitBytes",
			 uint_json(max));
}

/* "Key:   1234 kB" at the start of a line of text: the bytes. */
static bool status_field(const char *text, size_t len, const char *key,
			 uint64_t *out)
{
	size_t klen = strlen(key);
	const char *p = text, *end = text + len;

	while (p < end) {
		const char *eol = memchr(p, '\n', (size_t)(end - p));
		const char *q;
		uint64_t v = 0;
		bool digits = false;

		if (!eol)
			eol = end;
		if ((size_t)(eol - p) > klen && !memcmp(p, key, klen) &&
		    p[klen] == ':') {
			for (q = p + klen + 1;
			     q < eol && (*q == ' ' || *q == '\t'); q++)
				;
			for (; q < eol && *q >= '0' && *q <= '9'; q++) {
				if (v > (UINT64_MAX - 9) / 10)
					return false;
				v = v * 10 + (uint64_t)(*q - '0');
				digits = true;
			}
			/* The kernel gives these in kB (KiB, in fact). */
			if (!digits || eol - q != 3 || memcmp(q, " kB", 3) ||
			    v > UINT64_MAX / KIB)
				return false;
			*out = v * KIB;
			return true;
		}
		p = eol + 1;
	}
	return false;
}

int metrics__parse_status(const char *text, size_t len, struct proc_mem *m)
{
	if (!status_field(text, len, "VmRSS", &m->rss) ||
	    !status_field(text, len, "RssAnon", &m->anon))
		return -EINVAL;
	return 0;
}

int metrics__read_status(int fd, struct proc_mem *m)
{
	char buf[METRICS_PROC_STATUS_MAX];
	ssize_t n;

	/* pread: the filter allows it, and offset 0 reads it afresh. */
	n = pread(fd, buf, sizeof(buf), 0);
	if (n < 0)
		return -errno;
	return metrics__parse_status(buf, (size_t)n, m);
}

json_t *metrics__process_json(const struct proc_mem *m)
{
	return json_pack("{s:o, s:o}", "rssBytes", uint_json(m->rss),
			 "anonBytes", uint_json(m->anon));
}

/* ---- the file ---------------------------------------------------------- */

struct metrics_file {
	int fd;
	char *path;
	bool warned; /* a failure was reported: once for the file */
	/* lib/counter.h: the writer's, read by vm.metrics on the API's. */
	uint64_t lines;	  /* written whole */
	uint64_t dropped; /* not written, or cut short */
};

int metrics_file__open(struct metrics_file **out, const char *path)
{
	struct metrics_file *f = calloc(1, sizeof(*f));
	int ret;

	if (!f || !(f->path = strdup(path))) {
		free(f);
		return -ENOMEM;
	}
	f->fd = open(path,
		     O_WRONLY | O_APPEND | O_CREAT | O_NONBLOCK | O_CLOEXEC,
		     0600);
	if (f->fd < 0) {
		ret = -errno;
		pr_err("metrics file %s: %s", path, strerror(-ret));
		free(f->path);
		free(f);
		return ret;
	}
	*out = f;
	return 0;
}

static void drop(struct metrics_file *f, const char *why)
{
	counter__add(&f->dropped, 1);
	if (f->warned)
		return;
	f->warned = true;
	pr_warn("metrics file %s: %s; the line is dropped (further failures "
		"not reported, the VM goes on)",
		f->path, why);
}

int metrics_file__write(struct metrics_file *f, const json_t *obj)
{
	char *text = json_dumps(obj, JSON_COMPACT);
	size_t len;
	ssize_t n;
	int ret;

	if (!text) {
		drop(f, "out of memory for the line");
		return -ENOMEM;
	}
	len = strlen(text);
	text[len++] = '\n'; /* over the NUL: written by length */
	n = write(f->fd, text, len);
	ret = n < 0 ? -errno : 0;
	free(text);
	if (n == (ssize_t)len) {
		counter__add(&f->lines, 1);
		return 0;
	}
	if (n > 0) {
		/* Cut short (a full disk or pipe): end it so lines stay lines. */
		if (write(f->fd, "\n", 1) < 0)
			pr_debug("metrics file %s: %s", f->path,
				 strerror(errno));
		drop(f, "short write");
		return -ENOSPC;
	}
	drop(f,
	     ret == -EAGAIN ? "its reader is not keeping up" : strerror(-ret));
	return ret;
}

uint64_t metrics_file__lines(const struct metrics_file *f)
{
	return counter__get(&f->lines);
}

uint64_t metrics_file__dropped(const struct metrics_file *f)
{
	return counter__get(&f->dropped);
}

void metrics_file__close(struct metrics_file *f)
{
	if (!f)
		return;
	close(f->fd);
	free(f->path);
	free(f);
}
