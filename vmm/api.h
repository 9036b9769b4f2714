/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_API_H
#define KILN_API_H

/*
 * The control API: JSON-RPC 2.0 over a Unix stream socket, one JSON text
 * per line, served by one event loop thread of its own (poll, every
 * descriptor nonblocking). Each request that needs the guest opens its
 * own connection to the guest agent (proto/agent.h: one request
 * per connection) through the open_agent callback, so the API does not
 * know whether the agent is a vsock port in a VM or a Unix socket in a
 * test. Methods, streams, errors and limits: Documentation/api.md.
 */

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/compiler.h"
#include "lib/fdbudget.h"
#include "lib/log.h"
#include "net/flow.h"

struct sock_fprog; /* lib/thread-filter.h */

#define API_MAX_MESSAGE	    (1U << 20)	 /* bytes in one request line */
#define API_MAX_BODY	    (1U << 20)	 /* fs.write's raw body after it */
#define API_MAX_CLIENTS	    64U		 /* connected clients */
#define API_MAX_CALLS	    256U	 /* agent connections, all clients */
#define API_MAX_STREAMS	    64U		 /* spawn, pty and upload streams */
#define API_OUT_HIGH	    (1U << 20)	 /* client's unsent bytes: throttle */
#define API_AGENT_OUT_HIGH  (256U << 10) /* unsent bytes to one agent conn */
#define API_EXEC_OUTPUT_MAX (1U << 20)	 /* exec: stdout, stderr each */
#define API_READ_INLINE_MAX (1U << 20)	 /* fs.readFile without stream */
#define API_READDIR_MAX	    100000U	 /* entries in one fs.readDir */
/*
 * What the API holds for answers it is still collecting from the guest
 * (fs.readDir entries, facts, exec output, fs.readFile data without
 * stream), in bytes of what the answer will carry: per answer, per
 * client, in all. The agent is hostile: past these the request fails
 * with API_E_LIMIT (exec output is truncated) instead of the vmm growing.
 */
#define API_RESULT_MAX	    (16U << 20)
#define API_CLIENT_HELD_MAX (32U << 20)
#define API_HELD_MAX	    (64U << 20)
/*
 * accept4 failed for want of a descriptor or memory (EMFILE, ENFILE,
 * ENOBUFS, ENOMEM): the listener stays readable, so it is not polled
 * again for this long (ms) instead of a busy loop.
 */
#define API_ACCEPT_BACKOFF_MS 100U
/* Unsent bytes to one agent connection: past them it is not reading. */
#define API_AGENT_OUT_MAX      (4U << 20)
#define API_POWEROFF_ANSWER_MS 5000U /* vm.shutdown: the agent's RESULT */
/*
 * vm.subscribe: events held for the subscribers (each one's queue: past
 * it the oldest are dropped and counted), and how long api__destroy
 * tries to send the last ones (ms, all subscribers together).
 */
#define API_EVENTS_MAX	    256U
#define API_EVENTS_FLUSH_MS 200U

/* JSON-RPC error codes: the standard ones, then Kiln's own. */
#define API_E_PARSE	      -32700
#define API_E_INVALID_REQUEST -32600
#define API_E_NO_METHOD	      -32601
#define API_E_INVALID_PARAMS  -32602
#define API_E_INTERNAL	      -32603
#define API_E_ERRNO	      -32000 /* the guest said no: data.errno */
#define API_E_TIMEOUT	      -32001 /* no answer from the agent in time */
#define API_E_ABORTED	      -32002 /* cancelled by the client */
#define API_E_AGENT	      -32003 /* agent unreachable or lost */
#define API_E_LIMIT	      -32004 /* a limit above was reached */
#define API_E_VM	      -32005 /* the monitor refused or failed: data.errno */
#define API_E_DENIED	      -32006 /* a scoped socket's grant does not allow it */

#define API_VM_ERR_LEN 512 /* vm.pause, vm.resume, vm.snapshot: one line */

/*
 * Scoped control sockets (vm.grant, Documentation/personas.md): another
 * socket whose connections may call only what a persona's grant allows.
 * At most API_GRANTS_MAX at once, each with at most API_GRANT_PATHS_MAX
 * filesystem paths; a persona without a "uid" runs as
 * API_PERSONA_UID_BASE + n in the guest, n the order in which the VM
 * first saw its name (at most API_PERSONAS_MAX names per VM).
 */
#define API_GRANTS_MAX	     16U
#define API_GRANT_PATHS_MAX  16U
#define API_PERSONA_MAX	     64U /* bytes of a persona's name */
#define API_PERSONAS_MAX     64U
#define API_PERSONA_UID_BASE 2000U  /* the first persona's guest uid */
#define API_GRANT_UID_MAX    65534U /* a grant's "uid" at most (nobody) */
/* "expiresMs" at most: a day; a longer grant is granted again. */
#define API_GRANT_EXPIRES_MAX (24ULL * 3600 * 1000)

/* What a grant allows: vm.grant's params less "socket" (grant.c). */
struct api_grant_spec {
	char persona[API_PERSONA_MAX + 1];
	bool shell;
	bool fs, fs_write;
	unsigned int nr_paths;
	char *paths[API_GRANT_PATHS_MAX]; /* absolute, normalized */
	bool net_check;
	uint64_t expires_ms; /* from the grant; 0: never */
	int64_t uid;	     /* -1: the persona's own */
};

/*
 * vm.grant's params into g: 0, or -EINVAL with one line naming the key
 * in err (g then holds nothing). Release g with api__grant_release.
 */
int __must_check api__grant_parse(json_t *params, struct api_grant_spec *g,
				  char *err, size_t len);
void api__grant_release(struct api_grant_spec *g);
/*
 * The method gate of a scoped socket: may a connection under g (its
 * guest uid: uid) call method with params? 0, or -EPERM with the
 * refusal in why ("persona 'P': facet F ..."). Paths are checked as
 * text here (the granted path or below it); the guest agent resolves
 * them beneath it (KILN_T_BENEATH).
 */
int api__grant_gate(const struct api_grant_spec *g, uint32_t uid,
		    const char *method, json_t *params, char *why, size_t len);
/* The granted path that path (n bytes) falls under; NULL: none. */
const char *api__grant_beneath(const struct api_grant_spec *g, const void *path,
			       size_t n);

/*
 * net.check's flow (Documentation/api.md): proto "tcp" or "udp", the
 * destination's address (network byte order; 0 with a hostname only)
 * and port, and the hostname asked about ("": none).
 */
struct api_flow_check {
	bool udp;
	uint32_t addr;
	uint16_t port;
	char hostname[254];
};

/*
 * net.check's answer for a decision of net_policy__check (net/policy.h):
 * {"verdict": "allow" | "deny" | "ask", "reason", "rule": {"key",
 * "index"} or null, "intercepted": true for an http grant's flow}. NULL
 * on -ENOMEM.
 */
json_t *api__flow_verdict(const struct net_decision *d);

struct api_params {
	const char *socket_path; /* created here (an old socket replaced) */
	/*
	 * A new connected stream to the guest agent, nonblocking or not
	 * (the API makes it nonblocking): the fd, or -errno. Called on the
	 * API thread, once per request; it must not block for long.
	 */
	int (*open_agent)(void *opaque);
	/*
	 * Nonzero: the stream is a vsock device's host socket: the API
	 * writes "CONNECT <vsock_port>\n" and wants "OK <port>\n" back
	 * before the agent's HELLO. Zero: the agent greets at once.
	 */
	unsigned int vsock_port;
	/* vm.facts: the config facts, an array (copied); NULL: none. */
	const json_t *config_facts;
	/*
	 * vm.shutdown, after its answer went out (the monitor arms its
	 * deadline); NULL: not offered. The API then asks the guest agent
	 * to power off (POWEROFF) on a connection of its own, like any
	 * request: nothing waits for the guest. When the agent cannot be
	 * told (unreachable, an error, no RESULT within
	 * API_POWEROFF_ANSWER_MS), shutdown_failed follows, with one line
	 * saying why (NULL: not told).
	 */
	void (*shutdown)(void *opaque);
	void (*shutdown_failed)(void *opaque, const char *why);
	/* vm.status: add fields to the object; NULL: only the API's own. */
	void (*status)(void *opaque, json_t *status);
	/*
	 * vm.metrics: add the monitor's members to the object, which holds
	 * the API's own ("agent"); NULL: only those. On the API thread.
	 */
	void (*metrics)(void *opaque, json_t *metrics);
	/*
	 * net.setPolicy: replace the network policy with policy (the
	 * request's "policy" value, borrowed). 0; or -EINVAL with one line
	 * naming the key in err (answered as invalid params; the old
	 * policy stays), -EOPNOTSUPP (no such method here), another
	 * -errno (internal error). NULL: the method is not offered.
	 */
	int (*set_policy)(void *opaque, json_t *policy, char *err, size_t len);
	/*
	 * net.check: what the policy would decide for the flow, without
	 * opening anything: an object {verdict, reason, rule} into *out
	 * (0), or -EOPNOTSUPP with one line in err (no policy here). NULL:
	 * not offered.
	 */
	int (*check_flow)(void *opaque, const struct api_flow_check *f,
			  json_t **out, char *err, size_t len);
	/*
	 * vm.pause, vm.resume, vm.snapshot (Documentation/snapshots.md):
	 * 0, or -errno with one line in err (answered as API_E_VM with the
	 * errno). They run on the API thread and return once done: pausing
	 * waits for the vCPUs and the devices' requests in flight (bounded),
	 * a snapshot for its files. is_paused: vm.status's "state". NULL:
	 * not offered.
	 */
	int (*pause)(void *opaque, char *err, size_t len);
	int (*resume)(void *opaque, char *err, size_t len);
	int (*snapshot)(void *opaque, const char *dir, bool resume, char *err,
			size_t len);
	bool (*is_paused)(void *opaque);
	/*
	 * Called once, on the API thread, when the agent first greets.
	 * Non-NULL: the API also probes the agent from api__start on (one
	 * empty connection every 200 ms) until it answers.
	 */
	void (*agent_ready)(void *opaque);
	/*
	 * A VM restored from a snapshot: KILN_RESEED_BYTES (proto/agent.h)
	 * from the monitor's getrandom(), copied (the caller wipes its
	 * copy). The API then sends them to the agent (RESEED) on the
	 * readiness probe, and reports the agent ready only once it
	 * answered; until then every other request that reaches the agent
	 * closes its connection and tries again, as if the agent were not
	 * up (Documentation/snapshots.md, "Fresh entropy"). NULL: a boot,
	 * nothing to send.
	 */
	const uint8_t *reseed;
	/*
	 * With reseed, for a VM with a network: its own MAC (6 bytes) and
	 * kiln.net's value (net/netcfg.h), copied. The RESEED carries them
	 * (T_NET_MAC, T_NET) to an agent with KILN_FEATURE_NET_RENEW, which
	 * gives eth0 this VM's network instead of the snapshot's; one
	 * without it is warned about and keeps the snapshot's MAC. NULL:
	 * no network.
	 */
	const uint8_t *net_mac;
	const char *net;
	/*
	 * The VM's virtio-fs mounts, as MOUNTS_DETACH and MOUNTS_ATTACH's
	 * payload (proto/mounts.h; copied), and what the readiness probe
	 * does with them before the agent is ready (Documentation/
	 * snapshots.md, "Baselines"); until it is, every other request
	 * waits as for the reseed:
	 * - API_MOUNTS_CAPTURE (a baseline's capture): MOUNTS_DETACH, then
	 *   capture(opaque, 0, NULL) on the API thread (err -errno and why
	 *   when they could not be detached: nothing must be captured),
	 *   then MOUNTS_ATTACH; agent_ready follows its RESULT.
	 * - API_MOUNTS_ATTACH (a restore): MOUNTS_ATTACH after the RESEED;
	 *   agent_ready follows its RESULT.
	 * Each request has the agent timeout from its first attempt. An
	 * attach that fails (ERROR, no RESULT in time, an agent without
	 * KILN_FEATURE_MOUNTS) calls mounts_failed with one line, and the
	 * agent is never reported ready.
	 */
	const uint8_t *mounts;
	size_t mounts_len;
	enum api_mounts {
		API_MOUNTS_NONE,
		API_MOUNTS_CAPTURE,
		API_MOUNTS_ATTACH,
	} mounts_plan;
	void (*capture)(void *opaque, int err, const char *why);
	void (*mounts_failed)(void *opaque, const char *why);
	void *opaque; /* for every callback */
	/*
	 * How long a request keeps trying to reach the agent (open, CONNECT,
	 * HELLO, retried every 100 ms) before it fails with API_E_AGENT; in
	 * ms, 0: 10000.
	 */
	unsigned int agent_timeout_ms;
	/*
	 * The monitor's descriptor budget (lib/fdbudget.h), or NULL: each
	 * client and each agent connection takes one from it. Empty, a new
	 * client is turned away (API_E_LIMIT) and a request waits for the
	 * agent as if it were not up yet.
	 */
	struct fd_budget *fds;
};

struct api;

/*
 * vm.metrics (Documentation/api.md): the agent connections the API
 * opened and the processes the agent started for it. Counted on the API
 * thread (lib/counter.h), monotonic.
 */
struct api_counters {
	uint64_t agent_connections;   /* opened to the agent */
	uint64_t agent_open_failures; /* attempts that could not open one */
	uint64_t execs, spawns, ptys; /* processes started, by method */
	uint64_t exits;		      /* of them, seen to end */
};

/*
 * A copy of the counters, from any thread; NULL api: zeros. And as the
 * metrics object's "agent" member.
 */
void api__counters(const struct api *api, struct api_counters *c);
json_t *api__metrics_agent(const struct api *api);

/* Binds and listens on the socket; no thread yet. */
int __must_check api__create(struct api **out, const struct api_params *p);
/*
 * Starts the event loop thread. Call it once the thread may run: it
 * inherits the caller's seccomp filter.
 */
int __must_check api__start(struct api *api, const struct sock_fprog *filter);
/*
 * Stops and joins the thread, closes every client and agent connection
 * (the agent kills what they ran) and removes the socket; NULL ok.
 */
void api__destroy(struct api *api);
/*
 * A lifecycle event for vm.subscribe's subscribers (Documentation/api.md,
 * "vm.subscribe"): type, and fields (an object, stolen; NULL: none)
 * added to its seq, time and type. Any thread, any time between
 * api__create and api__destroy; NULL api: nothing. It never waits for a
 * subscriber or the API thread (a short lock on the event ring, no I/O
 * but waking the API thread).
 */
void api__event(struct api *api, const char *type, json_t *fields);
/*
 * What vm.shutdown does once answered, asked by the monitor itself
 * (--die-with-parent): p.shutdown, then POWEROFF to the agent on a
 * connection of its own (p.shutdown_failed when it cannot be told). Any
 * thread, any time between api__create and api__destroy; done once, on
 * the API thread, with vm.shutdown's (NULL api or p.shutdown: nothing).
 */
void api__shutdown(struct api *api);

#endif
