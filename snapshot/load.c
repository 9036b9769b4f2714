// SPDX-License-Identifier: GPL-2.0
/*
 * A snapshot directory checked and read for a restore, without KVM
 * (snapshot/load.h). The checks run in the order of their cost:
 * the directory and every part (snap_dir__verify), then the manifest's
 * fields against this monitor and config, then the parts the restore
 * needs, read once and hashed again as read.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "snapshot/load.h"

#define SNAP_PART_NAME_LEN 32 /* "vcpu254.state" */

/* The manifest's part named file, or NULL. */
static const json_t *find_part(const json_t *m, const char *file)
{
	const json_t *parts = json_object_get(m, "parts");
	const json_t *p;
	size_t i;

	json_array_foreach(parts, i, p)
	{
		const char *f = json_string_value(json_object_get(p, "file"));

		if (f && !strcmp(f, file))
			return p;
	}
	return NULL;
}

/*
 * Appends to out the words of command line a that b lacks, as
 * " \"w\"", at most len bytes; the number of such words.
 */
static unsigned int words_missing(const char *a, const char *b, char *out,
				  size_t len)
{
	unsigned int n = 0;
	size_t at = strlen(out), wl;
	const char *w, *p;

	for (w = a; *w; w += wl) {
		w += strspn(w, " ");
		wl = strcspn(w, " ");
		if (!wl)
			break;
		for (p = b; *p; p += strcspn(p, " ")) {
			p += strspn(p, " ");
			if (strcspn(p, " ") == wl && !strncmp(p, w, wl))
				break;
		}
		if (*p)
			continue;
		n++;
		if (at < len)
			at += snprintf(out + at, len - at, " \"%.*s\"", (int)wl,
				       w);
	}
	return n;
}

/*
 * What of the identity differs between the snapshot's (the manifest's
 * "identity" object) and this config's (want->identity), into why: the
 * fields by name, and for the command line the words only one side has.
 * Empty when either object is missing.
 */
static void identity_diff(const json_t *m, const struct snap_expect *want,
			  char *why, size_t len)
{
	const json_t *theirs = json_object_get(m, "identity"), *v;
	const char *key, *a, *b;
	char fields[256] = "", words[512] = "";
	size_t at = 0;

	why[0] = '\0';
	if (!json_is_object(theirs) || !json_is_object(want->identity))
		return;
	json_object_foreach((json_t *)want->identity, key, v)
	{
		if (json_equal(v, json_object_get(theirs, key)))
			continue;
		if (at < sizeof(fields))
			at += snprintf(fields + at, sizeof(fields) - at, "%s%s",
				       at ? ", " : "", key);
	}
	json_object_foreach((json_t *)theirs, key, v)
	{
		if (json_object_get(want->identity, key))
			continue;
		if (at < sizeof(fields))
			at += snprintf(fields + at, sizeof(fields) - at, "%s%s",
				       at ? ", " : "", key);
	}
	if (!fields[0])
		return;
	a = json_string_value(json_object_get(theirs, "cmdline"));
	b = json_string_value(json_object_get(want->identity, "cmdline"));
	if (a && b && strcmp(a, b)) {
		char only_a[200] = "", only_b[200] = "";
		unsigned int na = words_missing(a, b, only_a, sizeof(only_a));
		unsigned int nb = words_missing(b, a, only_b, sizeof(only_b));
		bool raw = strstr(only_a, "\"kiln.console=raw\"") ||
			   strstr(only_b, "\"kiln.console=raw\"");

		snprintf(words, sizeof(words), "%s%s%s%s%s",
			 na ? "; only the snapshot's command line has" : "",
			 only_a,
			 nb ? "; only this config's command line has" : "",
			 only_b,
			 raw ? " (vmm adds kiln.console=raw when its stdin is "
			       "not a terminal: restore with a stdin of the "
			       "same kind)" :
			       "");
	}
	snprintf(why, len, ": %s differ%s%s", fields,
		 strchr(fields, ',') ? "" : "s", words);
}

/* The manifest against this monitor and this config. */
static int check_fields(const json_t *m, const struct snap_expect *want,
			char *err, size_t len)
{
	const char *vmm = json_string_value(json_object_get(m, "vmm"));
	const char *id =
		json_string_value(json_object_get(m, "identityDigest"));
	const json_t *vcpus = json_object_get(m, "vcpus");
	const json_t *mem = json_object_get(m, "memoryBytes");

	if (!vmm || strcmp(vmm, want->vmm)) {
		snprintf(err, len,
			 "%s: vmm: the snapshot is of vmm %s, this is %s",
			 SNAP_MANIFEST, vmm ? vmm : "(none)", want->vmm);
		return -EINVAL;
	}
	if (!json_is_integer(vcpus) ||
	    json_integer_value(vcpus) != (json_int_t)want->vcpus) {
		snprintf(err, len,
			 "%s: vcpus: the snapshot has %" JSON_INTEGER_FORMAT
			 ", the config %u",
			 SNAP_MANIFEST, json_integer_value(vcpus), want->vcpus);
		return -EINVAL;
	}
	if (!json_is_integer(mem) ||
	    (uint64_t)json_integer_value(mem) != want->memory_bytes) {
		snprintf(
			err, len,
			"%s: memoryBytes: the snapshot has %" JSON_INTEGER_FORMAT
			", the config %" PRIu64,
			SNAP_MANIFEST, json_integer_value(mem),
			want->memory_bytes);
		return -EINVAL;
	}
	if (!id || strcmp(id, want->identity_digest)) {
		char why[1024];

		identity_diff(m, want, why, sizeof(why));
		if (!why[0])
			snprintf(why, sizeof(why),
				 ": kernel, initrd, command line, cpus, "
				 "memory, devices or mounts differ");
		snprintf(err, len,
			 "%s: identityDigest: the snapshot (%.23s...) is of "
			 "another configuration than this (%.23s...)%s",
			 SNAP_MANIFEST, id ? id : "none", want->identity_digest,
			 why);
		return -EINVAL;
	}
	return 0;
}

static int read_fd(int fd, uint8_t *p, size_t n)
{
	while (n) {
		ssize_t r = read(fd, p, n);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (!r)
			return -EIO;
		p += r;
		n -= (size_t)r;
	}
	return 0;
}

/*
 * A part the restore needs: in the manifest with this kind, read whole,
 * its bytes hashed again (the file may have changed since it was
 * verified: what is used must be what the manifest names).
 */
static int read_part(int dfd, const json_t *m, const char *file,
		     const char *kind, struct snap_blob *b, char *err,
		     size_t len)
{
	const json_t *part = find_part(m, file);
	const char *k = json_string_value(json_object_get(part, "kind"));
	const char *want = json_string_value(json_object_get(part, "sha256"));
	char hex[SNAP_SHA256_HEX + 1];
	struct stat st;
	int fd, ret;

	if (!part || !k || strcmp(k, kind) || !want) {
		snprintf(err, len, "%s: no part %s of kind %s", SNAP_MANIFEST,
			 file, kind);
		return -EINVAL;
	}
	fd = openat(dfd, file, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		ret = -errno;
		snprintf(err, len, "%s: %s", file, strerror(-ret));
		return ret;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) ||
	    st.st_size > SNAP_PART_MAX) {
		close(fd);
		snprintf(err, len, "%s: not a regular file under %u bytes",
			 file, SNAP_PART_MAX);
		return -EBADMSG;
	}
	b->len = (size_t)st.st_size;
	b->p = malloc(b->len + 1); /* + 1: devices.json as a string */
	ret = b->p ? read_fd(fd, b->p, b->len) : -ENOMEM;
	close(fd);
	if (!ret) {
		b->p[b->len] = '\0';
		ret = sha256__hex(b->p, b->len, hex);
	}
	if (ret) {
		snprintf(err, len, "%s: %s", file, strerror(-ret));
		return ret;
	}
	if (strcmp(hex, want)) {
		snprintf(err, len,
			 "%s: changed since it was verified (sha256 %s)", file,
			 hex);
		return -EBADMSG;
	}
	return 0;
}

static int open_memory(int dfd, struct snap_load *l, const json_t *m,
		       uint64_t want, char *err, size_t len)
{
	const json_t *part = find_part(m, "memory.raw");
	const char *k = json_string_value(json_object_get(part, "kind"));
	struct stat st;
	int ret;

	if (!part || !k || strcmp(k, "memory")) {
		snprintf(err, len, "%s: no part memory.raw of kind memory",
			 SNAP_MANIFEST);
		return -EINVAL;
	}
	l->mem_fd =
		openat(dfd, "memory.raw", O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (l->mem_fd < 0 || fstat(l->mem_fd, &st) < 0) {
		ret = -errno;
		snprintf(err, len, "memory.raw: %s", strerror(-ret));
		return ret;
	}
	if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size != want) {
		snprintf(err, len,
			 "memory.raw: not a regular file of %" PRIu64 " bytes",
			 want);
		return -EBADMSG;
	}
	l->mem_bytes = want;
	return 0;
}

/*
 * The root disk's writable layer (an ephemeral root): opened, and its
 * pages digest taken again on the descriptor that will be copied from,
 * so what a clone gets is what the manifest names.
 */
static int open_layer(int dfd, struct snap_load *l, char *err, size_t len)
{
	const json_t *part = find_part(l->manifest, SNAP_LAYER_FILE);
	const char *k = json_string_value(json_object_get(part, "kind"));
	const char *want = json_string_value(json_object_get(part, "sha256"));
	char hex[SNAP_SHA256_HEX + 1];
	struct stat st;
	int ret;

	if (!part || !k || strcmp(k, SNAP_LAYER_KIND) || !want) {
		snprintf(err, len,
			 "%s: no part %s of kind %s (a snapshot of a VM "
			 "whose root was not ephemeral?)",
			 SNAP_MANIFEST, SNAP_LAYER_FILE, SNAP_LAYER_KIND);
		return -EINVAL;
	}
	l->layer_fd =
		openat(dfd, SNAP_LAYER_FILE, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (l->layer_fd < 0 || fstat(l->layer_fd, &st) < 0) {
		ret = -errno;
		snprintf(err, len, "%s: %s", SNAP_LAYER_FILE, strerror(-ret));
		return ret;
	}
	if (!S_ISREG(st.st_mode)) {
		snprintf(err, len, "%s: not a regular file", SNAP_LAYER_FILE);
		return -EBADMSG;
	}
	l->layer_bytes = (uint64_t)st.st_size;
	ret = snap_file__pages_sha256(l->layer_fd, hex);
	if (ret) {
		snprintf(err, len, "%s: %s", SNAP_LAYER_FILE, strerror(-ret));
		return ret;
	}
	if (strcmp(hex, want)) {
		snprintf(err, len,
			 "%s: changed since it was verified (sha256 %s)",
			 SNAP_LAYER_FILE, hex);
		return -EBADMSG;
	}
	return 0;
}

static int load_parts(int dfd, struct snap_load *l,
		      const struct snap_expect *want, char *err, size_t len)
{
	char name[SNAP_PART_NAME_LEN];
	json_error_t jerr;
	struct snap_blob dev = { 0 };
	int ret;

	if (!want->vcpus || want->vcpus > SNAP_MAX_VCPUS) {
		snprintf(err, len, "%u vCPUs: a snapshot has 1 to %u",
			 want->vcpus, SNAP_MAX_VCPUS);
		return -EINVAL;
	}
	l->vcpu_state = calloc(want->vcpus, sizeof(*l->vcpu_state));
	if (!l->vcpu_state)
		return -ENOMEM;
	l->vcpus = want->vcpus;
	for (unsigned int i = 0; i < want->vcpus; i++) {
		snprintf(name, sizeof(name), "vcpu%u.state", i);
		ret = read_part(dfd, l->manifest, name, "vcpu",
				&l->vcpu_state[i], err, len);
		if (ret)
			return ret;
	}
	ret = read_part(dfd, l->manifest, "vm.state", "vm", &l->vm_state, err,
			len);
	if (!ret)
		ret = read_part(dfd, l->manifest, "devices.json", "devices",
				&dev, err, len);
	if (ret) {
		free(dev.p);
		return ret;
	}
	l->devices =
		json_loads((const char *)dev.p, JSON_REJECT_DUPLICATES, &jerr);
	free(dev.p);
	if (!json_is_array(l->devices)) {
		snprintf(err, len, "devices.json: line %d: %s", jerr.line,
			 l->devices ? "not an array" : jerr.text);
		return -EINVAL;
	}
	ret = open_memory(dfd, l, l->manifest, want->memory_bytes, err, len);
	if (!ret && want->root_layer)
		ret = open_layer(dfd, l, err, len);
	return ret;
}

int snap_load__open(struct snap_load *l, const char *dir,
		    const struct snap_expect *want, char *err, size_t len)
{
	int dfd, ret;

	*l = (struct snap_load){ .mem_fd = -1, .layer_fd = -1 };
	err[0] = '\0';
	ret = snap_dir__verify(dir, &l->manifest, err, len);
	if (!ret)
		ret = check_fields(l->manifest, want, err, len);
	if (ret)
		goto out_fail;
	dfd = openat(AT_FDCWD, dir, SNAP_OPEN_DIR);
	if (dfd < 0) {
		ret = -errno;
		snprintf(err, len, "%s: %s", dir, strerror(-ret));
		goto out_fail;
	}
	ret = load_parts(dfd, l, want, err, len);
	close(dfd);
	if (ret)
		goto out_fail;
	return 0;

out_fail:
	if (!err[0])
		snprintf(err, len, "%s: %s", dir, strerror(-ret));
	snap_load__close(l);
	return ret;
}

void snap_load__close(struct snap_load *l)
{
	for (unsigned int i = 0; l->vcpu_state && i < l->vcpus; i++)
		free(l->vcpu_state[i].p);
	free(l->vcpu_state);
	free(l->vm_state.p);
	json_decref(l->devices);
	json_decref(l->manifest);
	if (l->mem_fd >= 0)
		close(l->mem_fd);
	if (l->layer_fd >= 0)
		close(l->layer_fd);
	*l = (struct snap_load){ .mem_fd = -1, .layer_fd = -1 };
}
