// SPDX-License-Identifier: GPL-2.0
/*
 * vmmctl: a command-line client of a VM's control socket (JSON-RPC 2.0,
 * one message per line; Documentation/api.md). Every command connects,
 * does its one thing and exits; data moves in chunks, so neither a big
 * file nor a chatty command is ever held in memory whole.
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "lib/base64.h"
#include "lib/getopt-exact.h"

/* Exit statuses of vmmctl itself (exec and shell pass the command's). */
#define EXIT_FAILED 1	/* the guest refused: ENOENT, EACCES... */
#define EXIT_USAGE  2	/* bad command line */
#define EXIT_VMMCTL 125 /* no VM at the socket, or the API failed */
/*
 * exec and shell: the guest could not enter --cwd (systemd's EXIT_CHDIR),
 * told apart from 127, no such command, though both are ENOENT.
 */
#define EXIT_CWD 200
/* exec and shell: no such --user in the guest (systemd's EXIT_USER). */
#define EXIT_USER 217

#define CHUNK	  (48 * 1024) /* bytes per spawn.write message */
#define IN_FLIGHT 4	      /* fs.write / spawn.write not yet answered */
/*
 * cp's fs.write: raw bodies of the most the API takes (API_MAX_BODY), 4
 * in flight: 1.2x the rate of 256 KiB ones in the harness (benchmarks.md,
 * "The API's file write in raw bodies").
 */
#define UPLOAD_CHUNK (1024 * 1024)
#define MSG_MAX	     (256U << 20) /* a bigger line from the server is junk */

static const char usage[] =
	"usage: vmmctl exec [--timeout-ms N] [--cwd DIR] [--env K=V]... "
	"[--user NAME|UID]\n"
	"                   SOCK -- CMD [ARG...]\n"
	"       vmmctl shell [--cwd DIR] [--user NAME|UID] SOCK [-- CMD "
	"[ARG...]]\n"
	"       vmmctl cp [-p] [--mode MODE] SOCK SRC DST\n"
	"       vmmctl fs ls [-l] SOCK PATH\n"
	"       vmmctl fs stat SOCK PATH\n"
	"       vmmctl fs cat SOCK PATH\n"
	"       vmmctl fs rm [-r] [-f] SOCK PATH\n"
	"       vmmctl fs mkdir [-p] SOCK PATH\n"
	"       vmmctl facts SOCK\n"
	"       vmmctl status SOCK\n"
	"       vmmctl metrics SOCK\n"
	"       vmmctl shutdown SOCK\n"
	"       vmmctl pause SOCK\n"
	"       vmmctl resume SOCK\n"
	"       vmmctl snapshot [--resume] [--compress FILE] SOCK DIR\n"
	"       vmmctl policy SOCK FILE\n"
	"       vmmctl events [--since N] SOCK\n"
	"       vmmctl call SOCK METHOD [PARAMS-JSON]\n"
	"\n"
	"SOCK is a VM's control socket (vmm start --control-socket). In cp, "
	"the guest\n"
	"side is written :PATH (vmmctl cp SOCK file.txt :/root/file.txt), and "
	"- is\n"
	"stdin or stdout. exec and shell exit with the command's status "
	"(124: timed\n"
	"out, 128+N: signal N; 127: no such command, 126: not executable, "
	"200: no such\n"
	"--cwd, 217: no such --user); otherwise 0 is success, 1 a refusal from the guest, 2 a usage "
	"error\n"
	"and 125 a failure to talk to the VM.\n";

static void die(int status, const char *fmt, ...)
	__attribute__((format(printf, 2, 3), noreturn));

static void restore_terminal(void);

static void die(int status, const char *fmt, ...)
{
	va_list ap;

	restore_terminal();
	fputs("vmmctl: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	/*
	 * At once: what the command held (a request, an answer) is the
	 * process's to drop, and SAN=1's leak check at exit() would count
	 * it; the normal exits still run it.
	 */
	fflush(stdout);
	_exit(status);
}

/*
 * The next option of command what (getopt_exact__next: exact long names,
 * optstring "+:..."); a bad one is one line and exit 2.
 */
static int next_option(const char *what, int argc, char **argv,
		       const char *optstring, const struct option *opts)
{
	char err[256];
	int opt = getopt_exact__next(argc, argv, optstring, opts, err,
				     sizeof(err));

	if (opt == '?')
		die(EXIT_USAGE, "%s: %s", what, err);
	return opt;
}

/* ---- the connection ------------------------------------------------------ */

struct conn {
	int fd;
	char *in;
	size_t in_len, in_cap;
	char *out;
	size_t out_off, out_len, out_cap;
	json_int_t next_id;
	size_t body_len; /* the front of in: the last message's body */
};

static void conn_open(struct conn *c, const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };

	memset(c, 0, sizeof(*c));
	c->next_id = 1;
	if (strlen(path) >= sizeof(sa.sun_path))
		die(EXIT_VMMCTL, "%s: path too long for a socket", path);
	strcpy(sa.sun_path, path);
	c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (c->fd < 0 || connect(c->fd, (struct sockaddr *)&sa, sizeof(sa)))
		die(EXIT_VMMCTL, "%s: %s", path, strerror(errno));
	if (fcntl(c->fd, F_SETFL, O_NONBLOCK) < 0)
		die(EXIT_VMMCTL, "%s: %s", path, strerror(errno));
}

/* Done with the server: the socket and the buffers go. */
static void conn_close(struct conn *c)
{
	close(c->fd);
	free(c->in);
	free(c->out);
	memset(c, 0, sizeof(*c));
	c->fd = -1;
}

static void grow(char **p, size_t *cap, size_t need)
{
	size_t n = *cap ? *cap : 65536;

	if (need <= *cap)
		return;
	while (n < need)
		n *= 2;
	*p = realloc(*p, n);
	if (!*p)
		die(EXIT_VMMCTL, "out of memory");
	*cap = n;
}

/*
 * Queue a request (params stolen) and n raw bytes after its line, its
 * body (fs.write with size: Documentation/api.md); its id.
 */
static json_int_t conn_send_body(struct conn *c, const char *method,
				 json_t *params, const void *body, size_t n)
{
	json_int_t id = c->next_id++;
	json_t *msg = json_pack("{s:s, s:I, s:s, s:o}", "jsonrpc", "2.0", "id",
				id, "method", method, "params",
				params ? params : json_object());
	char *s = msg ? json_dumps(msg, JSON_COMPACT) : NULL;
	size_t len;

	if (!s)
		die(EXIT_VMMCTL, "%s: cannot build the request", method);
	len = strlen(s);
	/* What was sent goes: the buffer holds what is still to send. */
	if (c->out_off) {
		memmove(c->out, c->out + c->out_off, c->out_len - c->out_off);
		c->out_len -= c->out_off;
		c->out_off = 0;
	}
	grow(&c->out, &c->out_cap, c->out_len + len + 1 + n);
	memcpy(c->out + c->out_len, s, len);
	c->out[c->out_len + len] = '\n';
	c->out_len += len + 1;
	if (n)
		memcpy(c->out + c->out_len, body, n);
	c->out_len += n;
	free(s);
	json_decref(msg);
	return id;
}

/* Queue a request (params stolen); its id. */
static json_int_t conn_send(struct conn *c, const char *method, json_t *params)
{
	return conn_send_body(c, method, params, NULL, 0);
}

/*
 * The raw bytes after a notification's line: an fs.chunk with size
 * (fs.readFile with raw, Documentation/api.md) is followed by that many;
 * nothing else is. -1: none, or not all of them received yet.
 */
static json_int_t body_size(json_t *msg, size_t have)
{
	json_t *v = json_object_get(json_object_get(msg, "params"), "size");
	const char *m = json_string_value(json_object_get(msg, "method"));
	json_int_t n;

	if (!m || strcmp(m, "fs.chunk") || !v || json_object_get(msg, "id"))
		return 0;
	n = json_is_integer(v) ? json_integer_value(v) : -1;
	if (n < 0 || n > MSG_MAX)
		die(EXIT_VMMCTL, "bad message from the server: fs.chunk size");
	return (size_t)n > have ? -1 : n;
}

/*
 * The next whole message received (with its body: conn_body), or NULL.
 * The last one's body goes first.
 */
static json_t *conn_next(struct conn *c)
{
	json_error_t err;
	json_int_t body;
	json_t *msg;
	size_t len;
	char *nl;

	if (c->body_len) {
		memmove(c->in, c->in + c->body_len, c->in_len - c->body_len);
		c->in_len -= c->body_len;
		c->body_len = 0;
	}
	/* Nothing received yet: no buffer either (memchr wants one). */
	nl = c->in_len ? memchr(c->in, '\n', c->in_len) : NULL;
	if (!nl)
		return NULL;
	len = nl - c->in;
	msg = json_loadb(c->in, len, 0, &err);
	if (!msg || !json_is_object(msg))
		die(EXIT_VMMCTL, "bad message from the server: %s",
		    msg ? "not an object" : err.text);
	body = body_size(msg, c->in_len - len - 1);
	if (body < 0) { /* read again once the rest of the body is in */
		json_decref(msg);
		return NULL;
	}
	memmove(c->in, nl + 1, c->in_len - len - 1);
	c->in_len -= len + 1;
	c->body_len = body;
	return msg;
}

/* The body of the message conn_next last returned (len 0: none). */
static const uint8_t *conn_body(const struct conn *c, size_t *len)
{
	*len = c->body_len;
	return (const uint8_t *)c->in;
}

/*
 * One round: send what is queued, read what came, wait at most
 * timeout_ms. extra (may be NULL) are the caller's own descriptors.
 */
static void conn_poll(struct conn *c, struct pollfd *extra, int nextra,
		      int timeout_ms)
{
	struct pollfd p[8];
	ssize_t n;
	int i;

	p[0] = (struct pollfd){ .fd = c->fd, .events = POLLIN };
	if (c->out_len > c->out_off)
		p[0].events |= POLLOUT;
	for (i = 0; i < nextra; i++)
		p[i + 1] = extra[i];
	if (poll(p, nextra + 1, timeout_ms) < 0) {
		if (errno != EINTR)
			die(EXIT_VMMCTL, "poll: %s", strerror(errno));
		for (i = 0; i < nextra; i++)
			extra[i].revents = 0;
		return;
	}
	for (i = 0; i < nextra; i++)
		extra[i].revents = p[i + 1].revents;
	if (p[0].revents & POLLOUT) {
		n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off,
			 MSG_NOSIGNAL);
		if (n < 0 && errno != EAGAIN && errno != EINTR)
			die(EXIT_VMMCTL, "the VM went away (%s)",
			    strerror(errno));
		if (n > 0)
			c->out_off += n;
	}
	if (p[0].revents & (POLLIN | POLLHUP | POLLERR)) {
		grow(&c->in, &c->in_cap, c->in_len + 65536);
		n = recv(c->fd, c->in + c->in_len, 65536, 0);
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			return;
		if (n <= 0)
			die(EXIT_VMMCTL, "the VM closed the connection%s%s",
			    n ? ": " : "", n ? strerror(errno) : "");
		c->in_len += n;
		if (c->in_len > MSG_MAX && !memchr(c->in, '\n', c->in_len))
			die(EXIT_VMMCTL, "message from the server too large");
	}
}

static bool is_response(json_t *msg, json_int_t id)
{
	json_t *v = json_object_get(msg, "id");

	return json_is_integer(v) && json_integer_value(v) == id;
}

static const char *error_errno(json_t *msg)
{
	json_t *e = json_object_get(msg, "error");

	return json_string_value(
		json_object_get(json_object_get(e, "data"), "errno"));
}

/* The error of a response as "message (ERRNO)", or NULL. */
static const char *error_text(json_t *msg)
{
	static char buf[512];
	json_t *e = json_object_get(msg, "error");
	const char *m, *en;

	if (!e)
		return NULL;
	m = json_string_value(json_object_get(e, "message"));
	en = error_errno(msg);
	snprintf(buf, sizeof(buf), "%s%s%s%s", m ? m : "error", en ? " (" : "",
		 en ? en : "", en ? ")" : "");
	return buf;
}

static int error_status(json_t *msg)
{
	json_int_t code = json_integer_value(
		json_object_get(json_object_get(msg, "error"), "code"));

	return code == -32000 ? EXIT_FAILED : EXIT_VMMCTL;
}

typedef void (*notify_fn)(void *ctx, const char *method, json_t *params);

/* Wait for the answer to id; notifications go to fn. */
static json_t *conn_wait(struct conn *c, json_int_t id, notify_fn fn, void *ctx)
{
	json_t *msg;

	for (;;) {
		while ((msg = conn_next(c))) {
			const char *m = json_string_value(
				json_object_get(msg, "method"));

			if (is_response(msg, id))
				return msg;
			if (m && fn)
				fn(ctx, m, json_object_get(msg, "params"));
			json_decref(msg);
		}
		conn_poll(c, NULL, 0, -1);
	}
}

/* A call whose failure ends vmmctl: the result (a reference). */
static json_t *call(struct conn *c, const char *what, const char *method,
		    json_t *params)
{
	json_t *msg = conn_wait(c, conn_send(c, method, params), NULL, NULL);
	json_t *res;

	if (error_text(msg)) {
		const char *text = error_text(msg); /* static: outlives msg */
		int status = error_status(msg);

		json_decref(msg); /* before the exit (SAN=1's leak check) */
		die(status, "%s: %s", what, text);
	}
	res = json_incref(json_object_get(msg, "result"));
	json_decref(msg);
	return res;
}

/* Bytes of a base64 field (malloc'ed). */
static uint8_t *b64_field(json_t *obj, const char *key, size_t *len)
{
	json_t *v = json_object_get(obj, key);
	const char *s = json_string_value(v);
	uint8_t *out;
	ssize_t n;

	if (!s)
		die(EXIT_VMMCTL, "%s: missing from a server message", key);
	out = malloc(base64__decoded_max(json_string_length(v)));
	if (!out)
		die(EXIT_VMMCTL, "out of memory");
	n = base64__decode(s, json_string_length(v), out);
	if (n < 0)
		die(EXIT_VMMCTL, "%s: bad base64 from the server", key);
	*len = n;
	return out;
}

static json_t *b64_json(const void *p, size_t n)
{
	char *s = malloc(base64__encoded_len(n) + 1);
	json_t *j;

	if (!s)
		die(EXIT_VMMCTL, "out of memory");
	base64__encode(p, n, s);
	j = json_stringn_nocheck(s, base64__encoded_len(n));
	free(s);
	return j;
}

static void write_all(int fd, const uint8_t *p, size_t n)
{
	ssize_t w;

	while (n) {
		w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			die(EXIT_FAILED, "write: %s", strerror(errno));
		p += w;
		n -= w;
	}
}

/* ---- signals and the terminal -------------------------------------------- */

static int sig_pipe[2] = { -1, -1 };
static struct termios saved_tio;
static bool tio_saved;

static void on_signal(int sig)
{
	unsigned char s = sig;
	int e = errno;

	if (write(sig_pipe[1], &s, 1) < 0)
		(void)0; /* full: the signal is pending already */
	errno = e;
}

static void catch_signals(const int *sigs, int n)
{
	struct sigaction sa = { .sa_handler = on_signal,
				.sa_flags = SA_RESTART };
	int i;

	if (pipe2(sig_pipe, O_CLOEXEC | O_NONBLOCK) < 0)
		die(EXIT_VMMCTL, "pipe: %s", strerror(errno));
	sigemptyset(&sa.sa_mask);
	for (i = 0; i < n; i++)
		sigaction(sigs[i], &sa, NULL);
}

static void restore_terminal(void)
{
	if (tio_saved)
		tcsetattr(STDIN_FILENO, TCSADRAIN, &saved_tio);
	tio_saved = false;
}

static void raw_terminal(void)
{
	struct termios t;

	if (tcgetattr(STDIN_FILENO, &saved_tio) < 0)
		return;
	tio_saved = true;
	t = saved_tio;
	cfmakeraw(&t);
	tcsetattr(STDIN_FILENO, TCSADRAIN, &t);
}

/* ---- exec and shell ------------------------------------------------------ */

struct session {
	struct conn *c;
	json_int_t stream;
	bool exited;
	int status;
};

static void session_notify(void *ctx, const char *method, json_t *params)
{
	struct session *s = ctx;
	uint8_t *data;
	size_t len;

	if (json_integer_value(json_object_get(params, "stream")) != s->stream)
		return;
	if (!strcmp(method, "stream.stdout") ||
	    !strcmp(method, "stream.stderr")) {
		data = b64_field(params, "data", &len);
		write_all(strcmp(method, "stream.stdout") ? STDERR_FILENO :
							    STDOUT_FILENO,
			  data, len);
		free(data);
	} else if (!strcmp(method, "stream.exit")) {
		json_t *err = json_object_get(params, "error");

		if (err)
			die(EXIT_VMMCTL, "%s", json_string_value(err));
		s->exited = true;
		s->status =
			json_integer_value(json_object_get(params, "exitCode"));
	}
}

static void window_size(unsigned short *rows, unsigned short *cols)
{
	struct winsize ws;

	*rows = 24;
	*cols = 80;
	if (!ioctl(STDIN_FILENO, TIOCGWINSZ, &ws) && ws.ws_row && ws.ws_col) {
		*rows = ws.ws_row;
		*cols = ws.ws_col;
	}
}

/*
 * Forward stdin, signals and (for a pty) window changes until the stream
 * exits; answers to our writes come back in order.
 */
static int session_run(struct session *s, bool pty)
{
	const char *write_m = pty ? "pty.write" : "spawn.write";
	struct conn *c = s->c;
	bool in_open = true;
	int in_flight = 0;
	uint8_t buf[CHUNK];
	json_t *msg;

	while (!s->exited) {
		struct pollfd p[2] = {
			{ .fd = in_open && in_flight < IN_FLIGHT ?
					STDIN_FILENO :
					-1,
			  .events = POLLIN },
			{ .fd = sig_pipe[0], .events = POLLIN },
		};
		unsigned char sig;
		ssize_t n;

		/* What came with the answer to spawn is handled first. */
		while ((msg = conn_next(c))) {
			const char *m = json_string_value(
				json_object_get(msg, "method"));

			if (m) {
				session_notify(s, m,
					       json_object_get(msg, "params"));
			} else {
				in_flight--;
				if (error_text(msg) && in_open) {
					/* stdin is over for the guest */
					in_open = false;
				}
			}
			json_decref(msg);
		}
		if (s->exited)
			break;
		conn_poll(c, p, 2, -1);
		if (p[1].revents & POLLIN) {
			while (read(sig_pipe[0], &sig, 1) == 1) {
				unsigned short rows, cols;

				if (sig == SIGWINCH) {
					window_size(&rows, &cols);
					conn_send(c, "pty.resize",
						  json_pack("{s:I, s:i, s:i}",
							    "stream", s->stream,
							    "rows", rows,
							    "cols", cols));
				} else {
					conn_send(c,
						  pty ? "pty.kill" :
							"spawn.kill",
						  json_pack("{s:I, s:i}",
							    "stream", s->stream,
							    "signal", sig));
				}
				in_flight++;
			}
		}
		if (!(p[0].revents & (POLLIN | POLLHUP | POLLERR)))
			continue;
		n = read(STDIN_FILENO, buf, sizeof(buf));
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n <= 0) {
			in_open = false;
			conn_send(c, pty ? "pty.write" : "spawn.closeStdin",
				  json_pack("{s:I, s:s, s:b}", "stream",
					    s->stream, "data", "", "eof", 1));
		} else {
			conn_send(c, write_m,
				  json_pack("{s:I, s:o}", "stream", s->stream,
					    "data", b64_json(buf, n)));
		}
		in_flight++;
	}
	restore_terminal();
	return s->status;
}

/*
 * A refused start: like a shell, 127 for no such command, 126 for EACCES;
 * EXIT_CWD when it was the working directory (the error's data has "cwd"),
 * EXIT_USER when no such user (it has "user").
 */
static void start_failed(json_t *msg, const char *cmd)
{
	json_t *data = json_object_get(json_object_get(msg, "error"), "data");
	const char *en = error_errno(msg);
	const char *text = error_text(msg); /* a static buffer: outlives msg */
	bool named = false;
	int status = EXIT_VMMCTL;

	if (json_object_get(data, "cwd")) {
		status = EXIT_CWD;
		named = true;
	} else if (json_object_get(data, "user")) {
		status = EXIT_USER;
		named = true;
	} else if (en && !strcmp(en, "ENOENT"))
		status = 127;
	else if (en && (!strcmp(en, "EACCES") || !strcmp(en, "ENOEXEC")))
		status = 126;
	/* The answer goes before the exit (SAN=1's leak check). */
	json_decref(msg);
	if (named || !strncmp(text, cmd, strlen(cmd)))
		die(status, "%s", text);
	die(status, "%s: %s", cmd, text);
}

static int start_session(struct conn *c, const char *method, json_t *params,
			 bool pty, const char *cmd)
{
	static const int sigs[] = { SIGINT, SIGTERM, SIGHUP, SIGQUIT,
				    SIGWINCH };
	struct session s = { .c = c };
	json_t *msg;

	catch_signals(sigs, pty ? 5 : 4);
	msg = conn_wait(c, conn_send(c, method, params), NULL, NULL);
	if (error_text(msg))
		start_failed(msg, cmd);
	s.stream = json_integer_value(
		json_object_get(json_object_get(msg, "result"), "stream"));
	json_decref(msg);
	if (pty && isatty(STDIN_FILENO))
		raw_terminal();
	return session_run(&s, pty);
}

static int cmd_exec(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "timeout-ms", required_argument, NULL, 't' },
		{ "cwd", required_argument, NULL, 'C' },
		{ "env", required_argument, NULL, 'e' },
		{ "user", required_argument, NULL, 'u' },
		{ NULL, 0, NULL, 0 },
	};
	json_t *params = json_object(), *av = json_array(), *env = NULL;
	struct conn c;
	char *end;
	int opt, i, ret;

	while ((opt = next_option("exec", argc, argv, "+:e:C:t:u:", opts)) !=
	       -1) {
		switch (opt) {
		case 't':
			errno = 0;
			json_object_set_new(
				params, "timeoutMs",
				json_integer(strtoll(optarg, &end, 10)));
			if (*end || errno || optarg[0] == '-')
				die(EXIT_USAGE,
				    "--timeout-ms %s: not a "
				    "number of milliseconds",
				    optarg);
			break;
		case 'C':
			json_object_set_new(params, "cwd", json_string(optarg));
			break;
		case 'u':
			json_object_set_new(params, "user",
					    json_string(optarg));
			break;
		case 'e':
			if (!strchr(optarg, '=') || optarg[0] == '=')
				die(EXIT_USAGE, "--env %s: expected K=V",
				    optarg);
			if (!env)
				env = json_array();
			json_array_append_new(env, json_string(optarg));
			break;
		}
	}
	if (argc - optind < 3 || strcmp(argv[optind + 1], "--"))
		die(EXIT_USAGE, "exec: expected SOCK -- CMD [ARG...]");
	/* --env adds to the guest's default environment (api.md). */
	if (env) {
		json_object_set_new(params, "env", env);
		json_object_set_new(params, "envMode", json_string("merge"));
	}
	for (i = optind + 2; i < argc; i++)
		json_array_append_new(av, json_string(argv[i]));
	json_object_set_new(params, "argv", av);
	conn_open(&c, argv[optind]);
	ret = start_session(&c, "spawn", params, false, argv[optind + 2]);
	conn_close(&c);
	return ret;
}

/*
 * The login shell: bash if the guest has it, sh otherwise, with the local
 * terminal type.
 */
static const char shell_script[] =
	"TERM=${1:-xterm}; export TERM; "
	"command -v bash >/dev/null 2>&1 && exec bash -l; exec sh -l";

static int cmd_shell(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "cwd", required_argument, NULL, 'C' },
		{ "user", required_argument, NULL, 'u' },
		{ NULL, 0, NULL, 0 },
	};
	json_t *params = json_object(), *av = json_array();
	unsigned short rows, cols;
	const char *term = getenv("TERM");
	struct conn c;
	int opt, i, ret;

	while ((opt = next_option("shell", argc, argv, "+:C:u:", opts)) != -1)
		json_object_set_new(params, opt == 'u' ? "user" : "cwd",
				    json_string(optarg));
	if (optind >= argc)
		die(EXIT_USAGE, "shell: expected SOCK");
	if (optind + 1 < argc) {
		if (strcmp(argv[optind + 1], "--") || optind + 2 >= argc)
			die(EXIT_USAGE, "shell: put the command after --");
		for (i = optind + 2; i < argc; i++)
			json_array_append_new(av, json_string(argv[i]));
	} else {
		json_array_append_new(av, json_string("/bin/sh"));
		json_array_append_new(av, json_string("-c"));
		json_array_append_new(av, json_string(shell_script));
		json_array_append_new(av, json_string("sh"));
		json_array_append_new(av, json_string(term ? term : "xterm"));
	}
	window_size(&rows, &cols);
	json_object_set_new(params, "argv", av);
	json_object_set_new(params, "rows", json_integer(rows));
	json_object_set_new(params, "cols", json_integer(cols));
	conn_open(&c, argv[optind]);
	ret = start_session(&c, "pty.open", params, true, "shell");
	conn_close(&c);
	return ret;
}

/* ---- files --------------------------------------------------------------- */

struct download {
	struct conn *c;
	json_int_t id;
	int fd;
	uint64_t bytes;
};

static void download_notify(void *ctx, const char *method, json_t *params)
{
	struct download *d = ctx;
	const uint8_t *body;
	size_t len;

	if (strcmp(method, "fs.chunk") ||
	    json_integer_value(json_object_get(params, "id")) != d->id)
		return;
	body = conn_body(d->c, &len);
	write_all(d->fd, body, len);
	d->bytes += len;
}

/* Guest file to fd, chunk by chunk; 0 or the status to exit with. */
static int download(struct conn *c, const char *path, int fd, const char **why)
{
	struct download d = { .c = c, .fd = fd };
	json_t *msg;
	int status = 0;

	/* raw: each chunk's bytes after its line, not base64 in it. */
	d.id = conn_send(c, "fs.readFile",
			 json_pack("{s:s, s:b, s:b}", "path", path, "stream", 1,
				   "raw", 1));
	msg = conn_wait(c, d.id, download_notify, &d);
	if (error_text(msg)) {
		*why = error_text(msg);
		status = error_status(msg);
	}
	json_decref(msg);
	return status;
}

/* fd to a guest file, IN_FLIGHT chunks ahead of the answers. */
static int upload(struct conn *c, int fd, const char *path, int mode,
		  bool parents, const char **why)
{
	json_t *params = json_pack("{s:s, s:b, s:b}", "path", path, "stream", 1,
				   "createParents", parents);
	json_int_t stream, close_id = 0;
	int in_flight = 0, status = 0;
	uint8_t *buf = malloc(UPLOAD_CHUNK);
	json_t *res, *msg;
	ssize_t n;

	if (!buf)
		die(EXIT_VMMCTL, "out of memory");
	if (mode >= 0)
		json_object_set_new(params, "mode", json_integer(mode));
	msg = conn_wait(c, conn_send(c, "fs.writeFile", params), NULL, NULL);
	if (error_text(msg)) {
		*why = error_text(msg);
		status = error_status(msg);
		json_decref(msg);
		free(buf);
		return status;
	}
	res = json_object_get(msg, "result");
	stream = json_integer_value(json_object_get(res, "stream"));
	json_decref(msg);
	while (!close_id || in_flight) {
		while (!close_id && in_flight < IN_FLIGHT) {
			n = read(fd, buf, UPLOAD_CHUNK);
			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0)
				die(EXIT_FAILED, "read: %s", strerror(errno));
			if (!n) {
				close_id = conn_send(
					c, "fs.close",
					json_pack("{s:I}", "stream", stream));
			} else {
				conn_send_body(c, "fs.write",
					       json_pack("{s:I, s:I}", "stream",
							 stream, "size",
							 (json_int_t)n),
					       buf, n);
			}
			in_flight++;
		}
		conn_poll(c, NULL, 0, -1);
		while ((msg = conn_next(c))) {
			if (!json_object_get(msg, "method")) {
				in_flight--;
				if (error_text(msg) && !status) {
					*why = error_text(msg);
					status = error_status(msg);
				}
			}
			json_decref(msg);
		}
		if (status && !close_id)
			break; /* the stream is dead: stop reading the file */
	}
	if (status && !close_id) {
		/* Tell the server we are done with it, and wait. */
		msg = conn_wait(c,
				conn_send(c, "fs.close",
					  json_pack("{s:I}", "stream", stream)),
				NULL, NULL);
		json_decref(msg);
	}
	free(buf);
	return status;
}

static const char *base_name(const char *p)
{
	const char *s = strrchr(p, '/');

	return s && s[1] ? s + 1 : p;
}

static int cmd_cp(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "mode", required_argument, NULL, 'm' },
		{ "parents", no_argument, NULL, 'p' },
		{ NULL, 0, NULL, 0 },
	};
	const char *src, *dst, *why = NULL;
	char local[PATH_MAX], *guest = NULL;
	bool parents = false;
	int opt, mode = -1, fd, status;
	struct stat st;
	struct conn c;
	char *end;

	while ((opt = next_option("cp", argc, argv, "+:pm:", opts)) != -1) {
		if (opt == 'p') {
			parents = true;
			continue;
		}
		mode = strtol(optarg, &end, 8);
		if (*end || mode < 0 || mode > 07777)
			die(EXIT_USAGE, "--mode %s: expected octal", optarg);
	}
	if (argc - optind != 3)
		die(EXIT_USAGE, "cp: expected SOCK SRC DST");
	src = argv[optind + 1];
	dst = argv[optind + 2];
	if ((src[0] == ':') == (dst[0] == ':'))
		die(EXIT_USAGE, "cp: one of SRC and DST is a guest path "
				"(:/path), the other a local one");
	conn_open(&c, argv[optind]);
	if (dst[0] == ':') { /* host -> guest */
		fd = strcmp(src, "-") ? open(src, O_RDONLY | O_CLOEXEC) :
					STDIN_FILENO;
		if (fd < 0 || fstat(fd, &st) < 0)
			die(EXIT_FAILED, "%s: %s", src, strerror(errno));
		if (S_ISDIR(st.st_mode))
			die(EXIT_FAILED, "%s: is a directory", src);
		if (mode < 0 && fd != STDIN_FILENO)
			mode = st.st_mode & 0777;
		dst++;
		if (dst[strlen(dst) - 1] == '/' &&
		    asprintf(&guest, "%s%s", dst, base_name(src)) > 0)
			dst = guest;
		status = upload(&c, fd, dst, mode, parents, &why);
		if (status)
			die(status, "%s: %s", dst, why);
		free(guest);
		conn_close(&c);
		return 0;
	}
	src++; /* guest -> host */
	snprintf(local, sizeof(local), "%s", dst);
	if (!stat(dst, &st) && S_ISDIR(st.st_mode))
		snprintf(local, sizeof(local), "%s/%s", dst, base_name(src));
	fd = strcmp(dst, "-") ?
		     open(local, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
			  mode >= 0 ? mode : 0666) :
		     STDOUT_FILENO;
	if (fd < 0)
		die(EXIT_FAILED, "%s: %s", local, strerror(errno));
	status = download(&c, src, fd, &why);
	if (status) {
		if (fd != STDOUT_FILENO)
			unlink(local); /* no half file behind */
		die(status, "%s: %s", src, why);
	}
	if (fd != STDOUT_FILENO && close(fd) < 0)
		die(EXIT_FAILED, "%s: %s", local, strerror(errno));
	conn_close(&c);
	return 0;
}

static int compare_names(const void *a, const void *b)
{
	json_t *x = *(json_t *const *)a, *y = *(json_t *const *)b;

	return strcmp(json_string_value(json_object_get(x, "name")),
		      json_string_value(json_object_get(y, "name")));
}

static void print_name(json_t *e)
{
	json_t *raw = json_object_get(e, "nameBytes");
	uint8_t *b;
	size_t n;

	if (!raw) {
		fputs(json_string_value(json_object_get(e, "name")), stdout);
		return;
	}
	b = b64_field(e, "nameBytes", &n);
	fwrite(b, 1, n, stdout);
	free(b);
}

static void print_long(json_t *e)
{
	static const char rwx[] = "rwxrwxrwx";
	json_int_t mode = json_integer_value(json_object_get(e, "mode"));
	json_int_t mtime = json_integer_value(json_object_get(e, "mtimeNs"));
	time_t t = mtime / 1000000000;
	char perms[11], when[32];
	struct tm tm;
	int i;

	perms[0] = S_ISDIR(mode)  ? 'd' :
		   S_ISLNK(mode)  ? 'l' :
		   S_ISREG(mode)  ? '-' :
		   S_ISSOCK(mode) ? 's' :
		   S_ISFIFO(mode) ? 'p' :
		   S_ISCHR(mode)  ? 'c' :
		   S_ISBLK(mode)  ? 'b' :
				    '?';
	for (i = 0; i < 9; i++)
		perms[i + 1] = mode & (0400 >> i) ? rwx[i] : '-';
	perms[10] = '\0';
	gmtime_r(&t, &tm);
	strftime(when, sizeof(when), "%Y-%m-%d %H:%M", &tm);
	printf("%s %5lld %5lld %12lld %s ", perms,
	       (long long)json_integer_value(json_object_get(e, "uid")),
	       (long long)json_integer_value(json_object_get(e, "gid")),
	       (long long)json_integer_value(json_object_get(e, "size")), when);
	print_name(e);
	if (json_object_get(e, "linkTarget"))
		printf(" -> %s",
		       json_string_value(json_object_get(e, "linkTarget")));
}

static void print_json(json_t *j)
{
	char *s = json_dumps(j, JSON_INDENT(2) | JSON_ENCODE_ANY);

	if (s)
		puts(s);
	free(s);
}

static int cmd_fs(int argc, char **argv)
{
	static const struct option none[] = { { NULL, 0, NULL, 0 } };
	bool recursive = false, force = false, parents = false, longf = false;
	const char *sub, *path, *why = NULL;
	json_t *res, *entries, **v;
	struct conn c;
	size_t i, n;
	int opt, status;

	if (argc < 2)
		die(EXIT_USAGE, "fs: expected ls, stat, cat, rm or mkdir");
	sub = argv[1];
	argc--;
	argv++;
	optind = 1;
	while ((opt = next_option("fs", argc, argv, "+:rfpl", none)) != -1) {
		if (opt == 'r')
			recursive = true;
		else if (opt == 'f')
			force = true;
		else if (opt == 'p')
			parents = true;
		else
			longf = true;
	}
	if (argc - optind != 2)
		die(EXIT_USAGE, "fs %s: expected SOCK PATH", sub);
	path = argv[optind + 1];
	conn_open(&c, argv[optind]);
	if (!strcmp(sub, "ls")) {
		res = call(&c, path, "fs.readDir",
			   json_pack("{s:s}", "path", path));
		entries = json_object_get(res, "entries");
		n = json_array_size(entries);
		v = calloc(n + 1, sizeof(*v));
		if (!v)
			die(EXIT_VMMCTL, "out of memory");
		for (i = 0; i < n; i++)
			v[i] = json_array_get(entries, i);
		qsort(v, n, sizeof(*v), compare_names);
		for (i = 0; i < n; i++) {
			if (longf)
				print_long(v[i]);
			else
				print_name(v[i]);
			putchar('\n');
		}
		free(v);
	} else if (!strcmp(sub, "stat")) {
		res = call(&c, path, "fs.stat",
			   json_pack("{s:s}", "path", path));
		print_json(res);
	} else if (!strcmp(sub, "cat")) {
		status = download(&c, path, STDOUT_FILENO, &why);
		if (status)
			die(status, "%s: %s", path, why);
		conn_close(&c);
		return 0;
	} else if (!strcmp(sub, "rm")) {
		res = call(&c, path, "fs.remove",
			   json_pack("{s:s, s:b, s:b}", "path", path,
				     "recursive", recursive, "force", force));
	} else if (!strcmp(sub, "mkdir")) {
		res = call(&c, path, "fs.mkdir",
			   json_pack("{s:s, s:b}", "path", path, "recursive",
				     parents));
	} else {
		die(EXIT_USAGE, "fs %s: unknown (ls, stat, cat, rm, mkdir)",
		    sub);
	}
	json_decref(res);
	conn_close(&c);
	return fflush(stdout) ? EXIT_FAILED : 0;
}

/*
 * facts, status, shutdown, pause, resume, call: one request, its result
 * as JSON.
 */
static int cmd_simple(int argc, char **argv, const char *method)
{
	json_t *params = NULL, *res;
	json_error_t err;
	struct conn c;

	if (!method) {
		if (argc < 3 || argc > 4)
			die(EXIT_USAGE, "call: expected SOCK METHOD [PARAMS]");
		method = argv[2];
		if (argc == 4) {
			params = json_loads(argv[3], 0, &err);
			if (!params)
				die(EXIT_USAGE, "%s: %s", argv[3], err.text);
		}
	} else if (argc != 2) {
		die(EXIT_USAGE, "%s: expected SOCK", argv[0]);
	}
	conn_open(&c, argv[1]);
	res = call(&c, method, method, params);
	if (!strcmp(argv[0], "facts"))
		print_json(json_object_get(res, "facts"));
	else
		print_json(res);
	json_decref(res);
	conn_close(&c);
	return 0;
}

/*
 * The vmm binary for `vmm snapshot pack`: $KILN_VMM, else the vmm
 * installed beside this vmmctl, else "vmm" on the PATH.
 */
static char *vmm_binary(void)
{
	const char *env = getenv("KILN_VMM");
	char self[PATH_MAX], *slash, *path = NULL;
	ssize_t n;

	if (env && env[0])
		return strdup(env);
	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n > 0) {
		self[n] = '\0';
		slash = strrchr(self, '/');
		if (slash) {
			*slash = '\0';
			if (asprintf(&path, "%s/vmm", self) < 0)
				path = NULL;
			if (path && !access(path, X_OK))
				return path;
			free(path);
		}
	}
	return strdup("vmm");
}

/* `vmm snapshot pack DIR FILE`, waited for; its stderr is ours. */
static void pack(const char *dir, const char *file)
{
	char *vmm = vmm_binary();
	int status;
	pid_t pid;

	if (!vmm)
		die(EXIT_VMMCTL, "out of memory");
	pid = fork();
	if (pid < 0)
		die(EXIT_VMMCTL, "fork: %s", strerror(errno));
	if (!pid) {
		execlp(vmm, vmm, "snapshot", "pack", dir, file, (char *)NULL);
		fprintf(stderr, "vmmctl: snapshot --compress: %s: %s\n", vmm,
			strerror(errno));
		_exit(EXIT_VMMCTL);
	}
	free(vmm);
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			die(EXIT_VMMCTL, "waitpid: %s", strerror(errno));
	if (!WIFEXITED(status) || WEXITSTATUS(status))
		die(EXIT_VMMCTL,
		    "snapshot --compress: the snapshot is in %s; packing it "
		    "into %s failed (above)",
		    dir, file);
}

/* PATH made absolute: the monitor's working directory is not ours. */
static char *absolute(const char *path)
{
	char cwd[PATH_MAX], *abs = NULL;

	if (path[0] == '/') {
		abs = strdup(path);
	} else {
		if (!getcwd(cwd, sizeof(cwd)))
			die(EXIT_VMMCTL, "getcwd: %s", strerror(errno));
		if (asprintf(&abs, "%s/%s", cwd, path) < 0)
			abs = NULL;
	}
	if (!abs)
		die(EXIT_VMMCTL, "out of memory");
	return abs;
}

/*
 * snapshot [--resume] [--compress FILE] SOCK DIR: vm.snapshot into DIR,
 * made absolute here; the VM stays paused unless --resume. --compress
 * then packs DIR into the archive FILE (Documentation/snapshots.md,
 * "Archives") and keeps DIR.
 */
static int cmd_snapshot(int argc, char **argv)
{
	const char *archive = NULL;
	bool resume = false;
	json_t *res;
	struct conn c;
	char *dir;
	int i = 1;

	for (;;) {
		if (argc > i && !strcmp(argv[i], "--resume")) {
			resume = true;
			i++;
		} else if (argc > i + 1 && !strcmp(argv[i], "--compress")) {
			archive = argv[i + 1];
			i += 2;
		} else {
			break;
		}
	}
	if (argc - i != 2)
		die(EXIT_USAGE,
		    "snapshot: expected [--resume] [--compress FILE] SOCK DIR");
	dir = absolute(argv[i + 1]);
	conn_open(&c, argv[i]);
	res = call(&c, "snapshot", "vm.snapshot",
		   json_pack("{s:s, s:b}", "dir", dir, "resume", resume));
	print_json(res);
	json_decref(res);
	conn_close(&c);
	if (archive)
		pack(dir, archive);
	free(dir);
	return 0;
}

/*
 * policy SOCK FILE: the network policy in FILE (- for stdin: one JSON
 * object, as for vmm start --net-policy) replaces the VM's, live.
 */
static int cmd_policy(int argc, char **argv)
{
	json_t *policy, *res;
	json_error_t err;
	struct conn c;

	if (argc != 3)
		die(EXIT_USAGE, "policy: expected SOCK FILE");
	if (!strcmp(argv[2], "-"))
		policy = json_loadf(stdin, 0, &err);
	else
		policy = json_load_file(argv[2], 0, &err);
	if (!policy)
		die(EXIT_USAGE, "%s: line %d column %d: %s", argv[2], err.line,
		    err.column, err.text);
	conn_open(&c, argv[1]);
	res = call(&c, argv[2], "net.setPolicy",
		   json_pack("{s:o}", "policy", policy));
	print_json(res);
	json_decref(res);
	conn_close(&c);
	return 0;
}

/* One vm.event's params as a JSON line; true for the last (shutdown). */
static bool print_event(json_t *msg)
{
	const char *m = json_string_value(json_object_get(msg, "method"));
	json_t *params = json_object_get(msg, "params");
	char *s;

	if (!m || strcmp(m, "vm.event") || !json_is_object(params))
		return false;
	s = json_dumps(params, JSON_COMPACT | JSON_PRESERVE_ORDER);
	if (!s || printf("%s\n", s) < 0 || fflush(stdout))
		die(EXIT_VMMCTL, "writing an event: %s", strerror(errno));
	free(s);
	return !strcmp(json_string_value(json_object_get(params, "type")) ?: "",
		       "shutdown");
}

/*
 * events [--since N] SOCK: vm.subscribe, then every vm.event as a JSON
 * line until the VM ends (its shutdown event, then the socket closes).
 * --since 0 replays the events the VM still holds.
 */
static int cmd_events(int argc, char **argv)
{
	json_t *msg, *params = json_object();
	bool ended = false;
	struct conn c;
	json_int_t id;
	char *end;
	ssize_t n;
	int i = 1;

	if (argc == 4 && !strcmp(argv[1], "--since")) {
		errno = 0;
		json_object_set_new(params, "since",
				    json_integer(strtoll(argv[2], &end, 10)));
		if (errno || !*argv[2] || *end || argv[2][0] == '-')
			die(EXIT_USAGE, "events: --since %s: not a number",
			    argv[2]);
		i = 3;
	} else if (argc != 2) {
		die(EXIT_USAGE, "events: expected [--since N] SOCK");
	}
	conn_open(&c, argv[i]);
	id = conn_send(&c, "vm.subscribe", params);
	for (;;) {
		while ((msg = conn_next(&c))) {
			if (is_response(msg, id) && error_text(msg)) {
				const char *text = error_text(msg);
				int status = error_status(msg);

				json_decref(msg);
				die(status, "vm.subscribe: %s", text);
			}
			ended |= print_event(msg);
			json_decref(msg);
		}
		if (c.out_len > c.out_off) { /* the request, not sent yet */
			conn_poll(&c, NULL, 0, -1);
			continue;
		}
		struct pollfd pf = { .fd = c.fd, .events = POLLIN };

		if (poll(&pf, 1, -1) < 0 && errno != EINTR)
			die(EXIT_VMMCTL, "poll: %s", strerror(errno));
		grow(&c.in, &c.in_cap, c.in_len + 65536);
		n = recv(c.fd, c.in + c.in_len, 65536, 0);
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n < 0)
			die(EXIT_VMMCTL, "events: %s", strerror(errno));
		if (!n)
			break;
		c.in_len += n;
		if (c.in_len > MSG_MAX && !memchr(c.in, '\n', c.in_len))
			die(EXIT_VMMCTL, "message from the server too large");
	}
	if (!ended)
		die(EXIT_VMMCTL, "events: the VM closed the connection before "
				 "its shutdown event");
	conn_close(&c);
	return 0;
}

int main(int argc, char **argv)
{
	const char *cmd = argc > 1 ? argv[1] : "";

	signal(SIGPIPE, SIG_IGN);
	if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
		fputs(usage, stdout);
		return 0;
	}
	if (!strcmp(cmd, "exec"))
		return cmd_exec(argc - 1, argv + 1);
	if (!strcmp(cmd, "shell"))
		return cmd_shell(argc - 1, argv + 1);
	if (!strcmp(cmd, "cp"))
		return cmd_cp(argc - 1, argv + 1);
	if (!strcmp(cmd, "fs"))
		return cmd_fs(argc - 1, argv + 1);
	if (!strcmp(cmd, "facts"))
		return cmd_simple(argc - 1, argv + 1, "vm.facts");
	if (!strcmp(cmd, "status"))
		return cmd_simple(argc - 1, argv + 1, "vm.status");
	if (!strcmp(cmd, "metrics"))
		return cmd_simple(argc - 1, argv + 1, "vm.metrics");
	if (!strcmp(cmd, "shutdown"))
		return cmd_simple(argc - 1, argv + 1, "vm.shutdown");
	if (!strcmp(cmd, "pause"))
		return cmd_simple(argc - 1, argv + 1, "vm.pause");
	if (!strcmp(cmd, "resume"))
		return cmd_simple(argc - 1, argv + 1, "vm.resume");
	if (!strcmp(cmd, "snapshot"))
		return cmd_snapshot(argc - 1, argv + 1);
	if (!strcmp(cmd, "policy"))
		return cmd_policy(argc - 1, argv + 1);
	if (!strcmp(cmd, "events"))
		return cmd_events(argc - 1, argv + 1);
	if (!strcmp(cmd, "call"))
		return cmd_simple(argc - 1, argv + 1, NULL);
	if (*cmd)
		die(EXIT_USAGE,
		    "unknown command '%s' (vmmctl --help lists them)", cmd);
	fputs(usage, stderr);
	return EXIT_USAGE;
}
