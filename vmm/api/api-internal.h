/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_VMM_API_INTERNAL_H
#define KILN_VMM_API_INTERNAL_H

/*
 * What the parts of the control API share (the public side is vmm/api.h):
 * the objects, and the functions one part calls in another.
 *
 *   server.c  the socket, the poll loop, create/start/destroy
 *   client.c  clients: request lines in, answers out, method dispatch
 *   params.c  request parameters
 *   call.c    calls: one request's life on its agent connection
 *   agent.c   agent connections: reaching the agent, frames both ways
 *   json.c    bytes from the guest as JSON strings
 *   proc.c    exec, spawn, pty and their streams
 *   fs.c      fs.* (files in the guest)
 *   reseed.c  RESEED on the probe of a restored VM
 *   mounts.c  MOUNTS_DETACH and MOUNTS_ATTACH on the probe
 *   vm.c      facts, vm.* and net.setPolicy
 *   events.c  vm.subscribe, vm.event and api__event
 *   grant.c   vm.grant, vm.revoke: scoped sockets and their method gate
 *
 * Everything runs on the API thread; nothing here locks but the event
 * ring (events.c), which other threads post to.
 */

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/bytequeue.h"
#include "proto/tlv.h"
#include "vmm/api.h"

#define API_READ_CHUNK	    65536 /* one read() from a socket */
#define API_GRANT_WHY_LEN   384	  /* a refusal: one line */
#define API_SOCKET_PATH_MAX 108U  /* sockaddr_un's sun_path, its NUL in */

enum call_kind {
	CALL_PROBE,
	CALL_EXEC,
	CALL_SPAWN,
	CALL_PTY,
	CALL_STAT,
	CALL_READDIR,
	CALL_READ,
	CALL_WRITE,
	CALL_MKDIR,
	CALL_REMOVE,
	CALL_RENAME,
	CALL_FACTS,
	CALL_VM_FACTS,
	CALL_POWEROFF,	     /* vm.shutdown's POWEROFF: no client, no answer */
	CALL_CONTAINER,	     /* container.create, container.delete */
	CALL_CONTAINER_LIST, /* container.list */
};

enum agent_state {
	AG_WAIT,    /* not connected: (re)try at retry_at */
	AG_CONNECT, /* vsock: CONNECT sent, waiting for "OK" */
	AG_HELLO,   /* waiting for the agent's HELLO */
	AG_ACTIVE,  /* request sent */
	AG_CLOSED,
};

/* A scoped socket (grant.c): what it allows, its listener. */
struct api_grant {
	struct api_grant_spec spec;
	char *socket;
	int listen_fd;
	uint32_t uid;	     /* the persona's guest uid */
	uint64_t expires_at; /* ms (api_now_ms); 0: never */
	bool dead;	     /* closed: freed by grants_reap */
	struct api_grant *next;
};

struct client {
	struct api *api;
	struct api_grant *grant; /* NULL: the full socket */
	int fd;
	struct bytequeue in, out;
	size_t scanned; /* bytes of in already searched for '\n' */
	/*
	 * A request with a body (client.c, "Bodies"): its parsed line and
	 * method, waiting for body_len raw bytes at the front of in.
	 */
	json_t *body_msg;
	const struct api_method *body_method;
	size_t body_len;
	unsigned int nr_calls;
	size_t held;	     /* bytes its calls hold for answers: call_hold() */
	bool read_eof;	     /* half-closed: answer, then close */
	bool closing;	     /* flush out, then close (protocol error) */
	bool shutdown_after; /* vm.shutdown once out is flushed */
	bool dead;
	bool subscribed;     /* vm.subscribe: gets vm.event */
	uint64_t ev_next;    /* the seq of the next event it gets */
	uint64_t ev_dropped; /* events lost before ev_next, not told yet */
	struct client *next;
};

struct call {
	struct api *api;
	struct client *client; /* NULL once the client is gone */
	json_t *id;	       /* request id; NULL: a notification */
	enum call_kind kind;
	enum agent_state st;
	int fd;
	int last_err; /* why the agent could not be reached */
	bool dead;
	bool replied;	       /* the request's answer went out */
	bool out_broken;       /* the agent stopped reading: drop writes */
	bool done_frame;       /* the last message arrived */
	struct bytequeue ain;  /* from the agent: a partial frame */
	struct bytequeue aout; /* to the agent */
	struct kiln_buf req;
	uint16_t req_type;
	uint64_t need_features; /* KILN_FEATURE_* the request needs */
	char *denied;		/* a scoped fs call: its refusal when EXDEV */
	uint64_t connect_deadline, retry_at, deadline; /* ms, 0: none */

	/* streams: spawn, pty, fs.writeFile with stream */
	uint64_t stream;
	json_t *pending;  /* ids of write calls waiting for room */
	json_t *close_id; /* fs.close waiting for the RESULT */
	bool has_close_id;
	json_t *error; /* an upload's failure, for later writes */
	bool parked;   /* failed upload kept for its fs.write/fs.close */

	/* processes */
	int64_t pid;
	bool started, stdin_closed, killing;
	bool cancelled;	     /* answer with API_E_ABORTED */
	bool timed_out;	     /* exec: the host's backstop killed it */
	uint8_t *stdin_data; /* exec: written once started */
	size_t stdin_len;
	struct bytequeue out_acc, err_acc; /* exec output */
	bool out_trunc, err_trunc;

	/* files */
	bool streamed;	 /* fs.readFile, fs.readDir: as notifications */
	bool raw;	 /* fs.readFile stream: chunks with raw bodies */
	uint64_t offset; /* fs.readFile: where the data starts */
	uint64_t bytes;	 /* data bytes seen; fs.readDir stream: entries */
	size_t held;	 /* bytes held for the answer: call_hold() */
	json_t *entries; /* fs.readDir, facts */
	uint8_t *upload; /* fs.writeFile in one call */
	size_t upload_len;

	struct call *next;
};

enum ref_kind { REF_WAKE, REF_LISTEN, REF_GRANT, REF_CLIENT, REF_CALL };

struct pref {
	enum ref_kind kind;
	void *ptr;
	bool reading; /* POLLIN was asked for */
};

/* One event: its seq (from 1) and text without the seq (events.c). */
struct api_event {
	uint64_t seq;
	char *body;
};

struct api_events {
	pthread_mutex_t lock; /* seq and ring */
	uint64_t seq;	      /* the last event's; 0: none yet */
	struct api_event ring[API_EVENTS_MAX]; /* seq s at (s - 1) % MAX */
	atomic_uint_fast64_t lost; /* not posted for want of memory */
};

struct api {
	struct api_params p;
	char *path;
	json_t *config_facts;
	int listen_fd, wake_fd;
	pthread_t thread;
	bool started;
	atomic_bool stop;
	bool agent_ready, shutdown_called;
	atomic_bool shutdown_asked; /* api__shutdown: for the API thread */
	/* p.reseed: the seed still to send; nothing else runs before it */
	bool reseed_pending, reseed_warned;
	uint8_t reseed[KILN_RESEED_BYTES];
	/* p.net_mac and p.net: with the reseed; has_net false without */
	bool has_net, net_warned;
	uint8_t net_mac[KILN_NET_MAC_LEN];
	char net[KILN_NET_MAX + 1];
	/* p.mounts_plan: the probe's next mounts request, or where it ended */
	enum api_mounts_step {
		MOUNTS_READY,  /* nothing (left) to do */
		MOUNTS_DETACH, /* then the capture, then MOUNTS_ATTACH */
		MOUNTS_ATTACH,
		MOUNTS_FAILED, /* the attach failed: never ready */
	} mounts_step;
	uint8_t *mounts;	  /* p.mounts' copy */
	uint64_t mounts_deadline; /* ms: the request's; 0 before its first */
	bool events_ready;	  /* events_init done */
	unsigned int agent_timeout_ms;

	struct client *clients;
	unsigned int nr_clients;
	struct api_grant *grants;
	unsigned int nr_grants;
	/* The personas' names in the order first granted: uid BASE + i. */
	char *personas[API_PERSONAS_MAX];
	unsigned int nr_personas;
	uint64_t accept_at; /* ms: accept again from then (after EMFILE) */
	bool accept_warned;
	struct call *calls;
	unsigned int nr_calls, nr_streams;
	uint64_t next_stream;
	size_t held; /* bytes all calls hold for answers */

	struct pollfd *pfds;
	struct pref *refs;
	size_t pfd_cap;
	struct api_events events;
	struct api_counters counters; /* lib/counter.h: this thread writes */
	uint8_t rbuf[API_READ_CHUNK];
};

struct rpc {
	struct api *api;
	struct client *c;
	json_t *id; /* NULL: a notification */
	json_t *params;
	/*
	 * A method that takes a body, called with params.size: the raw
	 * bytes that followed the line (has_body), all of them unless the
	 * connection ended first (body_cut: body_len of params.size).
	 */
	bool has_body, body_cut;
	const uint8_t *body;
	size_t body_len;
};

/*
 * One method: its name in the request and its handler; body: with
 * params.size, that many raw bytes follow the request's line and are
 * its body (only fs.write).
 */
struct api_method {
	const char *name;
	void (*fn)(struct rpc *r);
	bool body;
};

/* Each group's methods, ended by an empty entry; client.c dispatches. */
extern const struct api_method proc_methods[];
extern const struct api_method fs_methods[];
extern const struct api_method vm_methods[];
extern const struct api_method call_methods[];
extern const struct api_method event_methods[];
extern const struct api_method container_methods[];
extern const struct api_method grant_methods[];

/* server.c */
uint64_t api_now_ms(void);
/* A listening socket at path, mode 0600 (a stale one replaced). */
int api_listen_at(const char *path, int *fd);

/* json.c: bytes from the guest, each invalid byte (and NUL) as U+FFFD */
json_t *api_json_lossy(const uint8_t *p, size_t n);
json_t *api_json_str(const char *s);
json_t *api_json_base64(const void *p, size_t n);
void api_json_guest_bytes(json_t *obj, const char *key, const uint8_t *p,
			  size_t n);
size_t api_json_weight(const json_t *j);

/* client.c: answers to c (NULL or dead: dropped); json_t args are stolen */
void client_reply(struct client *c, json_t *id, json_t *result);
void client_reply_error(struct client *c, json_t *id, int code, json_t *data,
			const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));
void client_notify(struct client *c, const char *method, json_t *params);
void client_notify_data(struct client *c, const char *method, uint64_t stream,
			const void *p, size_t len);
/*
 * The same for any notification whose params are fields (JSON members,
 * written as given, at most API_NOTIFY_FIELDS_MAX bytes) and then
 * "data", base64 of p: written without jansson. False, nothing sent,
 * when the fields are too long (the caller sends it through jansson).
 */
#define API_NOTIFY_FIELDS_MAX 192U
bool client_notify_bytes(struct client *c, const char *method,
			 const char *fields, const void *p, size_t len);
void client_notify_body(struct client *c, const char *method, json_t *params,
			const void *p, size_t len);
void client_kill(struct client *c);
void client_pump(struct api *api, struct client *c);
bool client_wants_input(const struct client *c);
void client_readable(struct client *c);
void client_writable(struct client *c);
void client_maybe_close(struct client *c);
/* From the main socket (g NULL) or a grant's. */
void client_accept(struct api *api, struct api_grant *g);
/* The API thread: what api__shutdown asked for, once. */
void client_shutdown_asked(struct api *api);

/* params.c: false once the request has been answered with the error */
bool param_error(struct rpc *r, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
bool param_str(struct rpc *r, const char *key, bool required, const char **s,
	       size_t *len);
bool param_uint(struct rpc *r, const char *key, uint64_t max, uint64_t *out);
bool param_bool(struct rpc *r, const char *key, bool *out);
bool param_b64(struct rpc *r, const char *key, uint8_t **out, size_t *len);

/* call.c */
struct call *call_new(struct rpc *r, enum call_kind kind, bool stream);
void call_start(struct call *k, uint16_t type, struct kiln_buf *b);
bool call_is_proc(const struct call *k);
void call_flush_pending(struct call *k, int code, const char *why,
			json_t *data);
void call_reply(struct call *k, json_t *result);
void call_fail(struct call *k, int code, json_t *data, const char *why);
void call_close_fd(struct call *k);
void call_done(struct call *k);
void call_lost(struct call *k, const char *why);
/*
 * An agent's ERROR payload as the -32000 error's data ({"errno",
 * "errnoValue"}); msg receives its message (strerror without one).
 */
json_t *call_errno_data(const uint8_t *p, size_t len, char *msg, size_t msglen);
void call_errno(struct call *k, const uint8_t *p, size_t len);
void call_abort(struct call *k, bool cancelled);
int call_hold(struct call *k, size_t n);
void call_fail_held(struct call *k, int err);
void call_list_result(struct call *k, const uint8_t *p, size_t len,
		      uint16_t tag, json_t *(*entry)(const uint8_t *, size_t),
		      const char *key);
struct call *call_find_stream(struct rpc *r, unsigned int kinds);
void call_write_done(struct call *k, json_t *id);
void call_tick(struct call *k, uint64_t now);
uint64_t call_next_timer(const struct call *k);
void call_free(struct api *api, struct call *k);

/* agent.c */
void agent_send(struct call *k, uint16_t type, uint16_t flags,
		const void *payload, size_t len);
void agent_send_data(struct call *k, uint16_t type, const uint8_t *p,
		     size_t len, bool eof);
void agent_send_u64(struct call *k, uint16_t type, uint16_t tag, uint64_t v);
void agent_try_open(struct call *k, uint64_t now);
void agent_retry(struct call *k, int err, uint64_t now);
/* The probe's next request, on a new connection right away. */
void agent_reopen(struct call *k);
/*
 * Until the probe has done the reseed and the mounts, nothing else runs:
 * true while one of them is left.
 */
bool agent_gated(const struct api *api);
/* A gate's request done: the probe goes on to the next, or it is ready. */
void agent_gate_next(struct call *k);
/* agent-ready: the event and the callback, once. */
void agent_mark_ready(struct api *api);
void agent_readable(struct call *k, uint64_t now);
void agent_writable(struct call *k, uint64_t now);

/* The agent's frames for a call of each group, once it said HELLO. */
void proc_frame(struct call *k, uint16_t type, uint16_t flags, const uint8_t *p,
		size_t len);
void fs_frame(struct call *k, uint16_t type, uint16_t flags, const uint8_t *p,
	      size_t len);
void facts_frame(struct call *k, uint16_t type, uint16_t flags,
		 const uint8_t *p, size_t len);

/*
 * reseed.c: the probe greeted by the agent of a restored VM (features:
 * HELLO's), and the agent's answer to its RESEED.
 */
void reseed_start(struct call *k, uint64_t features);
void reseed_frame(struct call *k, uint16_t type, uint16_t flags,
		  const uint8_t *p, size_t len);

/* mounts.c: the probe's MOUNTS_* request, its answer, its deadline */
void mounts_start(struct call *k, uint64_t features);
void mounts_frame(struct call *k, uint16_t type, uint16_t flags,
		  const uint8_t *p, size_t len);
void mounts_timeout(struct call *k);

/* vm.c: vm.shutdown's POWEROFF, after the answer went out */
void vm_poweroff_start(struct api *api);
void vm_poweroff_frame(struct call *k, uint16_t type, uint16_t flags,
		       const uint8_t *p, size_t len);
void vm_poweroff_failed(struct call *k, const char *why);

/* events.c */
int events_init(struct api_events *ev);
void events_exit(struct api_events *ev);
void events_pump(struct api *api);
void events_flush(struct api *api);

/* container.c: the agent's answers; exec's container fields into @b */
void container_frame(struct call *k, uint16_t type, uint16_t flags,
		     const uint8_t *p, size_t len);
bool container_proc_params(struct rpc *r, struct kiln_buf *b, uint64_t *need);
/* grant.c */
bool grant_refuses(struct rpc *r, const char *method);
bool grant_put_beneath(struct rpc *r, struct kiln_buf *b, uint16_t tag,
		       const void *path, size_t n);
void grant_note_call(struct rpc *r, struct call *k);
void grants_tick(struct api *api, uint64_t now);
uint64_t grants_next_timer(const struct api *api);
void grants_reap(struct api *api);
void grants_exit(struct api *api);

/* proc.c */
void proc_kill(struct call *k, int sig, uint64_t now);
json_t *proc_exec_result(struct call *k, json_t *res);

#endif
