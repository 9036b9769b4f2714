// SPDX-License-Identifier: GPL-2.0
/*
 * The default guest (guest-default.h): where `vmm run` finds a kernel and
 * initramfs when it is given none, and the check of each against the
 * sha256 pins `make guest` wrote beside them, before /dev/kvm is opened.
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kiln-paths.h"
#include "lib/errf.h"
#include "lib/log.h"
#include "lib/sha256.h"
#include "snapshot/verified.h"
#include "vmm/guest-default.h"

/* Bytes hashed per read. */
#define HASH_CHUNK (256U * 1024U)
/* The kernel's banner, "Linux version 6.1.0 (...": the release follows. */
#define BANNER "Linux version "

static const char *const source_names[] = {
	[GUEST_FROM_ENV] = "KILN_GUEST_DIR",
	[GUEST_FROM_TREE] = "build tree",
	[GUEST_FROM_INSTALL] = "installed",
};

const char *guest_default__source_name(enum guest_source s)
{
	return source_names[s];
}

const char *guest_default__install_dir(void)
{
	return KILN_GUEST_INSTALL_DIR;
}

bool guest_default__exe_dir(char *buf, size_t len)
{
	ssize_t n = readlink("/proc/self/exe", buf, len - 1);
	char *slash;

	if (n <= 0)
		return false;
	buf[n] = '\0';
	slash = strrchr(buf, '/');
	if (!slash)
		return false;
	*(slash == buf ? slash + 1 : slash) = '\0';
	return true;
}

/* 0 when dir/pins.json is readable, else -errno. */
static int pins_readable(const char *dir)
{
	char path[PATH_MAX];

	if (snprintf(path, sizeof(path), "%s/" GUEST_DEFAULT_PINS, dir) >=
	    (int)sizeof(path))
		return -ENAMETOOLONG;
	return access(path, R_OK) ? -errno : 0;
}

static int set_dir(struct guest_default *g, enum guest_source source,
		   const char *dir, const char *sub)
{
	g->source = source;
	if (snprintf(g->dir, sizeof(g->dir), "%s%s", dir, sub) >=
	    (int)sizeof(g->dir))
		return -ENAMETOOLONG;
	return pins_readable(g->dir);
}

static bool is_build_tree(const char *dir)
{
	char path[PATH_MAX];

	if (snprintf(path, sizeof(path), "%s/" GUEST_DEFAULT_TREE_MARK, dir) >=
	    (int)sizeof(path))
		return false;
	return !access(path, F_OK);
}

int guest_default__find(struct guest_default *g, const char *env_dir,
			const char *exe_dir, const char *install_dir, char *err,
			size_t len)
{
	int ret;

	if (env_dir && *env_dir) {
		ret = set_dir(g, GUEST_FROM_ENV, env_dir, "");
		if (ret)
			return errf(
				err, len, ret,
				"no kernel given (--kernel PATH) and "
				"KILN_GUEST_DIR=%s has no " GUEST_DEFAULT_PINS
				": %s",
				env_dir, strerror(-ret));
		return 0;
	}
	if (exe_dir && is_build_tree(exe_dir)) {
		ret = set_dir(g, GUEST_FROM_TREE, exe_dir, "/guest");
		if (ret)
			return errf(err, len, ret,
				    "no kernel given (--kernel PATH) and the "
				    "build tree's guest %s/" GUEST_DEFAULT_PINS
				    ": %s (make guest builds it)",
				    g->dir, strerror(-ret));
		return 0;
	}
	ret = set_dir(g, GUEST_FROM_INSTALL, install_dir, "");
	if (ret)
		return errf(err, len, ret,
			    "no kernel given (--kernel PATH) and no installed "
			    "guest: %s/" GUEST_DEFAULT_PINS
			    ": %s (make install puts one there; or set "
			    "KILN_GUEST_DIR)",
			    g->dir, strerror(-ret));
	return 0;
}

static bool is_digest(const char *s)
{
	size_t i;

	if (strncmp(s, "sha256:", 7) || strlen(s) != GUEST_DIGEST_LEN - 1)
		return false;
	for (i = 7; s[i]; i++)
		if (!strchr("0123456789abcdef", s[i]))
			return false;
	return true;
}

static int read_pin(const char *pins, const char *name,
		    char pin[GUEST_DIGEST_LEN], char *err, size_t len)
{
	json_error_t jerr;
	json_t *root, *v;
	int ret = 0;

	root = json_load_file(pins, JSON_REJECT_DUPLICATES, &jerr);
	if (!root)
		return errf(err, len, jerr.line < 0 ? -ENOENT : -EINVAL,
			    "%s: %s", pins, jerr.text);
	v = json_is_object(root) ? json_object_get(root, name) : NULL;
	if (!json_is_string(v) || !is_digest(json_string_value(v)))
		ret = errf(err, len, -EINVAL,
			   "%s: no \"%s\": \"sha256:<64 hex>\" entry", pins,
			   name);
	else
		memcpy(pin, json_string_value(v), GUEST_DIGEST_LEN);
	json_decref(root);
	return ret;
}

static int hash_fd(int fd, char actual[GUEST_DIGEST_LEN])
{
	char hex[SHA256_HEX_LEN + 1];
	struct sha256 s;
	ssize_t n;
	char *buf;
	int ret;

	buf = malloc(HASH_CHUNK);
	if (!buf)
		return -ENOMEM;
	ret = sha256__init(&s);
	if (ret)
		goto out;
	while ((n = read(fd, buf, HASH_CHUNK)) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			ret = -errno;
			sha256__free(&s);
			goto out;
		}
		ret = sha256__update(&s, buf, (size_t)n);
		if (ret) {
			sha256__free(&s);
			goto out;
		}
	}
	ret = sha256__final_hex(&s, hex);
	if (!ret)
		snprintf(actual, GUEST_DIGEST_LEN, "sha256:%s", hex);
out:
	free(buf);
	return ret;
}

int guest_default__verify(const char *dir, const char *name,
			  char pin[GUEST_DIGEST_LEN],
			  char actual[GUEST_DIGEST_LEN], char *err, size_t len)
{
	char pins[PATH_MAX], path[PATH_MAX], mine[2][GUEST_DIGEST_LEN];
	struct verified v;
	struct stat st;
	int fd, ret;

	pin = pin ? pin : mine[0];
	actual = actual ? actual : mine[1];
	if (snprintf(pins, sizeof(pins), "%s/" GUEST_DEFAULT_PINS, dir) >=
		    (int)sizeof(pins) ||
	    snprintf(path, sizeof(path), "%s/%s", dir, name) >=
		    (int)sizeof(path))
		return errf(err, len, -ENAMETOOLONG, "%s/%s: %s", dir, name,
			    strerror(ENAMETOOLONG));
	ret = read_pin(pins, name, pin, err, len);
	if (ret)
		return ret;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errf(err, len, -errno, "%s: %s", path, strerror(errno));
	if (fstat(fd, &st)) {
		ret = errf(err, len, -errno, "%s: %s", path, strerror(errno));
		close(fd);
		return ret;
	}
	if (verified__lookup(&v, &st, pin)) {
		pr_debug("%s: digest vouched for by the verification cache",
			 path);
		memcpy(actual, pin, GUEST_DIGEST_LEN);
		goto out;
	}
	ret = hash_fd(fd, actual);
	if (ret) {
		errf(err, len, ret, "%s: hashing: %s", path, strerror(-ret));
		goto out;
	}
	if (strcmp(actual, pin)) {
		ret = errf(err, len, -EKEYREJECTED,
			   "%s has %s, but its pin in %s is %s: refusing to "
			   "boot it",
			   path, actual, pins, pin);
		goto out;
	}
	if (verified__remember(&v, fd, &st, path))
		ret = errf(err, len, -EBUSY, "%s: changed while being verified",
			   path);
out:
	verified__release(&v);
	close(fd);
	return ret;
}

/* dir/name, verified, into *field. */
static int use_file(const struct guest_default *g, const char *name,
		    char **field, char *err, size_t len)
{
	char *path;
	int ret;

	ret = guest_default__verify(g->dir, name, NULL, NULL, err, len);
	if (ret)
		return ret;
	if (asprintf(&path, "%s/%s", g->dir, name) < 0)
		return errf(err, len, -ENOMEM, "%s: %s", name,
			    strerror(ENOMEM));
	free(*field);
	*field = path;
	return 0;
}

int guest_default__apply(struct vm_config *c, char *err, size_t len)
{
	struct guest_default g;
	char exe[PATH_MAX];
	int ret;

	if (c->kernel_path)
		return 0;
	ret = guest_default__find(
		&g, getenv("KILN_GUEST_DIR"),
		guest_default__exe_dir(exe, sizeof(exe)) ? exe : NULL,
		guest_default__install_dir(), err, len);
	if (ret)
		return ret;
	pr_debug("no --kernel: the default guest in %s (%s)", g.dir,
		 guest_default__source_name(g.source));
	ret = use_file(&g, GUEST_DEFAULT_KERNEL, &c->kernel_path, err, len);
	if (!ret && !c->initrd_path)
		ret = use_file(&g, GUEST_DEFAULT_INITRD, &c->initrd_path, err,
			       len);
	return ret;
}

int guest_default__kernel_release(const char *path, char *buf, size_t len)
{
	const char *p, *end, *rel;
	struct stat st;
	void *map;
	size_t n;
	int fd, ret = -ENOENT;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) || st.st_size <= 0) {
		close(fd);
		return -ENOENT;
	}
	map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	close(fd);
	if (map == MAP_FAILED)
		return -errno;
	p = map;
	end = p + st.st_size;
	while ((p = memmem(p, (size_t)(end - p), BANNER, strlen(BANNER)))) {
		rel = p + strlen(BANNER);
		p = rel;
		if (rel >= end || *rel < '0' || *rel > '9')
			continue;
		for (n = 0; rel + n < end && rel[n] > ' ' && rel[n] < 0x7f; n++)
			;
		if (n >= len)
			n = len - 1;
		memcpy(buf, rel, n);
		buf[n] = '\0';
		ret = 0;
		break;
	}
	munmap(map, (size_t)st.st_size);
	return ret;
}
