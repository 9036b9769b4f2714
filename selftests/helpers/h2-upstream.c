// SPDX-License-Identifier: GPL-2.0
/*
 * h2-upstream: the network tests' HTTPS upstream that speaks HTTP/2
 * alone (selftests/kvm/net.c), on libnghttp2 and wolfSSL as the vmm is.
 *
 *	h2-upstream ADDR PORT CERT KEY LOG
 *
 * Listens on ADDR:PORT with the PEM certificate (chain) CERT and its key
 * KEY, offers ALPN "h2" only (a client offering ALPN without h2 gets a
 * no_application_protocol alert, the handshake fails), answers GET /user
 * with one JSON body (anything else: 404). Each request is appended to
 * LOG as its protocol, method and path on one line ("h2 GET /user"),
 * then its header fields one "name: value" a line as they came
 * (pseudo-headers included), then a blank line: the same shape as
 * https-upstream.py's log. Prints "ready" once it listens; runs until
 * killed. One child process per connection, each bounded by
 * CONN_IO_SECS of silence and killed with its parent.
 *
 * Built like the unit tests (pkg-config's nghttp2 and wolfSSL), not as
 * a static guest helper: it runs on the host.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <nghttp2/nghttp2.h>
#include <wolfssl/options.h>
#include <wolfssl/ssl.h>

#define BODY	       "{\"login\": \"kiln-test-user\"}\n"
#define ALPN	       "h2"
#define CONN_IO_SECS   30   /* a connection silent this long is closed */
#define HEAD_MAX       8192 /* one request's log entry; longer is cut */
#define LISTEN_BACKLOG 16

/* One request (stream): its log entry as it grows, what it asks for. */
struct stream {
	char head[HEAD_MAX];
	size_t len;
	bool get, user;
};

/* One connection. */
struct conn {
	WOLFSSL *ssl;
	int log; /* O_APPEND: one write per request, whole */
};

/* "name: value\n" onto st's entry. */
static void head_add(struct stream *st, const uint8_t *a, size_t alen,
		     const uint8_t *b, size_t blen)
{
	int n;

	if (st->len >= sizeof(st->head))
		return;
	n = snprintf(st->head + st->len, sizeof(st->head) - st->len,
		     "%.*s: %.*s\n", (int)alen, (const char *)a, (int)blen,
		     (const char *)b);
	if (n > 0)
		st->len += (size_t)n;
	if (st->len >= sizeof(st->head))
		st->len = sizeof(st->head) - 1;
}

static int on_begin_headers(nghttp2_session *s, const nghttp2_frame *fr,
			    void *ud)
{
	struct stream *st;

	if (fr->hd.type != NGHTTP2_HEADERS ||
	    fr->headers.cat != NGHTTP2_HCAT_REQUEST)
		return 0;
	st = calloc(1, sizeof(*st));
	if (!st)
		return NGHTTP2_ERR_CALLBACK_FAILURE;
	nghttp2_session_set_stream_user_data(s, fr->hd.stream_id, st);
	return 0;
}

static int on_header(nghttp2_session *s, const nghttp2_frame *fr,
		     const uint8_t *name, size_t nlen, const uint8_t *value,
		     size_t vlen, uint8_t flags, void *ud)
{
	struct stream *st =
		nghttp2_session_get_stream_user_data(s, fr->hd.stream_id);

	if (!st)
		return 0;
	if (nlen == 7 && !memcmp(name, ":method", 7))
		st->get = vlen == 3 && !memcmp(value, "GET", 3);
	if (nlen == 5 && !memcmp(name, ":path", 5))
		st->user = vlen == 5 && !memcmp(value, "/user", 5);
	head_add(st, name, nlen, value, vlen);
	return 0;
}

static ssize_t body_read(nghttp2_session *s, int32_t id, uint8_t *buf,
			 size_t len, uint32_t *flags, nghttp2_data_source *src,
			 void *ud)
{
	size_t n = sizeof(BODY) - 1;

	if (len < n)
		return NGHTTP2_ERR_CALLBACK_FAILURE;
	memcpy(buf, BODY, n);
	*flags |= NGHTTP2_DATA_FLAG_EOF;
	return (ssize_t)n;
}

/* The request is whole: logged, then answered. */
static int on_frame_recv(nghttp2_session *s, const nghttp2_frame *fr, void *ud)
{
	static const nghttp2_nv ok[] = {
		{ (uint8_t *)":status", (uint8_t *)"200", 7, 3, 0 },
		{ (uint8_t *)"content-type", (uint8_t *)"application/json", 12,
		  16, 0 },
	};
	static const nghttp2_nv missing[] = {
		{ (uint8_t *)":status", (uint8_t *)"404", 7, 3, 0 },
	};
	nghttp2_data_provider prd = { .read_callback = body_read };
	struct conn *c = ud;
	struct stream *st;
	char line[HEAD_MAX + 16];
	int n;

	if (!(fr->hd.flags & NGHTTP2_FLAG_END_STREAM) ||
	    (fr->hd.type != NGHTTP2_HEADERS && fr->hd.type != NGHTTP2_DATA))
		return 0;
	st = nghttp2_session_get_stream_user_data(s, fr->hd.stream_id);
	if (!st)
		return 0;
	n = snprintf(line, sizeof(line), "h2 %s\n%.*s\n",
		     st->get && st->user ? "GET /user" : "other", (int)st->len,
		     st->head);
	if (n > 0 && write(c->log, line, (size_t)n) != n)
		fprintf(stderr, "h2-upstream: log: %s\n", strerror(errno));
	if (st->get && st->user)
		return nghttp2_submit_response(s, fr->hd.stream_id, ok, 2,
					       &prd);
	return nghttp2_submit_response(s, fr->hd.stream_id, missing, 1, NULL);
}

static int on_stream_close(nghttp2_session *s, int32_t id, uint32_t code,
			   void *ud)
{
	free(nghttp2_session_get_stream_user_data(s, id));
	nghttp2_session_set_stream_user_data(s, id, NULL);
	return 0;
}

/* What the session has for the peer, written; 0 or -1. */
static int flush(nghttp2_session *s, struct conn *c)
{
	const uint8_t *d;
	ssize_t n;

	while ((n = nghttp2_session_mem_send(s, &d)) > 0)
		if (wolfSSL_write(c->ssl, d, (int)n) != n)
			return -1;
	return n < 0 ? -1 : 0;
}

/* One connection's HTTP/2 session, until either side is done with it. */
static void serve_h2(struct conn *c)
{
	nghttp2_session_callbacks *cb;
	nghttp2_session *s;
	uint8_t buf[16384];
	int n;

	if (nghttp2_session_callbacks_new(&cb))
		return;
	nghttp2_session_callbacks_set_on_begin_headers_callback(
		cb, on_begin_headers);
	nghttp2_session_callbacks_set_on_header_callback(cb, on_header);
	nghttp2_session_callbacks_set_on_frame_recv_callback(cb, on_frame_recv);
	nghttp2_session_callbacks_set_on_stream_close_callback(cb,
							       on_stream_close);
	n = nghttp2_session_server_new(&s, cb, c);
	nghttp2_session_callbacks_del(cb);
	if (n)
		return;
	if (nghttp2_submit_settings(s, NGHTTP2_FLAG_NONE, NULL, 0))
		goto out;
	while (nghttp2_session_want_read(s) || nghttp2_session_want_write(s)) {
		if (flush(s, c))
			break;
		if (!nghttp2_session_want_read(s))
			break;
		n = wolfSSL_read(c->ssl, buf, sizeof(buf));
		if (n <= 0)
			break;
		if (nghttp2_session_mem_recv(s, buf, (size_t)n) < 0) {
			flush(s, c); /* its GOAWAY, if it can */
			break;
		}
	}
out:
	nghttp2_session_del(s); /* frees the streams left (on_stream_close) */
}

static void serve(WOLFSSL_CTX *ctx, int fd, int log)
{
	struct timeval tv = { .tv_sec = CONN_IO_SECS };
	const char *alpn = NULL;
	struct conn c = { .log = log };
	unsigned short alen = 0;
	char *p = NULL;

	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	c.ssl = wolfSSL_new(ctx);
	if (!c.ssl || wolfSSL_set_fd(c.ssl, fd) != WOLFSSL_SUCCESS ||
	    wolfSSL_UseALPN(c.ssl, (char *)ALPN, sizeof(ALPN) - 1,
			    WOLFSSL_ALPN_FAILED_ON_MISMATCH) != WOLFSSL_SUCCESS)
		goto out;
	if (wolfSSL_accept(c.ssl) != WOLFSSL_SUCCESS) {
		fprintf(stderr, "h2-upstream: handshake failed: %d\n",
			wolfSSL_get_error(c.ssl, 0));
		goto out;
	}
	/* A client that offered no ALPN gets none: h2 is all it may speak. */
	if (wolfSSL_ALPN_GetProtocol(c.ssl, &p, &alen) == WOLFSSL_SUCCESS)
		alpn = p;
	if (alpn && (alen != sizeof(ALPN) - 1 || memcmp(alpn, ALPN, alen)))
		goto out;
	serve_h2(&c);
	wolfSSL_shutdown(c.ssl);
out:
	wolfSSL_free(c.ssl);
}

static int listener(const char *addr, const char *port)
{
	struct sockaddr_in sin = { .sin_family = AF_INET };
	char *end;
	long n = strtol(port, &end, 10);
	int fd, one = 1;

	if (*end || n <= 0 || n > 65535 ||
	    inet_pton(AF_INET, addr, &sin.sin_addr) != 1) {
		fprintf(stderr,
			"h2-upstream: %s:%s: not an IPv4 address "
			"and port\n",
			addr, port);
		return -1;
	}
	sin.sin_port = htons((uint16_t)n);
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 ||
	    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
	    bind(fd, (struct sockaddr *)&sin, sizeof(sin)) ||
	    listen(fd, LISTEN_BACKLOG)) {
		fprintf(stderr, "h2-upstream: listen on %s:%s: %s\n", addr,
			port, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return fd;
}

int main(int argc, char **argv)
{
	WOLFSSL_CTX *ctx;
	int lsn, log, fd;
	pid_t parent = getpid();

	if (argc != 6) {
		fprintf(stderr, "usage: h2-upstream ADDR PORT CERT KEY LOG\n");
		return 2;
	}
	log = open(argv[5], O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	if (log < 0) {
		fprintf(stderr, "h2-upstream: %s: %s\n", argv[5],
			strerror(errno));
		return 1;
	}
	wolfSSL_Init();
	ctx = wolfSSL_CTX_new(wolfSSLv23_server_method());
	if (!ctx ||
	    wolfSSL_CTX_use_certificate_chain_file(ctx, argv[3]) !=
		    WOLFSSL_SUCCESS ||
	    wolfSSL_CTX_use_PrivateKey_file(
		    ctx, argv[4], WOLFSSL_FILETYPE_PEM) != WOLFSSL_SUCCESS) {
		fprintf(stderr,
			"h2-upstream: %s, %s: not a PEM certificate "
			"and its key\n",
			argv[3], argv[4]);
		return 1;
	}
	lsn = listener(argv[1], argv[2]);
	if (lsn < 0)
		return 1;
	signal(SIGCHLD, SIG_IGN); /* children reaped by the kernel */
	signal(SIGPIPE, SIG_IGN); /* a peer gone is a failed write */
	printf("ready\n");
	fflush(stdout);
	for (;;) {
		fd = accept4(lsn, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			fprintf(stderr, "h2-upstream: accept: %s\n",
				strerror(errno));
			return 1;
		}
		switch (fork()) {
		case -1:
			fprintf(stderr, "h2-upstream: fork: %s\n",
				strerror(errno));
			break;
		case 0:
			/* Killed with the parent, so the test leaves none. */
			if (prctl(PR_SET_PDEATHSIG, SIGTERM) ||
			    getppid() != parent)
				_exit(0);
			close(lsn);
			serve(ctx, fd, log);
			close(fd);
			_exit(0);
		}
		close(fd);
	}
}
