// SPDX-License-Identifier: GPL-2.0
/*
 * Control API containers: container.create, container.delete,
 * container.list (the agent's CONTAINER_* requests), and the container
 * fields exec, spawn and pty.open take (container, uid, gid,
 * additionalGids, rlimits, noNewPrivileges). Every parameter is checked
 * here before anything reaches the guest; the agent checks again.
 */
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

#include "vmm/api/api-internal.h"

#define API_GID_INVALID 0xffffffffLL /* (gid_t)-1: no gid */
#define API_RLIM_INF	(~0ULL)	     /* RLIM_INFINITY on the wire */

static const char *const mount_types[] = {
	"bind", "tmpfs", "proc", "sysfs", "devpts", "mqueue", "cgroup2",
};

static const struct {
	const char *name;
	int resource;
} rlimit_names[] = {
	{ "RLIMIT_CPU", RLIMIT_CPU },
	{ "RLIMIT_FSIZE", RLIMIT_FSIZE },
	{ "RLIMIT_DATA", RLIMIT_DATA },
	{ "RLIMIT_STACK", RLIMIT_STACK },
	{ "RLIMIT_CORE", RLIMIT_CORE },
	{ "RLIMIT_RSS", RLIMIT_RSS },
	{ "RLIMIT_NPROC", RLIMIT_NPROC },
	{ "RLIMIT_NOFILE", RLIMIT_NOFILE },
	{ "RLIMIT_MEMLOCK", RLIMIT_MEMLOCK },
	{ "RLIMIT_AS", RLIMIT_AS },
	{ "RLIMIT_LOCKS", RLIMIT_LOCKS },
	{ "RLIMIT_SIGPENDING", RLIMIT_SIGPENDING },
	{ "RLIMIT_MSGQUEUE", RLIMIT_MSGQUEUE },
	{ "RLIMIT_NICE", RLIMIT_NICE },
	{ "RLIMIT_RTPRIO", RLIMIT_RTPRIO },
	{ "RLIMIT_RTTIME", RLIMIT_RTTIME },
};

static bool too_long(struct rpc *r)
{
	return param_error(r, "the request is too long (limit %u bytes)",
			   KILN_FRAME_MAX);
}

/* A container id: 1 to KILN_CONTAINER_ID_MAX of [A-Za-z0-9_.-]. */
static bool id_ok(const char *s, size_t n)
{
	if (!n || n > KILN_CONTAINER_ID_MAX || !strcmp(s, ".") ||
	    !strcmp(s, ".."))
		return false;
	return strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
			 "0123456789_.-") == n;
}

static bool param_id(struct rpc *r, const char *key, bool required,
		     struct kiln_buf *b)
{
	const char *s;
	size_t n;

	if (!param_str(r, key, required, &s, &n))
		return false;
	if (!s)
		return true;
	if (!id_ok(s, n))
		return param_error(r,
				   "%s: expected 1 to %u characters of "
				   "A-Z a-z 0-9 _ . - (not \".\" or \"..\")",
				   key, KILN_CONTAINER_ID_MAX);
	if (kiln_tlv__put_bytes(b, KILN_T_CONTAINER, s, n))
		return too_long(r);
	return true;
}

/* An absolute path without NUL, as a string field @key of @obj. */
static bool abs_path(struct rpc *r, json_t *obj, const char *key,
		     const char *what, const char **s, size_t *n)
{
	json_t *v = json_object_get(obj, key);

	*s = json_string_value(v);
	if (!*s)
		return param_error(r, "%s: expected an absolute path", what);
	*n = json_string_length(v);
	if (strlen(*s) != *n || (*s)[0] != '/')
		return param_error(r, "%s: expected an absolute path", what);
	return true;
}

static bool known_type(const char *t)
{
	for (size_t i = 0; i < ARRAY_SIZE(mount_types); i++)
		if (!strcmp(t, mount_types[i]))
			return true;
	return false;
}

/* mounts[i]: {destination, type, source, options} into one T_CMOUNT. */
static bool param_mount(struct rpc *r, json_t *m, size_t i, struct kiln_buf *b)
{
	json_t *opts = json_object_get(m, "options"), *o;
	const char *dst, *type, *src;
	char what[48];
	size_t n, mark, j;
	int ret;

	if (!json_is_object(m))
		return param_error(r, "mounts[%zu]: expected an object", i);
	snprintf(what, sizeof(what), "mounts[%zu].destination", i);
	if (!abs_path(r, m, "destination", what, &dst, &n))
		return false;
	type = json_string_value(json_object_get(m, "type"));
	if (!type || !known_type(type))
		return param_error(r,
				   "mounts[%zu].type: expected \"bind\", "
				   "\"tmpfs\", \"proc\", \"sysfs\", "
				   "\"devpts\", \"mqueue\" or \"cgroup2\"",
				   i);
	src = json_string_value(json_object_get(m, "source"));
	if (json_object_get(m, "source") &&
	    (!src ||
	     strlen(src) != json_string_length(json_object_get(m, "source"))))
		return param_error(r, "mounts[%zu].source: expected a string",
				   i);
	if (!strcmp(type, "bind") && (!src || src[0] != '/'))
		return param_error(r,
				   "mounts[%zu].source: a bind mount needs "
				   "an absolute guest path",
				   i);
	if (opts && !json_is_array(opts))
		return param_error(r,
				   "mounts[%zu].options: expected an array "
				   "of strings",
				   i);
	ret = kiln_tlv__begin(b, KILN_T_CMOUNT, &mark);
	ret = ret ?: kiln_tlv__put_bytes(b, KILN_T_PATH, dst, n);
	ret = ret ?: kiln_tlv__put_str(b, KILN_T_FSTYPE, type);
	if (src)
		ret = ret ?: kiln_tlv__put_str(b, KILN_T_SOURCE, src);
	json_array_foreach(opts, j, o)
	{
		if (!json_is_string(o) || !json_string_length(o) ||
		    strlen(json_string_value(o)) != json_string_length(o))
			return param_error(r,
					   "mounts[%zu].options[%zu]: "
					   "expected a non-empty string",
					   i, j);
		ret = ret   ?:
			      kiln_tlv__put_str(b, KILN_T_OPTION,
						json_string_value(o));
	}
	if (ret)
		return too_long(r);
	kiln_tlv__end(b, mark);
	return true;
}

static void m_container_create(struct rpc *r)
{
	json_t *mounts = json_object_get(r->params, "mounts"), *m;
	const char *root, *host;
	bool ro = false;
	struct kiln_buf b;
	struct call *k;
	size_t n, i;

	kiln_buf__init(&b);
	if (!param_id(r, "id", true, &b) ||
	    !abs_path(r, r->params, "root", "root", &root, &n) ||
	    !param_bool(r, "rootReadonly", &ro))
		goto out;
	if (kiln_tlv__put_bytes(&b, KILN_T_PATH, root, n) ||
	    kiln_tlv__put_u64(&b, KILN_T_READ_ONLY, ro)) {
		too_long(r);
		goto out;
	}
	if (!param_str(r, "hostname", false, &host, &n))
		goto out;
	if (host && (!n || n > KILN_HOSTNAME_MAX)) {
		param_error(r, "hostname: expected 1 to %u bytes",
			    KILN_HOSTNAME_MAX);
		goto out;
	}
	if (host && kiln_tlv__put_bytes(&b, KILN_T_HOSTNAME, host, n)) {
		too_long(r);
		goto out;
	}
	if (mounts && (!json_is_array(mounts) ||
		       json_array_size(mounts) > KILN_CMOUNTS_MAX)) {
		param_error(r, "mounts: expected an array of at most %u",
			    KILN_CMOUNTS_MAX);
		goto out;
	}
	json_array_foreach(mounts, i,
			   m) if (!param_mount(r, m, i, &b)) goto out;
	k = call_new(r, CALL_CONTAINER, false);
	if (!k)
		goto out;
	k->need_features = KILN_FEATURE_CONTAINER;
	call_start(k, KILN_MSG_CONTAINER_CREATE, &b);
out:
	kiln_buf__free(&b);
}

static void m_container_delete(struct rpc *r)
{
	struct kiln_buf b;
	struct call *k;

	kiln_buf__init(&b);
	if (!param_id(r, "id", true, &b))
		goto out;
	k = call_new(r, CALL_CONTAINER, false);
	if (!k)
		goto out;
	k->need_features = KILN_FEATURE_CONTAINER;
	call_start(k, KILN_MSG_CONTAINER_DELETE, &b);
out:
	kiln_buf__free(&b);
}

static void m_container_list(struct rpc *r)
{
	struct kiln_buf b;
	struct call *k = call_new(r, CALL_CONTAINER_LIST, false);

	kiln_buf__init(&b);
	if (!k)
		return;
	k->need_features = KILN_FEATURE_CONTAINER;
	call_start(k, KILN_MSG_CONTAINER_LIST, &b);
}

/* One T_CONTAINER_ENTRY: {"id", "pids": [...]}; NULL when malformed. */
static json_t *container_json(const uint8_t *p, size_t len)
{
	json_t *o = json_object(), *pids = json_array();
	struct kiln_tlv_iter it;
	const uint8_t *val;
	uint32_t vlen;
	uint16_t tag;
	uint64_t pid;

	if (!o || !pids)
		goto fail;
	kiln_tlv__iter(&it, p, len);
	while (kiln_tlv__next(&it, &tag, &val, &vlen) == 1) {
		if (tag == KILN_T_CONTAINER)
			api_json_guest_bytes(o, "id", val, vlen);
		else if (tag == KILN_T_PID && !kiln_tlv__u64(val, vlen, &pid))
			json_array_append_new(pids, json_integer(pid));
	}
	json_object_set_new(o, "pids", pids);
	return o;
fail:
	json_decref(o);
	json_decref(pids);
	return NULL;
}

/* CONTAINER_LIST's RESULT (one frame): the array of its entries. */
static json_t *list_json(const uint8_t *p, size_t len)
{
	json_t *list = json_array(), *e;
	struct kiln_tlv_iter it;
	const uint8_t *val;
	uint32_t vlen;
	uint16_t tag;

	kiln_tlv__iter(&it, p, len);
	while (list && kiln_tlv__next(&it, &tag, &val, &vlen) == 1) {
		if (tag != KILN_T_CONTAINER_ENTRY)
			continue;
		e = container_json(val, vlen);
		if (e)
			json_array_append_new(list, e);
	}
	return list;
}

void container_frame(struct call *k, uint16_t type, uint16_t flags,
		     const uint8_t *p, size_t len)
{
	if (type == KILN_MSG_ERROR) {
		call_errno(k, p, len);
		return;
	}
	if (type != KILN_MSG_RESULT) {
		call_lost(k, "agent protocol error: unexpected message");
		return;
	}
	k->done_frame = true;
	call_reply(k, k->kind == CALL_CONTAINER_LIST ? list_json(p, len) :
						       json_object());
	call_done(k);
}

/* rlimits: [{"type": "RLIMIT_NOFILE", "soft": n, "hard": n}]. */
static bool param_rlimits(struct rpc *r, struct kiln_buf *b)
{
	json_t *list = json_object_get(r->params, "rlimits"), *e, *soft, *hard;
	const char *type;
	size_t i, j, mark;
	int ret = 0;

	if (!list)
		return true;
	if (!json_is_array(list) ||
	    json_array_size(list) > ARRAY_SIZE(rlimit_names))
		return param_error(r,
				   "rlimits: expected an array of at most "
				   "%zu",
				   ARRAY_SIZE(rlimit_names));
	json_array_foreach(list, i, e)
	{
		type = json_string_value(json_object_get(e, "type"));
		for (j = 0; type && j < ARRAY_SIZE(rlimit_names); j++)
			if (!strcmp(type, rlimit_names[j].name))
				break;
		if (!type || j == ARRAY_SIZE(rlimit_names))
			return param_error(r,
					   "rlimits[%zu].type: expected a name "
					   "such as \"RLIMIT_NOFILE\"",
					   i);
		soft = json_object_get(e, "soft");
		hard = json_object_get(e, "hard");
		/* JSON's integers stop at 2^63-1: RLIM_INFINITY is -1. */
		if (!json_is_integer(soft) || !json_is_integer(hard) ||
		    json_integer_value(soft) < -1 ||
		    json_integer_value(hard) < -1 ||
		    (uint64_t)json_integer_value(soft) >
			    (uint64_t)json_integer_value(hard))
			return param_error(r,
					   "rlimits[%zu]: soft and hard are "
					   "integers (-1: unlimited), soft "
					   "at most hard",
					   i);
		ret = ret ?: kiln_tlv__begin(b, KILN_T_RLIMIT, &mark);
		ret = ret   ?:
			      kiln_tlv__put_u64(b, KILN_T_RESOURCE,
						rlimit_names[j].resource);
		ret = ret   ?:
			      kiln_tlv__put_u64(b, KILN_T_SOFT,
						json_integer_value(soft));
		ret = ret   ?:
			      kiln_tlv__put_u64(b, KILN_T_HARD,
						json_integer_value(hard));
		if (!ret)
			kiln_tlv__end(b, mark);
	}
	return ret ? too_long(r) : true;
}

/* uid, gid, additionalGids: numeric, instead of user. */
static bool param_ids(struct rpc *r, struct kiln_buf *b, bool *set)
{
	json_t *gids = json_object_get(r->params, "additionalGids"), *g;
	uint64_t uid = 0, gid = 0;
	bool has_uid = json_object_get(r->params, "uid") != NULL;
	bool has_gid = json_object_get(r->params, "gid") != NULL;
	size_t i;
	int ret;

	*set = has_uid || has_gid || gids;
	if (!*set)
		return true;
	if (json_object_get(r->params, "user"))
		return param_error(r, "user: not with uid, gid or "
				      "additionalGids");
	if (!has_uid)
		return param_error(r, "uid: missing (gid and additionalGids "
				      "need it)");
	if (!param_uint(r, "uid", API_GID_INVALID - 1, &uid) ||
	    !param_uint(r, "gid", API_GID_INVALID - 1, &gid))
		return false;
	if (gids &&
	    (!json_is_array(gids) || json_array_size(gids) > KILN_GROUPS_MAX))
		return param_error(r,
				   "additionalGids: expected an array of "
				   "at most %u gids",
				   KILN_GROUPS_MAX);
	ret = kiln_tlv__put_u64(b, KILN_T_UID, uid);
	ret = ret ?: kiln_tlv__put_u64(b, KILN_T_GID, gid);
	json_array_foreach(gids, i, g)
	{
		if (!json_is_integer(g) || json_integer_value(g) < 0 ||
		    json_integer_value(g) >= API_GID_INVALID)
			return param_error(r,
					   "additionalGids[%zu]: a gid is "
					   "from 0 to %llu",
					   i, API_GID_INVALID - 1);
		ret = ret   ?:
			      kiln_tlv__put_u64(b, KILN_T_GROUP,
						json_integer_value(g));
	}
	return ret ? too_long(r) : true;
}

bool container_proc_params(struct rpc *r, struct kiln_buf *b, uint64_t *need)
{
	bool ids = false, nnp = false, in = false;
	json_t *limits = json_object_get(r->params, "rlimits");

	if (!param_id(r, "container", false, b))
		return false;
	in = json_object_get(r->params, "container") != NULL;
	if (in && json_object_get(r->params, "user"))
		return param_error(r, "user: not with container (give uid "
				      "and gid: the container's /etc/passwd "
				      "is not read)");
	if (!param_ids(r, b, &ids) || !param_rlimits(r, b) ||
	    !param_bool(r, "noNewPrivileges", &nnp))
		return false;
	if (nnp && kiln_tlv__put_u64(b, KILN_T_NO_NEW_PRIVS, 1))
		return too_long(r);
	if (in || ids || nnp || limits)
		*need |= KILN_FEATURE_CONTAINER;
	return true;
}

const struct api_method container_methods[] = {
	{ "container.create", m_container_create },
	{ "container.delete", m_container_delete },
	{ "container.list", m_container_list },
	{ NULL, NULL },
};
