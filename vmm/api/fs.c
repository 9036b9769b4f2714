// SPDX-License-Identifier: GPL-2.0
/*
 * Control API files: fs.* (stat, readDir, readFile, writeFile with its
 * upload stream, mkdir, remove, rename) on guest paths.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vmm/api/api-internal.h"

static const char *const file_types[] = {
	[KILN_FILE_REGULAR] = "file",
	[KILN_FILE_DIRECTORY] = "directory",
	[KILN_FILE_SYMLINK] = "symlink",
	[KILN_FILE_OTHER] = "other",
};

/* The stat fields of a RESULT or a T_ENTRY (with its T_NAME). */
static json_t *stat_json(const uint8_t *p, size_t len)
{
	struct kiln_tlv_iter it;
	const uint8_t *val;
	json_t *o = json_object();
	const char *key;
	uint32_t vlen;
	uint16_t tag;
	uint64_t v;

	kiln_tlv__iter(&it, p, len);
	while (o && kiln_tlv__next(&it, &tag, &val, &vlen) == 1) {
		switch (tag) {
		case KILN_T_NAME:
			api_json_guest_bytes(o, "name", val, vlen);
			continue;
		case KILN_T_LINK_TARGET:
			api_json_guest_bytes(o, "linkTarget", val, vlen);
			continue;
		case KILN_T_TYPE:
			if (kiln_tlv__u64(val, vlen, &v))
				continue;
			json_object_set_new(
				o, "type",
				json_string(v < ARRAY_SIZE(file_types) &&
							    file_types[v] ?
						    file_types[v] :
						    "other"));
			continue;
		case KILN_T_MODE:
			key = "mode";
			break;
		case KILN_T_SIZE:
			key = "size";
			break;
		case KILN_T_MTIME_NS:
			key = "mtimeNs";
			break;
		case KILN_T_UID:
			key = "uid";
			break;
		case KILN_T_GID:
			key = "gid";
			break;
		default:
			continue;
		}
		if (!kiln_tlv__u64(val, vlen, &v))
			json_object_set_new(o, key,
					    json_integer((json_int_t)v));
	}
	return o;
}

static uint64_t result_size(const uint8_t *p, size_t len, uint64_t dflt)
{
	struct kiln_tlv_iter it;
	const uint8_t *val;
	uint32_t vlen;
	uint16_t tag;
	uint64_t v = dflt;

	kiln_tlv__iter(&it, p, len);
	while (kiln_tlv__next(&it, &tag, &val, &vlen) == 1)
		if (tag == KILN_T_SIZE)
			kiln_tlv__u64(val, vlen, &v);
	return v;
}

/*
 * One fs.chunk: written by hand like a stream's stdout (client.c,
 * client_notify_data), jansson's dump of the base64 string being most of
 * what a chunk cost; through jansson only for a request id too long for
 * that (an id is whatever JSON the client chose). With raw, the line
 * says the size and the bytes follow it (client_notify_body).
 */
static void chunk_notify(struct call *k, const uint8_t *p, size_t len)
{
	uint64_t off = k->offset + k->bytes;
	char fields[API_NOTIFY_FIELDS_MAX];
	char *id;
	int n = -1;

	if (k->raw) {
		client_notify_body(k->client, "fs.chunk",
				   json_pack("{s:O, s:I}", "id", k->id,
					     "offset", (json_int_t)off),
				   p, len);
		return;
	}
	id = json_dumps(k->id, JSON_ENCODE_ANY | JSON_COMPACT);
	if (id)
		n = snprintf(fields, sizeof(fields),
			     "\"id\":%s,\"offset\":%" PRIu64, id, off);
	free(id);
	if (n >= 0 && (size_t)n < sizeof(fields) &&
	    client_notify_bytes(k->client, "fs.chunk", fields, p, len))
		return;
	client_notify(k->client, "fs.chunk",
		      json_pack("{s:O, s:I, s:o}", "id", k->id, "offset",
				(json_int_t)off, "data",
				api_json_base64(p, len)));
}

static void read_data(struct call *k, const uint8_t *p, size_t len)
{
	int ret;

	if (k->streamed) {
		chunk_notify(k, p, len);
	} else if (k->out_acc.len + len > API_READ_INLINE_MAX ||
		   bytequeue__append(&k->out_acc, p, len)) {
		call_fail(k, API_E_LIMIT,
			  json_pack("{s:I}", "limit",
				    (json_int_t)API_READ_INLINE_MAX),
			  "file too large for one answer: use stream or "
			  "offset/length");
		call_done(k);
		return;
	}
	/* Kept for the answer (the append above is what it costs). */
	ret = k->streamed ? 0 : call_hold(k, len);
	if (ret) {
		call_fail_held(k, ret);
		return;
	}
	k->bytes += len;
}

/*
 * A scoped call's path led out of its granted directory in the guest (a
 * symlink, a ".."): refused as the gate refuses, naming the facet.
 */
static bool denied_exdev(struct call *k, const uint8_t *p, size_t len)
{
	char msg[256];
	json_t *data = call_errno_data(p, len, msg, sizeof(msg));

	if (json_integer_value(json_object_get(data, "errnoValue")) != EXDEV) {
		json_decref(data);
		return false;
	}
	call_fail(k, API_E_DENIED, data, k->denied);
	call_done(k);
	return true;
}

void fs_frame(struct call *k, uint16_t type, uint16_t flags, const uint8_t *p,
	      size_t len)
{
	json_t *res;

	if (type == KILN_MSG_ERROR && k->denied && denied_exdev(k, p, len))
		return;
	if (type == KILN_MSG_ERROR) {
		call_errno(k, p, len);
		return;
	}
	if (type == KILN_MSG_FS_DATA && k->kind == CALL_READ) {
		read_data(k, p, len);
		return;
	}
	if (type != KILN_MSG_RESULT) {
		call_lost(k, "agent protocol error: unexpected message");
		return;
	}
	switch (k->kind) {
	case CALL_READDIR:
		call_list_result(k, p, len, KILN_T_ENTRY, stat_json, "entries");
		return;
	case CALL_STAT:
		res = stat_json(p, len);
		break;
	case CALL_READ:
		res = json_pack("{s:I}", "size",
				(json_int_t)result_size(p, len, k->bytes));
		if (res && !k->streamed)
			json_object_set_new(
				res, "data",
				api_json_base64(bytequeue__peek(&k->out_acc),
						k->out_acc.len));
		break;
	case CALL_WRITE:
		res = json_pack("{s:I}", "size",
				(json_int_t)result_size(p, len, k->bytes));
		if (k->has_close_id) {
			client_reply(k->client, k->close_id, res);
			k->has_close_id = false;
			res = NULL;
		}
		break;
	default:
		res = json_object();
		break;
	}
	k->done_frame = true;
	call_reply(k, res);
	call_done(k);
}

static uint16_t beneath_tag(uint16_t path_tag)
{
	return path_tag == KILN_T_PATH2 ? KILN_T_BENEATH2 : KILN_T_BENEATH;
}

/*
 * A guest path: key as a string or keyBytes in base64; absolute. On a
 * scoped socket, with the granted directory it stays beneath.
 */
static bool param_path(struct rpc *r, const char *key, struct kiln_buf *b,
		       uint16_t tag)
{
	char bkey[64];
	const char *s;
	uint8_t *raw;
	size_t n;
	bool ok;

	snprintf(bkey, sizeof(bkey), "%sBytes", key);
	if (json_object_get(r->params, bkey)) {
		if (!param_b64(r, bkey, &raw, &n))
			return false;
		ok = n && raw[0] == '/' && !memchr(raw, 0, n);
		if (ok && kiln_tlv__put_bytes(b, tag, raw, n))
			ok = !param_error(r, "%s: too long", bkey);
		else if (!ok)
			param_error(r, "%s: expected an absolute path", bkey);
		ok = ok && grant_put_beneath(r, b, beneath_tag(tag), raw, n);
		free(raw);
		return ok;
	}
	if (!param_str(r, key, true, &s, &n))
		return false;
	if (s[0] != '/')
		return param_error(r, "%s: expected an absolute path", key);
	if (kiln_tlv__put_bytes(b, tag, s, n))
		return param_error(r, "%s: too long", key);
	return grant_put_beneath(r, b, beneath_tag(tag), s, n);
}

/* A mode: an integer or an octal string such as "0755". */
static bool param_mode(struct rpc *r, struct kiln_buf *b)
{
	json_t *v = json_object_get(r->params, "mode");
	unsigned long m;
	char *end;

	if (!v)
		return true;
	if (json_is_integer(v) && json_integer_value(v) >= 0 &&
	    json_integer_value(v) <= 07777) {
		m = json_integer_value(v);
	} else if (json_is_string(v) && json_string_length(v)) {
		errno = 0;
		m = strtoul(json_string_value(v), &end, 8);
		if (*end || errno || m > 07777)
			return param_error(r, "mode: expected an octal string "
					      "such as \"0644\"");
	} else {
		return param_error(r, "mode: expected 0 to 4095 or an octal "
				      "string");
	}
	return kiln_tlv__put_u64(b, KILN_T_MODE, m) == 0;
}

/* fs.stat, fs.readDir, fs.mkdir, fs.remove: a path and some flags. */
static void fs_simple(struct rpc *r, enum call_kind kind, uint16_t type)
{
	bool recursive = false, force = false, streamed = false;
	struct kiln_buf b;
	struct call *k;
	int ret = 0;

	kiln_buf__init(&b);
	if (!param_path(r, "path", &b, KILN_T_PATH) ||
	    !param_bool(r, "recursive", &recursive) ||
	    !param_bool(r, "force", &force))
		goto out;
	/* fs.readDir: entries as notifications (list_stream_out). */
	if (kind == CALL_READDIR && !param_bool(r, "stream", &streamed))
		goto out;
	if (streamed && !r->id) {
		param_error(r, "stream: needs a request id");
		goto out;
	}
	if (kind == CALL_MKDIR && !param_mode(r, &b))
		goto out;
	if (recursive)
		ret = kiln_tlv__put_u64(&b, KILN_T_RECURSIVE, 1);
	if (force)
		ret = ret ?: kiln_tlv__put_u64(&b, KILN_T_FORCE, 1);
	if (ret) {
		param_error(r, "path: too long");
		goto out;
	}
	k = call_new(r, kind, false);
	if (!k)
		goto out;
	k->streamed = streamed;
	grant_note_call(r, k);
	call_start(k, type, &b);
out:
	kiln_buf__free(&b);
}

static void m_fs_stat(struct rpc *r)
{
	fs_simple(r, CALL_STAT, KILN_MSG_FS_STAT);
}

static void m_fs_readdir(struct rpc *r)
{
	fs_simple(r, CALL_READDIR, KILN_MSG_FS_READDIR);
}

static void m_fs_mkdir(struct rpc *r)
{
	fs_simple(r, CALL_MKDIR, KILN_MSG_FS_MKDIR);
}

static void m_fs_remove(struct rpc *r)
{
	fs_simple(r, CALL_REMOVE, KILN_MSG_FS_REMOVE);
}

static void m_fs_rename(struct rpc *r)
{
	struct kiln_buf b;
	struct call *k;

	kiln_buf__init(&b);
	if (!param_path(r, "from", &b, KILN_T_PATH) ||
	    !param_path(r, "to", &b, KILN_T_PATH2))
		goto out;
	k = call_new(r, CALL_RENAME, false);
	if (k) {
		grant_note_call(r, k);
		call_start(k, KILN_MSG_FS_RENAME, &b);
	}
out:
	kiln_buf__free(&b);
}

static void m_fs_readfile(struct rpc *r)
{
	uint64_t offset = 0, length = UINT64_MAX;
	bool streamed = false, raw = false;
	struct kiln_buf b;
	struct call *k;
	int ret = 0;

	kiln_buf__init(&b);
	if (!param_path(r, "path", &b, KILN_T_PATH) ||
	    !param_uint(r, "offset", INT64_MAX, &offset) ||
	    !param_uint(r, "length", INT64_MAX, &length) ||
	    !param_bool(r, "stream", &streamed) || !param_bool(r, "raw", &raw))
		goto out;
	if (streamed && !r->id) {
		param_error(r, "stream: needs a request id");
		goto out;
	}
	if (raw && !streamed) {
		param_error(r, "raw: only with stream (the chunks' bodies)");
		goto out;
	}
	if (!streamed && length != UINT64_MAX && length > API_READ_INLINE_MAX) {
		param_error(r, "length: at most %u without stream",
			    API_READ_INLINE_MAX);
		goto out;
	}
	if (offset)
		ret = kiln_tlv__put_u64(&b, KILN_T_OFFSET, offset);
	if (length != UINT64_MAX)
		ret = ret ?: kiln_tlv__put_u64(&b, KILN_T_LENGTH, length);
	if (ret) {
		param_error(r, "path: too long");
		goto out;
	}
	k = call_new(r, CALL_READ, false);
	if (!k)
		goto out;
	k->streamed = streamed;
	k->raw = raw;
	k->offset = offset;
	grant_note_call(r, k);
	call_start(k, KILN_MSG_FS_READ, &b);
out:
	kiln_buf__free(&b);
}

static void m_fs_writefile(struct rpc *r)
{
	bool parents = false, streamed = false;
	struct kiln_buf b;
	uint8_t *data = NULL;
	size_t len = 0;
	struct call *k;

	kiln_buf__init(&b);
	if (!param_path(r, "path", &b, KILN_T_PATH) || !param_mode(r, &b) ||
	    !param_bool(r, "createParents", &parents) ||
	    !param_bool(r, "stream", &streamed) ||
	    !param_b64(r, "data", &data, &len))
		goto out;
	if (streamed && (data || !r->id)) {
		param_error(r, "stream: needs a request id and no data");
		goto out;
	}
	if (parents && kiln_tlv__put_u64(&b, KILN_T_CREATE_PARENTS, 1)) {
		param_error(r, "path: too long");
		goto out;
	}
	k = call_new(r, CALL_WRITE, streamed);
	if (!k)
		goto out;
	k->upload = data;
	k->upload_len = len;
	data = NULL;
	grant_note_call(r, k);
	call_start(k, KILN_MSG_FS_WRITE, &b);
out:
	free(data);
	kiln_buf__free(&b);
}

#define KINDS_UPLOAD (1U << CALL_WRITE)

/* An upload that failed tells every later fs.write and fs.close. */
static bool upload_failed(struct rpc *r, struct call *k)
{
	json_t *e = k->error;

	if (!e)
		return false;
	client_reply_error(r->c, r->id,
			   json_integer_value(json_object_get(e, "code")),
			   json_incref(json_object_get(e, "data")), "%s",
			   json_string_value(json_object_get(e, "message")));
	return true;
}

/*
 * A body that the connection cut short: this write, and the upload with
 * it, end with the error (the guest keeps what it wrote before; the
 * partial body is not written).
 */
static void write_cut(struct rpc *r, struct call *k)
{
	json_int_t size =
		json_integer_value(json_object_get(r->params, "size"));

	client_reply_error(r->c, r->id, API_E_INVALID_REQUEST,
			   json_pack("{s:I, s:I}", "received",
				     (json_int_t)r->body_len, "size", size),
			   "the connection ended %zu bytes into a body of "
			   "%lld; the upload is abandoned",
			   r->body_len, (long long)size);
	call_abort(k, false);
}

/*
 * fs.write {stream, data}: the bytes in base64; {stream, size}: the
 * size raw bytes after the request's line (client.c, "Bodies").
 */
static void m_fs_write(struct rpc *r)
{
	struct call *k = call_find_stream(r, KINDS_UPLOAD);
	const uint8_t *p;
	uint8_t *data = NULL;
	size_t len;

	if (k && r->body_cut) {
		write_cut(r, k);
		return;
	}
	if (!k || upload_failed(r, k))
		return;
	if (r->has_body && json_object_get(r->params, "data")) {
		param_error(r, "data and size: one or the other (size: the "
			       "raw body after the line)");
		return;
	}
	if (r->has_body) {
		p = r->body;
		len = r->body_len;
	} else if (param_b64(r, "data", &data, &len)) {
		p = data;
	} else {
		return;
	}
	if (k->stdin_closed) {
		param_error(r, "stream %llu: already closed",
			    (unsigned long long)k->stream);
	} else {
		if (len)
			agent_send_data(k, KILN_MSG_FS_DATA, p, len, false);
		k->bytes += len;
		call_write_done(k, r->id);
	}
	free(data);
}

static void m_fs_close(struct rpc *r)
{
	struct call *k = call_find_stream(r, KINDS_UPLOAD);

	if (!k)
		return;
	if (upload_failed(r, k)) {
		k->parked = false;
		call_done(k);
		return;
	}
	if (k->stdin_closed) {
		param_error(r, "stream %llu: already closed",
			    (unsigned long long)k->stream);
		return;
	}
	agent_send(k, KILN_MSG_FS_DATA, KILN_F_EOF, NULL, 0);
	k->stdin_closed = true;
	k->close_id = json_incref(r->id);
	k->has_close_id = true;
}

const struct api_method fs_methods[] = {
	{ "fs.stat", m_fs_stat },	  { "fs.readDir", m_fs_readdir },
	{ "fs.readFile", m_fs_readfile }, { "fs.writeFile", m_fs_writefile },
	{ "fs.write", m_fs_write, true }, { "fs.close", m_fs_close },
	{ "fs.mkdir", m_fs_mkdir },	  { "fs.remove", m_fs_remove },
	{ "fs.rename", m_fs_rename },	  { NULL, NULL },
};
