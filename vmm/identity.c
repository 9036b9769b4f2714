// SPDX-License-Identifier: GPL-2.0
/*
 * The per-boot identity's checks (vmm/identity.h): what the guest will be
 * called and where its commands start, refused on the host with the
 * reason, so that init never sees a name sethostname(2) would reject.
 */
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "lib/errf.h"
#include "vmm/identity.h"

static bool is_label_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	       (c >= '0' && c <= '9') || c == '-';
}

int identity__check_hostname(const char *name, char *err, size_t len)
{
	size_t n = strlen(name), start = 0, i;

	if (!n)
		return errf(err, len, -EINVAL, "hostname \"\": empty");
	if (n > IDENTITY_HOSTNAME_MAX)
		return errf(err, len, -ENAMETOOLONG,
			    "hostname \"%.20s...\": longer than %u bytes", name,
			    IDENTITY_HOSTNAME_MAX);
	for (i = 0; i <= n; i++) {
		if (i < n && name[i] != '.') {
			if (!is_label_char(name[i]))
				return errf(err, len, -EINVAL,
					    "hostname \"%s\": character %zu is "
					    "not a letter, digit, '-' or '.'",
					    name, i + 1);
			continue;
		}
		/* A label ends at i. */
		if (i == start)
			return errf(
				err, len, -EINVAL,
				"hostname \"%s\": empty label (two dots, or "
				"a dot at an end)",
				name);
		if (i - start > IDENTITY_LABEL_MAX)
			return errf(
				err, len, -ENAMETOOLONG,
				"hostname \"%s\": a label is longer than %u "
				"bytes",
				name, IDENTITY_LABEL_MAX);
		if (name[start] == '-' || name[i - 1] == '-')
			return errf(err, len, -EINVAL,
				    "hostname \"%s\": a label starts or ends "
				    "with '-'",
				    name);
		start = i + 1;
	}
	return 0;
}

int identity__check_cwd(const char *path, char *err, size_t len)
{
	const char *c = path, *end;
	size_t n;

	if (path[0] != '/')
		return errf(err, len, -EINVAL,
			    "cwd \"%s\": must be an absolute path", path);
	if (strlen(path) > IDENTITY_CWD_MAX)
		return errf(err, len, -ENAMETOOLONG,
			    "cwd \"%.20s...\": longer than %u bytes", path,
			    IDENTITY_CWD_MAX);
	for (; *c; c = *end ? end + 1 : end) {
		end = strchrnul(c, '/');
		n = end - c;
		if ((n == 1 && c[0] == '.') || (n == 2 && !strncmp(c, "..", 2)))
			return errf(err, len, -EINVAL,
				    "cwd \"%s\": no \".\" or \"..\" components",
				    path);
	}
	return 0;
}
