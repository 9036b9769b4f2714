// SPDX-License-Identifier: GPL-2.0
/*
 * FACTS: the guest describes itself as {topic, relation, value} triples,
 * affirmative only (a fact the agent cannot observe is left out, never
 * reported as "unknown"). The vocabulary is documented in
 * Documentation/agent-protocol.md; keep the two in step.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "guest/agent/facts.h"

#define DEFAULT_PATH \
	"/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

/* Commands reported as "command exists NAME" when found on PATH. */
static const char *const commands[] = {
	"sh",	   "bash",   "dash",	  "zsh",  "busybox", "env",
	"python3", "python", "perl",	  "node", "npm",     "ruby",
	"go",	   "gcc",    "cc",	  "make", "git",     "curl",
	"wget",	   "ssh",    "tar",	  "gzip", "xz",	     "zstd",
	"unzip",   "jq",     "rsync",	  "sudo", "vi",	     "less",
	"apt-get", "dpkg",   "apk",	  "dnf",  "yum",     "rpm",
	"pacman",  "zypper", "systemctl",
};

/* The package manager a command stands for, first found wins. */
static const struct {
	const char *command;
	const char *manager;
} package_managers[] = {
	{ "apt-get", "apt" }, { "apk", "apk" },	      { "dnf", "dnf" },
	{ "yum", "yum" },     { "pacman", "pacman" }, { "zypper", "zypper" },
};

static int put_fact(struct kiln_buf *b, const char *topic, const char *relation,
		    const char *value)
{
	size_t mark;
	int ret;

	ret = kiln_tlv__begin(b, KILN_T_FACT, &mark);
	if (!ret)
		ret = kiln_tlv__put_str(b, KILN_T_TOPIC, topic);
	if (!ret)
		ret = kiln_tlv__put_str(b, KILN_T_RELATION, relation);
	if (!ret)
		ret = kiln_tlv__put_str(b, KILN_T_VALUE, value);
	if (!ret)
		kiln_tlv__end(b, mark);
	return ret;
}

/* "topic is value", the usual shape; an empty value is no fact. */
static int put_is(struct kiln_buf *b, const char *topic, const char *value)
{
	if (!value || !*value)
		return 0;
	return put_fact(b, topic, "is", value);
}

static int put_is_u64(struct kiln_buf *b, const char *topic,
		      unsigned long long v)
{
	char s[32];

	snprintf(s, sizeof(s), "%llu", v);
	return put_is(b, topic, s);
}

/* Reads a small text file whole; NULL if it cannot. */
static char *slurp(const char *path, size_t max)
{
	size_t n = 0;
	ssize_t r;
	char *buf;
	int fd;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	buf = malloc(max + 1);
	while (buf && n < max) {
		r = read(fd, buf + n, max - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		n += r;
	}
	if (buf)
		buf[n] = '\0';
	close(fd);
	return buf;
}

/*
 * The value of KEY in os-release(5) text, unquoted, into @out: KEY=value,
 * KEY="value" or KEY='value', with \" \\ \$ \` escapes in double quotes.
 */
static bool os_release_value(const char *text, const char *key, char *out,
			     size_t size)
{
	size_t klen = strlen(key), n = 0;
	const char *line, *v;
	char quote = 0;

	for (line = text; line && *line; line = strchr(line, '\n')) {
		if (*line == '\n')
			line++;
		if (strncmp(line, key, klen) || line[klen] != '=')
			continue;
		v = line + klen + 1;
		if (*v == '"' || *v == '\'')
			quote = *v++;
		for (; *v && *v != '\n' && n + 1 < size; v++) {
			if (quote && *v == quote)
				break;
			if (quote == '"' && *v == '\\' && v[1] && v[1] != '\n')
				v++;
			out[n++] = *v;
		}
		out[n] = '\0';
		return true;
	}
	return false;
}

static int put_distro(struct kiln_buf *b)
{
	char value[256], *text;
	int ret = 0;

	text = slurp("/etc/os-release", 16384);
	if (!text)
		text = slurp("/usr/lib/os-release", 16384);
	if (!text)
		return 0;
	if (os_release_value(text, "ID", value, sizeof(value)))
		ret = put_is(b, "distro", value);
	if (!ret && os_release_value(text, "VERSION_ID", value, sizeof(value)))
		ret = put_is(b, "distro-version", value);
	if (!ret && os_release_value(text, "PRETTY_NAME", value, sizeof(value)))
		ret = put_is(b, "distro-name", value);
	free(text);
	return ret;
}

/* MemTotal from /proc/meminfo, in bytes; 0 if unknown. */
static unsigned long long mem_total(void)
{
	unsigned long long kib = 0;
	char *text, *s;

	text = slurp("/proc/meminfo", 8192);
	if (!text)
		return 0;
	s = strstr(text, "MemTotal:");
	if (s)
		sscanf(s, "MemTotal: %llu kB", &kib);
	free(text);
	return kib * 1024;
}

/* Is @name an executable regular file in a directory of @path? */
static bool on_path(const char *path, const char *name)
{
	char file[PATH_MAX];
	const char *dir, *end;
	struct stat st;
	size_t len;

	for (dir = path; *dir; dir = *end ? end + 1 : end) {
		end = strchrnul(dir, ':');
		len = end - dir;
		if (!len || len + strlen(name) + 2 > sizeof(file))
			continue;
		snprintf(file, sizeof(file), "%.*s/%s", (int)len, dir, name);
		if (!stat(file, &st) && S_ISREG(st.st_mode) &&
		    !access(file, X_OK))
			return true;
	}
	return false;
}

static int put_commands(struct kiln_buf *b)
{
	const char *path = getenv("PATH");
	bool found[sizeof(commands) / sizeof(commands[0])];
	const char *manager = NULL;
	int ret = 0;
	size_t i, j;

	if (!path || !*path)
		path = DEFAULT_PATH;
	for (i = 0; i < sizeof(commands) / sizeof(commands[0]) && !ret; i++) {
		found[i] = on_path(path, commands[i]);
		if (found[i])
			ret = put_fact(b, "command", "exists", commands[i]);
	}
	for (j = 0; j < sizeof(package_managers) / sizeof(package_managers[0]);
	     j++) {
		for (i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
			if (found[i] &&
			    !strcmp(commands[i], package_managers[j].command))
				break;
		if (i < sizeof(commands) / sizeof(commands[0])) {
			manager = package_managers[j].manager;
			break;
		}
	}
	if (!ret && manager)
		ret = put_is(b, "package-manager", manager);
	if (!ret && !access("/bin/sh", X_OK))
		ret = put_is(b, "shell", "/bin/sh");
	return ret;
}

/*
 * "rootfs-mount-point created PATH" per directory init made for a mount
 * on a read-only root (guest/init/mounts.h: an overlay, the disk itself
 * unwritten).
 */
static int put_made_points(struct kiln_buf *b, const char *const *made)
{
	int ret = 0;

	for (; made && *made && !ret; made++)
		ret = put_fact(b, "rootfs-mount-point", "created", *made);
	return ret;
}

void facts__handle(struct conn *c, const struct frame *req,
		   const char *const *made_points)
{
	char host[HOST_NAME_MAX + 1];
	unsigned long long mem;
	struct utsname u;
	struct kiln_buf b;
	long cpus;
	int ret = 0;

	kiln_buf__init(&b);
	if (!uname(&u)) {
		ret = put_is(&b, "kernel", u.sysname);
		if (!ret)
			ret = put_is(&b, "kernel-release", u.release);
		if (!ret)
			ret = put_is(&b, "kernel-version", u.version);
		if (!ret)
			ret = put_is(&b, "architecture", u.machine);
	}
	if (!ret && !gethostname(host, sizeof(host))) {
		host[sizeof(host) - 1] = '\0';
		ret = put_is(&b, "hostname", host);
	}
	if (!ret)
		ret = put_distro(&b);
	cpus = sysconf(_SC_NPROCESSORS_ONLN);
	if (!ret && cpus > 0)
		ret = put_is_u64(&b, "cpu-count", cpus);
	mem = mem_total();
	if (!ret && mem)
		ret = put_is_u64(&b, "memory-bytes", mem);
	if (!ret)
		ret = put_commands(&b);
	if (!ret)
		ret = put_made_points(&b, made_points);
	if (ret)
		conn__error(c, -ret, "cannot list the facts");
	else
		conn__send_buf(c, KILN_MSG_RESULT, &b);
	kiln_buf__free(&b);
}
