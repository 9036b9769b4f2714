// SPDX-License-Identifier: GPL-2.0
/*
 * virtio-fs mounts: configuration (CLI and JSON), validation, the backend
 * each mount becomes and the manifest the guest init reads.
 */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>

#include "devices/fs/backend.h"
#include "devices/fs/memfs.h"
#include "devices/fs/passthrough.h"
#include "devices/fs/virtual.h"
#include "lib/errf.h"
#include "lib/parse.h"
#include "proto/mounts.h"
#include "vmm/mounts.h"

static void mount_free(struct mount_config *m)
{
	unsigned int i;

	free(m->guest_path);
	free(m->source);
	for (i = 0; i < m->nr_mask_paths; i++)
		free(m->mask_paths[i]);
	free(m->mask_paths);
	free(m->mask_storage);
	for (i = 0; i < m->nr_files; i++) {
		free(m->files[i].path);
		free(m->files[i].data);
	}
	free(m->files);
	free(m->socket);
	memset(m, 0, sizeof(*m));
}

void mounts__free(struct mounts_config *mc)
{
	unsigned int i;

	for (i = 0; i < mc->nr; i++)
		mount_free(&mc->m[i]);
	mc->nr = 0;
}

/*
 * An absolute path with no empty, "." or ".." component (one trailing
 * slash is forgiven). NULL when it is fine, else why not.
 */
static const char *path_problem(const char *p, bool root_ok)
{
	const char *c;
	size_t n;

	if (!p || p[0] != '/')
		return "must be an absolute path";
	if (strlen(p) >= MOUNTS_PATH_MAX)
		return "too long";
	if (!strcmp(p, "/"))
		return root_ok ? NULL : "cannot be /";
	for (c = p + 1; *c;) {
		n = strcspn(c, "/");
		if (n == 0)
			return "has an empty component (//)";
		if ((n == 1 && c[0] == '.') ||
		    (n == 2 && c[0] == '.' && c[1] == '.'))
			return "has a . or .. component";
		if (n > FS_NAME_MAX)
			return "has a component over 255 bytes";
		c += n;
		if (*c == '/' && c[1] == '\0')
			break;
		if (*c == '/')
			c++;
	}
	return NULL;
}

/* A copy without the trailing slash. */
static char *path_dup(const char *p)
{
	size_t n = strlen(p);
	char *d;

	if (n > 1 && p[n - 1] == '/')
		n--;
	d = strndup(p, n);
	return d;
}

static struct mount_config *new_mount(struct mounts_config *mc,
				      const char *guest, char *err, size_t len,
				      int *ret)
{
	const char *why = path_problem(guest, false);
	struct mount_config *m;

	if (why) {
		*ret = errf(err, len, -EINVAL, "mount \"%s\": guest path %s",
			    guest, why);
		return NULL;
	}
	if (mc->nr == MOUNTS_MAX) {
		*ret = errf(err, len, -E2BIG,
			    "mount \"%s\": more than %u mounts", guest,
			    MOUNTS_MAX);
		return NULL;
	}
	m = &mc->m[mc->nr];
	memset(m, 0, sizeof(*m));
	m->guest_path = path_dup(guest);
	if (!m->guest_path) {
		*ret = -ENOMEM;
		return NULL;
	}
	mc->nr++;
	return m;
}

/* "mapped", "squash", "passthrough": the bind's ownership; else -EINVAL. */
static int parse_ownership(const char *s, size_t n, enum fs_ownership *out)
{
	static const struct {
		const char *name;
		enum fs_ownership own;
	} names[] = {
		{ "mapped", FS_OWNERSHIP_MAPPED },
		{ "squash", FS_OWNERSHIP_SQUASH },
		{ "passthrough", FS_OWNERSHIP_PASSTHROUGH },
	};
	unsigned int i;

	for (i = 0; i < ARRAY_SIZE(names); i++) {
		if (strlen(names[i].name) == n &&
		    !memcmp(s, names[i].name, n)) {
			*out = names[i].own;
			return 0;
		}
	}
	return -EINVAL;
}

int mounts__parse_cli(struct mounts_config *mc, const char *spec, char *err,
		      size_t len)
{
	const char *eq = strchr(spec, '=');
	struct mount_config *m;
	const char *src, *colon;
	char *guest;
	uint64_t n;
	int ret = 0;

	if (!eq)
		return errf(
			err, len, -EINVAL,
			"--mount %s: expected GUEST_PATH=bind:DIR[:ro|:rw], "
			"GUEST_PATH=memory[:MAXBYTES] or "
			"GUEST_PATH=virtual:SOCKET",
			spec);
	guest = strndup(spec, eq - spec);
	if (!guest)
		return -ENOMEM;
	m = new_mount(mc, guest, err, len, &ret);
	free(guest);
	if (!m)
		return ret;
	src = eq + 1;
	if (!strncmp(src, "bind:", 5)) {
		const char *end;

		m->type = MOUNT_BIND;
		src += 5;
		end = src + strlen(src);
		colon = memrchr(src, ':', (size_t)(end - src));
		if (colon &&
		    !parse_ownership(colon + 1, (size_t)(end - colon - 1),
				     &m->ownership))
			end = colon;
		colon = memrchr(src, ':', (size_t)(end - src));
		if (colon && end - colon == 3 &&
		    (!memcmp(colon, ":ro", 3) || !memcmp(colon, ":rw", 3))) {
			m->read_only = !memcmp(colon, ":ro", 3);
			end = colon;
		}
		/* Like Docker's -v: read-write unless said. */
		m->source = strndup(src, (size_t)(end - src));
		if (!m->source)
			return -ENOMEM;
		return 0;
	}
	if (!strcmp(src, "memory") || !strncmp(src, "memory:", 7)) {
		m->type = MOUNT_MEMORY;
		if (src[6] == ':' && parse__size(src + 7, INT64_MAX, &n))
			return errf(err, len, -EINVAL,
				    "--mount %s: memory size \"%s\" is not a "
				    "byte count (K/M/G suffixes)",
				    spec, src + 7);
		if (src[6] == ':')
			m->max_bytes = n;
		return 0;
	}
	if (!strncmp(src, "virtual:", 8)) {
		m->type = MOUNT_VIRTUAL;
		m->socket = strdup(src + 8);
		return m->socket ? 0 : -ENOMEM;
	}
	return errf(err, len, -EINVAL,
		    "--mount %s: unknown source (bind:DIR[:ro|:rw], "
		    "memory[:MAXBYTES] or virtual:SOCKET)",
		    spec);
}

static int json_str(json_t *v, const char *what, char **out, char *err,
		    size_t len)
{
	if (!json_is_string(v))
		return errf(err, len, -EINVAL, "%s: must be a string", what);
	free(*out);
	*out = strdup(json_string_value(v));
	return *out ? 0 : -ENOMEM;
}

static int parse_mask(struct mount_config *m, const char *where, json_t *mask,
		      char *err, size_t len)
{
	json_t *paths = NULL, *v;
	const char *key;
	size_t i;
	int ret;

	if (!json_is_object(mask))
		return errf(err, len, -EINVAL,
			    "%s.mask: must be an object (\"paths\", "
			    "\"storage\")",
			    where);
	json_object_foreach(mask, key, v)
	{
		if (!strcmp(key, "paths")) {
			paths = v;
		} else if (!strcmp(key, "storage")) {
			/* A bind of its own: {"source": DIR}, or just DIR. */
			if (json_is_object(v)) {
				json_t *s = json_object_get(v, "source");

				if (json_object_size(v) != 1 || !s)
					return errf(err, len, -EINVAL,
						    "%s.mask.storage: only "
						    "\"source\" is allowed",
						    where);
				v = s;
			}
			ret = json_str(v, "mask.storage.source",
				       &m->mask_storage, err, len);
			if (ret)
				return ret;
		} else {
			return errf(err, len, -EINVAL,
				    "unknown key \"%s.mask.%s\"", where, key);
		}
	}
	if (!paths)
		return 0;
	if (!json_is_array(paths) || json_array_size(paths) > MOUNTS_MASKS_MAX)
		return errf(err, len, -EINVAL,
			    "%s.mask.paths: must be an array of at most %u "
			    "paths",
			    where, MOUNTS_MASKS_MAX);
	m->mask_paths = calloc(json_array_size(paths) + 1, sizeof(char *));
	if (!m->mask_paths)
		return -ENOMEM;
	json_array_foreach(paths, i, v)
	{
		ret = json_str(v, "mask.paths[]", &m->mask_paths[i], err, len);
		if (ret)
			return ret;
		m->nr_mask_paths++;
	}
	return 0;
}

static int parse_bind(struct mount_config *m, const char *where, json_t *o,
		      char *err, size_t len)
{
	const char *key;
	json_t *v;
	int ret = 0;

	m->type = MOUNT_BIND;
	if (!json_is_object(o))
		return errf(err, len, -EINVAL,
			    "%s.bind: must be an object (\"source\", "
			    "\"access\", \"mask\")",
			    where);
	json_object_foreach(o, key, v)
	{
		if (!strcmp(key, "source")) {
			ret = json_str(v, "bind.source", &m->source, err, len);
		} else if (!strcmp(key, "access")) {
			if (json_is_string(v) &&
			    !strcmp(json_string_value(v), "ro"))
				m->read_only = true;
			else if (json_is_string(v) &&
				 !strcmp(json_string_value(v), "rw"))
				m->read_only = false;
			else
				ret = errf(err, len, -EINVAL,
					   "%s.bind.access: must be \"ro\" or "
					   "\"rw\"",
					   where);
		} else if (!strcmp(key, "mask")) {
			ret = parse_mask(m, where, v, err, len);
		} else if (!strcmp(key, "ownership")) {
			if (!json_is_string(v) ||
			    parse_ownership(json_string_value(v),
					    strlen(json_string_value(v)),
					    &m->ownership))
				ret = errf(err, len, -EINVAL,
					   "%s.bind.ownership: must be "
					   "\"mapped\", \"squash\" or "
					   "\"passthrough\"",
					   where);
		} else {
			ret = errf(err, len, -EINVAL,
				   "unknown key \"%s.bind.%s\"", where, key);
		}
		if (ret)
			return ret;
	}
	if (!m->source)
		return errf(err, len, -EINVAL, "%s.bind: \"source\" is missing",
			    where);
	return 0;
}

static int parse_files(struct mount_config *m, const char *where, json_t *o,
		       char *err, size_t len)
{
	const char *key;
	json_t *v;

	if (!json_is_object(o) || json_object_size(o) > MOUNTS_FILES_MAX)
		return errf(err, len, -EINVAL,
			    "%s.memory.files: must be an object of at most %u "
			    "\"/path\": \"content\" pairs",
			    where, MOUNTS_FILES_MAX);
	m->files = calloc(json_object_size(o) + 1, sizeof(*m->files));
	if (!m->files)
		return -ENOMEM;
	json_object_foreach(o, key, v)
	{
		struct mount_file *f = &m->files[m->nr_files];
		size_t n;

		if (!json_is_string(v))
			return errf(err, len, -EINVAL,
				    "%s.memory.files[\"%s\"]: content must be "
				    "a string",
				    where, key);
		n = json_string_length(v);
		f->path = strdup(key);
		f->data = malloc(n ? n : 1);
		if (!f->path || !f->data) {
			free(f->path);
			free(f->data);
			f->path = f->data = NULL;
			return -ENOMEM;
		}
		memcpy(f->data, json_string_value(v), n);
		f->len = n;
		m->nr_files++;
	}
	return 0;
}

static int parse_memory(struct mount_config *m, const char *where, json_t *o,
			char *err, size_t len)
{
	const char *key;
	json_t *v;
	int ret = 0;

	m->type = MOUNT_MEMORY;
	if (!json_is_object(o))
		return errf(err, len, -EINVAL,
			    "%s.memory: must be an object (\"files\", "
			    "\"maxBytes\")",
			    where);
	json_object_foreach(o, key, v)
	{
		if (!strcmp(key, "files")) {
			ret = parse_files(m, where, v, err, len);
		} else if (!strcmp(key, "maxBytes")) {
			if (json_is_integer(v) && json_integer_value(v) > 0)
				m->max_bytes = json_integer_value(v);
			else if (!json_is_string(v) ||
				 parse__size(json_string_value(v), INT64_MAX,
					     &m->max_bytes) ||
				 !m->max_bytes)
				ret = errf(err, len, -EINVAL,
					   "%s.memory.maxBytes: must be a "
					   "positive byte count",
					   where);
		} else {
			ret = errf(err, len, -EINVAL,
				   "unknown key \"%s.memory.%s\"", where, key);
		}
		if (ret)
			return ret;
	}
	return 0;
}

static int parse_virtual(struct mount_config *m, const char *where, json_t *o,
			 char *err, size_t len)
{
	const char *key;
	json_t *v;
	int ret = 0;

	m->type = MOUNT_VIRTUAL;
	if (!json_is_object(o))
		return errf(err, len, -EINVAL,
			    "%s.virtual: must be an object (\"socket\", "
			    "\"timeoutMs\")",
			    where);
	json_object_foreach(o, key, v)
	{
		if (!strcmp(key, "socket")) {
			ret = json_str(v, "virtual.socket", &m->socket, err,
				       len);
		} else if (!strcmp(key, "timeoutMs")) {
			if (!json_is_integer(v) || json_integer_value(v) < 1 ||
			    json_integer_value(v) > 3600 * 1000)
				ret = errf(err, len, -EINVAL,
					   "%s.virtual.timeoutMs: must be 1 to "
					   "3600000",
					   where);
			else
				m->timeout_ms = json_integer_value(v);
		} else {
			ret = errf(err, len, -EINVAL,
				   "unknown key \"%s.virtual.%s\"", where, key);
		}
		if (ret)
			return ret;
	}
	if (!m->socket)
		return errf(err, len, -EINVAL,
			    "%s.virtual: \"socket\" is missing", where);
	return 0;
}

int mounts__parse_json(struct mounts_config *mc, void *json_obj, char *err,
		       size_t len)
{
	json_t *obj = json_obj, *src, *v;
	const char *guest, *kind;
	struct mount_config *m;
	int ret = 0;

	if (!json_is_object(obj))
		return errf(err, len, -EINVAL,
			    "\"mounts\" must be an object: {\"/guest/path\": "
			    "{\"bind\"|\"memory\"|\"virtual\": {...}}}");
	json_object_foreach(obj, guest, src)
	{
		char where[80];

		snprintf(where, sizeof(where), "mounts[\"%.60s\"]", guest);
		if (!json_is_object(src) || json_object_size(src) != 1)
			return errf(err, len, -EINVAL,
				    "%s: must be an object with exactly one of "
				    "\"bind\", \"memory\", \"virtual\"",
				    where);
		m = new_mount(mc, guest, err, len, &ret);
		if (!m)
			return ret;
		json_object_foreach(src, kind, v)
		{
			if (!strcmp(kind, "bind"))
				ret = parse_bind(m, where, v, err, len);
			else if (!strcmp(kind, "memory"))
				ret = parse_memory(m, where, v, err, len);
			else if (!strcmp(kind, "virtual"))
				ret = parse_virtual(m, where, v, err, len);
			else
				ret = errf(err, len, -EINVAL,
					   "unknown mount source \"%s.%s\" "
					   "(bind, memory or virtual)",
					   where, kind);
		}
		if (ret)
			return ret;
	}
	return 0;
}

static bool path_within(const char *inner, const char *outer)
{
	size_t n = strlen(outer);

	if (!strcmp(outer, "/"))
		return true;
	return !strncmp(inner, outer, n) &&
	       (inner[n] == '\0' || inner[n] == '/');
}

static int validate_one(const struct mount_config *m, char *err, size_t len)
{
	const char *g = m->guest_path, *why;
	unsigned int i, j;

	switch (m->type) {
	case MOUNT_BIND:
		why = path_problem(m->source, true);
		if (why)
			return errf(err, len, -EINVAL,
				    "mount %s: bind source \"%s\" %s", g,
				    m->source, why);
		for (i = 0; i < m->nr_mask_paths; i++) {
			why = path_problem(m->mask_paths[i], false);
			if (why)
				return errf(err, len, -EINVAL,
					    "mount %s: mask path \"%s\" %s "
					    "(inside the bind)",
					    g, m->mask_paths[i], why);
			for (j = 0; j < i; j++)
				if (!strcmp(m->mask_paths[i], m->mask_paths[j]))
					return errf(err, len, -EINVAL,
						    "mount %s: mask path "
						    "\"%s\" given twice",
						    g, m->mask_paths[i]);
		}
		if (m->nr_mask_paths && !m->read_only && !m->mask_storage)
			return errf(
				err, len, -EINVAL,
				"mount %s: a read-write bind with masked "
				"paths needs mask.storage (where the guest's "
				"entries under them go)",
				g);
		if (m->mask_storage && (m->read_only || !m->nr_mask_paths))
			return errf(err, len, -EINVAL,
				    "mount %s: mask.storage is only for a "
				    "read-write bind with mask.paths",
				    g);
		if (m->mask_storage) {
			why = path_problem(m->mask_storage, false);
			if (why)
				return errf(err, len, -EINVAL,
					    "mount %s: mask.storage \"%s\" %s",
					    g, m->mask_storage, why);
			if (path_within(m->mask_storage, m->source) ||
			    path_within(m->source, m->mask_storage))
				return errf(err, len, -EINVAL,
					    "mount %s: mask.storage \"%s\" and "
					    "the source \"%s\" must not "
					    "contain each other",
					    g, m->mask_storage, m->source);
		}
		return 0;
	case MOUNT_MEMORY:
		for (i = 0; i < m->nr_files; i++) {
			why = path_problem(m->files[i].path, false);
			if (why)
				return errf(err, len, -EINVAL,
					    "mount %s: memory file \"%s\" %s",
					    g, m->files[i].path, why);
		}
		return 0;
	case MOUNT_VIRTUAL:
		if (!m->socket[0] ||
		    strlen(m->socket) >=
			    sizeof(((struct sockaddr_un *)0)->sun_path))
			return errf(err, len, -EINVAL,
				    "mount %s: virtual socket \"%s\": empty or "
				    "longer than a Unix socket path",
				    g, m->socket);
		return 0;
	}
	return -EINVAL;
}

int mounts__validate(const struct mounts_config *mc, char *err, size_t len)
{
	unsigned int i, j;
	int ret;

	for (i = 0; i < mc->nr; i++) {
		ret = validate_one(&mc->m[i], err, len);
		if (ret)
			return ret;
		for (j = 0; j < i; j++)
			if (!strcmp(mc->m[i].guest_path, mc->m[j].guest_path))
				return errf(err, len, -EINVAL,
					    "mount %s: given twice",
					    mc->m[i].guest_path);
	}
	return 0;
}

void mounts__tag(unsigned int index, char *buf, size_t len)
{
	snprintf(buf, len, "kiln%u", index);
}

int mounts__create_backend(const struct mount_config *m, unsigned int index,
			   struct fd_budget *fds, struct fs_backend **out)
{
	char name[80];

	snprintf(name, sizeof(name), "%s:%.60s",
		 m->type == MOUNT_BIND	 ? "bind" :
		 m->type == MOUNT_MEMORY ? "memory" :
					   "virtual",
		 m->guest_path);
	switch (m->type) {
	case MOUNT_BIND: {
		struct fs_bind_params p = {
			.name = name,
			.source = m->source,
			.read_only = m->read_only,
			.mask_paths = (const char *const *)m->mask_paths,
			.nr_mask_paths = m->nr_mask_paths,
			.mask_storage = m->mask_storage,
			.ownership = m->ownership,
			.fds = fds,
		};

		return passthrough__create(out, &p);
	}
	case MOUNT_MEMORY: {
		struct memfs_file *files;
		struct memfs_params p = {
			.name = name,
			.nr_files = m->nr_files,
			.max_bytes = m->max_bytes,
		};
		unsigned int i;
		int ret;

		files = calloc(m->nr_files + 1, sizeof(*files));
		if (!files)
			return -ENOMEM;
		for (i = 0; i < m->nr_files; i++)
			files[i] =
				(struct memfs_file){ .path = m->files[i].path,
						     .data = m->files[i].data,
						     .len = m->files[i].len };
		p.files = files;
		ret = memfs__create(out, &p);
		free(files);
		return ret;
	}
	case MOUNT_VIRTUAL: {
		struct virtual_fs_params p = {
			.name = name,
			.socket = m->socket,
			.timeout_ms = m->timeout_ms,
		};

		return virtual_fs__create(out, &p);
	}
	}
	return -EINVAL;
}

/* Parents before children: the init mounts in this order. */
static int by_guest_path(const void *a, const void *b)
{
	const struct mount_config *const *x = a, *const *y = b;

	return strcmp((*x)->guest_path, (*y)->guest_path);
}

/* The mounts parents first: by guest path. */
static void sorted(const struct mounts_config *mc,
		   const struct mount_config **order)
{
	for (unsigned int i = 0; i < mc->nr; i++)
		order[i] = &mc->m[i];
	qsort(order, mc->nr, sizeof(order[0]), by_guest_path);
}

static bool guest_read_only(const struct mount_config *m)
{
	return m->type == MOUNT_BIND && m->read_only;
}

int mounts__manifest(const struct mounts_config *mc, uint8_t **out, size_t *len)
{
	const struct mount_config *order[MOUNTS_MAX];
	size_t size = 0, at = 0;
	unsigned int i;
	uint8_t *buf;
	char tag[16];

	for (i = 0; i < mc->nr; i++)
		size += sizeof(tag) + strlen(mc->m[i].guest_path) + 1 + 3;
	sorted(mc, order);
	buf = malloc(size ? size : 1);
	if (!buf)
		return -ENOMEM;
	for (i = 0; i < mc->nr; i++) {
		const struct mount_config *m = order[i];
		int n;

		mounts__tag((unsigned int)(m - mc->m), tag, sizeof(tag));
		n = snprintf((char *)buf + at, size - at, "%s", tag);
		at += n + 1;
		n = snprintf((char *)buf + at, size - at, "%s", m->guest_path);
		at += n + 1;
		n = snprintf((char *)buf + at, size - at, "%s",
			     guest_read_only(m) ? "ro" : "rw");
		at += n + 1;
	}
	*out = buf;
	*len = at;
	return 0;
}

int mounts__agent_list(const struct mounts_config *mc, struct kiln_buf *b)
{
	const struct mount_config *order[MOUNTS_MAX];
	struct kiln_mount *list;
	int ret;

	list = calloc(mc->nr ? mc->nr : 1, sizeof(*list));
	if (!list)
		return -ENOMEM;
	sorted(mc, order);
	for (unsigned int i = 0; i < mc->nr; i++) {
		mounts__tag((unsigned int)(order[i] - mc->m), list[i].tag,
			    sizeof(list[i].tag));
		snprintf(list[i].path, sizeof(list[i].path), "%s",
			 order[i]->guest_path);
		list[i].read_only = guest_read_only(order[i]);
	}
	ret = kiln_mounts__encode(b, list, mc->nr);
	free(list);
	return ret;
}
