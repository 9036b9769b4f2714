// SPDX-License-Identifier: GPL-2.0
/* The image's /etc/environment in init's own environment (env.h). */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "guest/init/env.h"

/* A shell-portable name: what a login's pam_env would export. */
static bool portable_name(const char *s, size_t n)
{
	if (!n || !(isalpha((unsigned char)s[0]) || s[0] == '_'))
		return false;
	for (size_t i = 1; i < n; i++)
		if (!isalnum((unsigned char)s[i]) && s[i] != '_')
			return false;
	return true;
}

/* One line (NUL-terminated, no newline): 1 if set, 0 if none, -errno. */
static int apply_line(char *line, unsigned int lineno, const char *path)
{
	char *eq, *value;
	size_t n;

	line += strspn(line, " \t");
	if (!*line || *line == '#')
		return 0;
	if (!strncmp(line, "export", 6) && (line[6] == ' ' || line[6] == '\t'))
		line += 6 + strspn(line + 6, " \t");
	eq = strchr(line, '=');
	if (!eq || !portable_name(line, eq - line)) {
		fprintf(stderr,
			"kiln-init: %s:%u: not NAME=value with a portable "
			"name, skipped\n",
			path, lineno);
		return 0;
	}
	*eq = '\0';
	value = eq + 1;
	n = strlen(value);
	while (n && (value[n - 1] == ' ' || value[n - 1] == '\t' ||
		     value[n - 1] == '\r'))
		value[--n] = '\0';
	if (n >= 2 && (value[0] == '"' || value[0] == '\'') &&
	    value[n - 1] == value[0]) {
		value[n - 1] = '\0';
		value++;
	}
	if (setenv(line, value, 1))
		return -errno;
	return 1;
}

int init_env__load(const char *path)
{
	unsigned int lineno = 0;
	size_t at = 0;
	int fd, ret = 0, set = 0;
	char *buf, *line, *nl;
	ssize_t r;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? 0 : -errno;
	buf = malloc(INIT_ENV_FILE_MAX + 1);
	if (!buf) {
		close(fd);
		return -ENOMEM;
	}
	while (at < INIT_ENV_FILE_MAX &&
	       (r = read(fd, buf + at, INIT_ENV_FILE_MAX - at)) != 0) {
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			ret = -errno;
			break;
		}
		at += r;
	}
	close(fd);
	buf[at] = '\0';
	for (line = buf; !ret && line && *line && set < INIT_ENV_MAX;
	     line = nl ? nl + 1 : NULL) {
		nl = strchr(line, '\n');
		if (nl)
			*nl = '\0';
		ret = apply_line(line, ++lineno, path);
		if (ret > 0) {
			set++;
			ret = 0;
		}
	}
	free(buf);
	return ret ? ret : set;
}
