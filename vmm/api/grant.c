// SPDX-License-Identifier: GPL-2.0
/*
 * Scoped control sockets (Documentation/personas.md): vm.grant opens
 * another socket whose connections may call only what a persona's grant
 * allows, vm.revoke (or the grant's expiry) closes it with every
 * connection on it. The method gate is here (api__grant_gate, called
 * for each request of a scoped client before its method runs); what the
 * guest enforces besides travels with each request: T_AS_UID on every
 * request (call_start), T_BENEATH on every path (fs.c).
 */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "lib/base64.h"
#include "vmm/api/api-internal.h"

#define GRANT_SHOWN 200 /* bytes of a path a refusal repeats */

/* ---- the grant's spec ---------------------------------------------------- */

static int spec_error(char *err, size_t len, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int spec_error(char *err, size_t len, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err, len, fmt, ap);
	va_end(ap);
	return -EINVAL;
}

void api__grant_release(struct api_grant_spec *g)
{
	for (unsigned int i = 0; i < g->nr_paths; i++)
		free(g->paths[i]);
	memset(g, 0, sizeof(*g));
}

/* Letters, digits, '.', '_', '-': a name that reads well in a message. */
static bool persona_ok(const char *s, size_t n)
{
	if (!n || n > API_PERSONA_MAX)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!isalnum((unsigned char)s[i]) && !strchr("._-", s[i]))
			return false;
	return true;
}

/*
 * A granted path: absolute, no "." or ".." component, into its one
 * spelling (no "//", no trailing '/' but for "/" itself); NULL when it
 * is not one.
 */
static char *normalize_path(const char *s)
{
	size_t n = strlen(s), o = 0, c;
	char *out;

	if (!n || s[0] != '/' || n >= PATH_MAX)
		return NULL;
	out = malloc(n + 1);
	if (!out)
		return NULL;
	while (*s) {
		while (*s == '/')
			s++;
		if (!*s)
			break;
		c = strcspn(s, "/");
		if ((c == 1 && s[0] == '.') ||
		    (c == 2 && s[0] == '.' && s[1] == '.')) {
			free(out);
			return NULL;
		}
		out[o++] = '/';
		memcpy(out + o, s, c);
		o += c;
		s += c;
	}
	if (!o)
		out[o++] = '/';
	out[o] = '\0';
	return out;
}

static int only_keys(json_t *o, const char *where, const char *const *keys,
		     char *err, size_t len)
{
	const char *key;
	json_t *v;
	size_t i;

	json_object_foreach(o, key, v)
	{
		for (i = 0; keys[i] && strcmp(keys[i], key); i++)
			;
		if (!keys[i])
			return spec_error(err, len,
					  "%s%s: not a key of a grant", where,
					  key);
	}
	return 0;
}

static int parse_bool(json_t *o, const char *key, const char *where, bool *out,
		      char *err, size_t len)
{
	json_t *v = json_object_get(o, key);

	if (!v || json_is_null(v))
		return 0;
	if (!json_is_boolean(v))
		return spec_error(err, len, "%s%s: expected true or false",
				  where, key);
	*out = json_is_true(v);
	return 0;
}

static int parse_fs(json_t *f, struct api_grant_spec *g, char *err, size_t len)
{
	static const char *const keys[] = { "paths", "write", NULL };
	json_t *paths = json_object_get(f, "paths"), *v;
	size_t i;
	int ret;

	if (!f || json_is_null(f) || json_is_false(f))
		return 0;
	if (!json_is_object(f))
		return spec_error(err, len,
				  "facets.filesystem: expected an object "
				  "{paths, write}");
	ret = only_keys(f, "facets.filesystem.", keys, err, len) ?:
		      parse_bool(f, "write", "facets.filesystem.", &g->fs_write,
				 err, len);
	if (ret)
		return ret;
	if (!json_is_array(paths) || !json_array_size(paths) ||
	    json_array_size(paths) > API_GRANT_PATHS_MAX)
		return spec_error(err, len,
				  "facets.filesystem.paths: expected 1 to %u "
				  "absolute guest paths",
				  API_GRANT_PATHS_MAX);
	json_array_foreach(paths, i, v)
	{
		char *p = json_is_string(v) && strlen(json_string_value(v)) ==
						       json_string_length(v) ?
				  normalize_path(json_string_value(v)) :
				  NULL;

		if (!p)
			return spec_error(err, len,
					  "facets.filesystem.paths[%zu]: "
					  "expected an absolute guest path "
					  "without . or ..",
					  i);
		g->paths[g->nr_paths++] = p;
	}
	g->fs = true;
	return 0;
}

static int parse_facets(json_t *f, struct api_grant_spec *g, char *err,
			size_t len)
{
	static const char *const keys[] = { "shell", "filesystem", "network",
					    NULL };
	static const char *const net_keys[] = { "check", NULL };
	json_t *net = json_object_get(f, "network");
	int ret;

	if (!json_is_object(f))
		return spec_error(err, len, "facets: expected an object");
	ret = only_keys(f, "facets.", keys, err, len)			     ?:
		      parse_bool(f, "shell", "facets.", &g->shell, err, len) ?:
		      parse_fs(json_object_get(f, "filesystem"), g, err, len);
	if (ret || !net || json_is_null(net) || json_is_false(net))
		return ret;
	if (!json_is_object(net))
		return spec_error(err, len,
				  "facets.network: expected an object {check}");
	return only_keys(net, "facets.network.", net_keys, err, len) ?:
		       parse_bool(net, "check", "facets.network.",
				  &g->net_check, err, len);
}

int api__grant_parse(json_t *params, struct api_grant_spec *g, char *err,
		     size_t len)
{
	static const char *const keys[] = { "socket",	 "persona", "facets",
					    "expiresMs", "uid",	    NULL };
	json_t *v;
	int ret;

	memset(g, 0, sizeof(*g));
	g->uid = -1;
	ret = only_keys(params, "", keys, err, len);
	if (ret)
		return ret;
	v = json_object_get(params, "persona");
	if (!json_is_string(v) ||
	    !persona_ok(json_string_value(v), json_string_length(v)))
		return spec_error(err, len,
				  "persona: expected 1 to %u letters, digits, "
				  "'.', '_' or '-'",
				  API_PERSONA_MAX);
	snprintf(g->persona, sizeof(g->persona), "%s", json_string_value(v));
	v = json_object_get(params, "expiresMs");
	if (v && !json_is_null(v)) {
		if (!json_is_integer(v) || json_integer_value(v) < 1 ||
		    (uint64_t)json_integer_value(v) > API_GRANT_EXPIRES_MAX)
			return spec_error(err, len,
					  "expiresMs: expected 1 to %llu",
					  API_GRANT_EXPIRES_MAX);
		g->expires_ms = json_integer_value(v);
	}
	v = json_object_get(params, "uid");
	if (v && !json_is_null(v)) {
		/* 0 is root: the guest kernel would enforce nothing. */
		if (!json_is_integer(v) || json_integer_value(v) < 1 ||
		    json_integer_value(v) > API_GRANT_UID_MAX)
			return spec_error(err, len,
					  "uid: expected 1 to %u (never root)",
					  API_GRANT_UID_MAX);
		g->uid = json_integer_value(v);
	}
	ret = parse_facets(json_object_get(params, "facets"), g, err, len);
	if (ret)
		api__grant_release(g);
	return ret;
}

/* ---- the method gate ----------------------------------------------------- */

const char *api__grant_beneath(const struct api_grant_spec *g, const void *path,
			       size_t n)
{
	const char *p = path;
	size_t gl;

	if (!n || p[0] != '/' || memchr(p, 0, n))
		return NULL;
	for (unsigned int i = 0; i < g->nr_paths; i++) {
		gl = strlen(g->paths[i]);
		if (gl == 1)
			return g->paths[i]; /* "/": the whole tree */
		if (n >= gl && !memcmp(p, g->paths[i], gl) &&
		    (n == gl || p[gl] == '/'))
			return g->paths[i];
	}
	return NULL;
}

enum facet { F_NONE, F_SHELL, F_FS_READ, F_FS_WRITE, F_NET, F_ANY };

static const struct {
	const char *method;
	enum facet facet;
} method_facets[] = {
	{ "exec", F_SHELL },
	{ "spawn", F_SHELL },
	{ "spawn.write", F_SHELL },
	{ "spawn.closeStdin", F_SHELL },
	{ "spawn.kill", F_SHELL },
	{ "pty.open", F_SHELL },
	{ "pty.write", F_SHELL },
	{ "pty.resize", F_SHELL },
	{ "pty.kill", F_SHELL },
	{ "fs.stat", F_FS_READ },
	{ "fs.readDir", F_FS_READ },
	{ "fs.readFile", F_FS_READ },
	{ "fs.writeFile", F_FS_WRITE },
	{ "fs.write", F_FS_WRITE },
	{ "fs.close", F_FS_WRITE },
	{ "fs.mkdir", F_FS_WRITE },
	{ "fs.remove", F_FS_WRITE },
	{ "fs.rename", F_FS_WRITE },
	{ "net.status", F_NET },
	{ "net.check", F_NET },
	/* the client's own requests only */
	{ "cancel", F_ANY },
};

/* A path for a message: printable bytes, at most GRANT_SHOWN of them. */
static void show_path(const uint8_t *p, size_t n, char *out, size_t len)
{
	size_t i, o = 0;

	for (i = 0; i < n && i < GRANT_SHOWN && o + 4 < len; i++)
		out[o++] = isprint(p[i]) && p[i] != '\'' ? p[i] : '?';
	if (i < n && o + 4 < len)
		o += snprintf(out + o, len - o, "...");
	out[o] = '\0';
}

/*
 * A path param as the method reads it (fs.c's param_path: keyBytes
 * first): *p malloc'ed, NULL when absent or malformed (the method then
 * answers the param error itself).
 */
static uint8_t *path_param(json_t *params, const char *key, size_t *n)
{
	char bkey[32];
	json_t *v;
	uint8_t *p;
	ssize_t got;

	snprintf(bkey, sizeof(bkey), "%sBytes", key);
	v = json_object_get(params, bkey);
	if (v) {
		if (!json_is_string(v))
			return NULL;
		p = malloc(base64__decoded_max(json_string_length(v)) + 1);
		got = p ? base64__decode(json_string_value(v),
					 json_string_length(v), p) :
			  -ENOMEM;
		if (got < 0) {
			free(p);
			return NULL;
		}
		*n = got;
		return p;
	}
	v = json_object_get(params, key);
	if (!json_is_string(v))
		return NULL;
	*n = json_string_length(v);
	p = malloc(*n + 1);
	if (p)
		memcpy(p, json_string_value(v), *n);
	return p;
}

static int gate_path(const struct api_grant_spec *g, json_t *params,
		     const char *key, bool write, char *why, size_t len)
{
	char shown[GRANT_SHOWN + 8];
	size_t n = 0;
	uint8_t *p = path_param(params, key, &n);
	int ret = 0;

	if (!p)
		return 0;
	show_path(p, n, shown, sizeof(shown));
	if (!api__grant_beneath(g, p, n)) {
		snprintf(why, len,
			 "persona '%s': facet filesystem does not allow %s: "
			 "outside its paths",
			 g->persona, shown);
		ret = -EPERM;
	} else if (write && !g->fs_write) {
		snprintf(why, len,
			 "persona '%s': facet filesystem does not allow "
			 "write to %s",
			 g->persona, shown);
		ret = -EPERM;
	}
	free(p);
	return ret;
}

static const char *const facet_names[] = {
	[F_SHELL] = "shell",
	[F_FS_READ] = "filesystem",
	[F_FS_WRITE] = "filesystem",
	[F_NET] = "network",
};

int api__grant_gate(const struct api_grant_spec *g, uint32_t uid,
		    const char *method, json_t *params, char *why, size_t len)
{
	enum facet f = F_NONE;
	bool granted, write;
	size_t i;
	int ret;

	for (i = 0; i < ARRAY_SIZE(method_facets); i++)
		if (!strcmp(method, method_facets[i].method))
			f = method_facets[i].facet;
	if (f == F_ANY)
		return 0;
	if (f == F_NONE) {
		snprintf(why, len,
			 "persona '%s': %.64s is in no facet (a scoped socket "
			 "never offers it)",
			 g->persona, method);
		return -EPERM;
	}
	granted = f == F_SHELL	 ? g->shell :
		  f == F_NET	 ? g->net_check :
		  f == F_FS_READ ? g->fs :
				   g->fs;
	if (!granted) {
		snprintf(why, len, "persona '%s': facet %s is not granted (%s)",
			 g->persona, facet_names[f], method);
		return -EPERM;
	}
	/* Who runs, and where, is the grant's: never the caller's. */
	static const char *const as_whom[] = { "user",	    "uid",
					       "gid",	    "additionalGids",
					       "container", "noNewPrivileges",
					       "rlimits" };
	for (size_t w = 0; f == F_SHELL && w < ARRAY_SIZE(as_whom); w++) {
		if (!json_object_get(params, as_whom[w]))
			continue;
		snprintf(why, len,
			 "persona '%s': facet shell runs as uid %u; \"%s\" "
			 "is not allowed",
			 g->persona, uid, as_whom[w]);
		return -EPERM;
	}
	if (f != F_FS_READ && f != F_FS_WRITE)
		return 0;
	write = f == F_FS_WRITE;
	if (!strcmp(method, "fs.write") || !strcmp(method, "fs.close")) {
		if (g->fs_write)
			return 0;
		snprintf(why, len,
			 "persona '%s': facet filesystem does not allow write "
			 "(%s)",
			 g->persona, method);
		return -EPERM;
	}
	if (!strcmp(method, "fs.rename"))
		return gate_path(g, params, "from", write, why, len) ?:
			       gate_path(g, params, "to", write, why, len);
	ret = gate_path(g, params, "path", write, why, len);
	return ret;
}

/* ---- scoped sockets ------------------------------------------------------ */

/* The request r on a scoped socket, refused: answered here, true. */
bool grant_refuses(struct rpc *r, const char *method)
{
	struct api_grant *g = r->c->grant;
	char why[API_GRANT_WHY_LEN];

	if (api__grant_gate(&g->spec, g->uid, method, r->params, why,
			    sizeof(why)) == 0)
		return false;
	client_reply_error(r->c, r->id, API_E_DENIED,
			   json_pack("{s:s}", "persona", g->spec.persona), "%s",
			   why);
	return true;
}

/*
 * A path of a scoped client's fs.* request: T_BENEATH (tag) with the
 * granted path it falls under, for the agent to resolve it beneath.
 * True when done (or not scoped); false once answered with the error.
 */
bool grant_put_beneath(struct rpc *r, struct kiln_buf *b, uint16_t tag,
		       const void *path, size_t n)
{
	const char *under;

	if (!r->c || !r->c->grant)
		return true;
	under = api__grant_beneath(&r->c->grant->spec, path, n);
	if (!under) /* the gate let it through: it cannot be */
		return param_error(r, "path: outside the grant's paths");
	if (kiln_tlv__put_str(b, tag, under))
		return param_error(r, "path: too long");
	return true;
}

/*
 * A scoped client's fs.* call: the refusal it gets when the guest finds
 * its path leading out of the granted one (EXDEV, fs_frame).
 */
void grant_note_call(struct rpc *r, struct call *k)
{
	json_t *v = json_object_get(r->params, "path");

	if (!r->c || !r->c->grant)
		return;
	if (!v)
		v = json_object_get(r->params, "from");
	if (asprintf(&k->denied,
		     "persona '%s': facet filesystem does not allow %.*s: it "
		     "leads out of its paths (a symlink or ..)",
		     r->c->grant->spec.persona, GRANT_SHOWN,
		     json_is_string(v) ? json_string_value(v) : "that path") <
	    0)
		k->denied = NULL;
}

/* The persona's guest uid: the grant's, or its own from the VM's list. */
static int persona_uid(struct api *api, const struct api_grant_spec *s,
		       uint32_t *uid)
{
	unsigned int i;

	if (s->uid >= 0) {
		*uid = s->uid;
		return 0;
	}
	for (i = 0; i < api->nr_personas; i++) {
		if (!strcmp(api->personas[i], s->persona)) {
			*uid = API_PERSONA_UID_BASE + i;
			return 0;
		}
	}
	if (i == API_PERSONAS_MAX)
		return -ENOSPC;
	api->personas[i] = strdup(s->persona);
	if (!api->personas[i])
		return -ENOMEM;
	api->nr_personas++;
	*uid = API_PERSONA_UID_BASE + i;
	return 0;
}

static struct api_grant *grant_find(struct api *api, const char *path)
{
	struct api_grant *g;

	for (g = api->grants; g; g = g->next)
		if (!g->dead && !strcmp(g->socket, path))
			return g;
	return NULL;
}

/* Closes its socket and every connection on it; freed by grants_reap. */
static unsigned int grant_close(struct api *api, struct api_grant *g)
{
	unsigned int n = 0;
	struct client *c;

	if (g->dead)
		return 0;
	g->dead = true;
	api->nr_grants--;
	if (g->listen_fd >= 0) {
		close(g->listen_fd);
		unlink(g->socket);
		if (api->p.fds)
			fd_budget__put(api->p.fds, 1);
	}
	g->listen_fd = -1;
	for (c = api->clients; c; c = c->next) {
		if (c->grant == g && !c->dead) {
			client_kill(c);
			n++;
		}
	}
	return n;
}

void grants_reap(struct api *api)
{
	struct api_grant **gp, *g;

	for (gp = &api->grants; (g = *gp);) {
		if (g->dead) {
			*gp = g->next;
			api__grant_release(&g->spec);
			free(g->socket);
			free(g);
		} else {
			gp = &g->next;
		}
	}
}

void grants_tick(struct api *api, uint64_t now)
{
	struct api_grant *g;

	for (g = api->grants; g; g = g->next) {
		if (g->dead || !g->expires_at || now < g->expires_at)
			continue;
		pr_info("api: persona '%s': its grant on %s expired",
			g->spec.persona, g->socket);
		grant_close(api, g);
		api__event(api, "grant-expired",
			   json_pack("{s:s, s:s}", "socket", g->socket,
				     "persona", g->spec.persona));
	}
}

uint64_t grants_next_timer(const struct api *api)
{
	const struct api_grant *g;
	uint64_t t = 0;

	for (g = api->grants; g; g = g->next)
		if (!g->dead && g->expires_at && (!t || g->expires_at < t))
			t = g->expires_at;
	return t;
}

void grants_exit(struct api *api)
{
	struct api_grant *g;

	for (g = api->grants; g; g = g->next)
		grant_close(api, g);
	grants_reap(api);
	for (unsigned int i = 0; i < api->nr_personas; i++)
		free(api->personas[i]);
	api->nr_personas = 0;
}

static uint64_t wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void m_vm_grant(struct rpc *r)
{
	struct api *api = r->api;
	char err[API_GRANT_WHY_LEN] = "";
	struct api_grant *g;
	const char *path;
	size_t plen;
	json_t *res;
	int ret;

	if (!param_str(r, "socket", true, &path, &plen))
		return;
	if (path[0] != '/' || plen >= API_SOCKET_PATH_MAX) {
		param_error(r,
			    "socket: expected an absolute path under %u "
			    "bytes",
			    API_SOCKET_PATH_MAX);
		return;
	}
	if (!strcmp(path, api->path) || grant_find(api, path)) {
		param_error(r, "socket: %s is already a control socket", path);
		return;
	}
	if (api->nr_grants >= API_GRANTS_MAX) {
		client_reply_error(r->c, r->id, API_E_LIMIT, NULL,
				   "too many grants (limit %u)",
				   API_GRANTS_MAX);
		return;
	}
	g = calloc(1, sizeof(*g));
	if (!g) {
		client_reply_error(r->c, r->id, API_E_INTERNAL, NULL,
				   "out of memory");
		return;
	}
	g->listen_fd = -1;
	ret = api__grant_parse(r->params, &g->spec, err, sizeof(err));
	if (ret) {
		param_error(r, "%s", err);
		free(g);
		return;
	}
	g->socket = strdup(path);
	ret = g->socket ? persona_uid(api, &g->spec, &g->uid) : -ENOMEM;
	if (ret == -ENOSPC) {
		client_reply_error(r->c, r->id, API_E_LIMIT, NULL,
				   "too many personas (limit %u); give a uid",
				   API_PERSONAS_MAX);
		goto out_free;
	}
	if (!ret && api->p.fds && fd_budget__take(api->p.fds, 1))
		ret = -EMFILE;
	if (!ret) {
		ret = api_listen_at(path, &g->listen_fd);
		if (ret && api->p.fds)
			fd_budget__put(api->p.fds, 1);
	}
	if (ret) {
		client_reply_error(r->c, r->id, API_E_VM, NULL,
				   "vm.grant: socket %s: %s", path,
				   strerror(-ret));
		goto out_free;
	}
	if (g->spec.expires_ms)
		g->expires_at = api_now_ms() + g->spec.expires_ms;
	g->next = api->grants;
	api->grants = g;
	api->nr_grants++;
	res = json_pack("{s:s, s:I}", "socket", path, "uid",
			(json_int_t)g->uid);
	if (res)
		json_object_set_new(
			res, "expiresAt",
			g->expires_at ?
				json_integer(wall_ms() + g->spec.expires_ms) :
				json_null());
	client_reply(r->c, r->id, res);
	api__event(api, "grant",
		   json_pack("{s:s, s:s}", "socket", path, "persona",
			     g->spec.persona));
	return;
out_free:
	api__grant_release(&g->spec);
	free(g->socket);
	free(g);
}

static void m_vm_revoke(struct rpc *r)
{
	struct api_grant *g;
	const char *path;
	unsigned int n;
	size_t plen;

	if (!param_str(r, "socket", true, &path, &plen))
		return;
	g = grant_find(r->api, path);
	if (!g) {
		param_error(r, "socket: no grant listens on %s", path);
		return;
	}
	n = grant_close(r->api, g);
	client_reply(
		r->c, r->id,
		json_pack("{s:b, s:I}", "revoked", 1, "closed", (json_int_t)n));
	api__event(r->api, "grant-revoked",
		   json_pack("{s:s, s:s}", "socket", g->socket, "persona",
			     g->spec.persona));
}

const struct api_method grant_methods[] = {
	{ "vm.grant", m_vm_grant },
	{ "vm.revoke", m_vm_revoke },
	{ NULL, NULL },
};
