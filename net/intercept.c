// SPDX-License-Identifier: GPL-2.0
/*
 * HTTP interception of one guest flow (intercept.h, Documentation/
 * network.md "HTTP grants and interception").
 *
 * Guest bytes are read into `in` and fed to the request rewriter, whose
 * output goes upstream; upstream bytes are read into `back`, watched by
 * the response tracker and written to the guest as they came. A refused
 * request stops the reading of the guest; the responses to the requests
 * before it are still relayed (the tracker says when they are done), then
 * the error response goes into `back`, the guest gets its end, and what
 * it still sends is read and dropped until its own: closing with unread
 * bytes would reset the connection, and the guest could lose the answer.
 *
 * On a TLS port each side is a TLS connection (net/tls.h) on the
 * proxy's socket: toward the guest a server whose certificate is minted
 * for the SNI once the policy accepted that name, toward upstream a
 * client verifying upstream's certificate for the same name. The guest
 * is offered only the protocol upstream chose, so upstream comes first:
 *
 *   IC_HELLO      the guest's ClientHello peeked at (MSG_PEEK, one
 *                 record, nothing read): its SNI, decided by the policy.
 *                 Allowed: on to IC_UPSTREAM. Anything else (not TLS, no
 *                 SNI, a name refused): straight to IC_HANDSHAKE with no
 *                 upstream, where the handshake fails as it always did.
 *   IC_UPSTREAM   the proxy connects (intercept__wants_upstream), TLS to
 *                 the SNI's name offering "h2,http/1.1"; upstream's choice
 *                 (none: http/1.1) kept. Failed: on without upstream, the
 *                 guest to get the 502 after its handshake.
 *   IC_HANDSHAKE  the guest's handshake, offered upstream's choice (and
 *                 http/1.1 after h2: a guest without h2 still gets in);
 *                 sni_ok checks the SNI again, which must be the peeked.
 *   IC_RELAY      h2 both sides (net/h2.c) or HTTP/1.1 both sides
 *                 (net/http1.c). A guest on http/1.1 whose upstream is
 *                 on h2 has that upstream dropped, and the first allowed
 *                 request asks for a new one offering http/1.1 only.
 *
 * The whole setup (IC_HELLO to IC_RELAY) is bounded by the proxy's
 * deadline (intercept__expire). The rest is the same, on the plaintext.
 *
 * Each request's decision (the policy, the hook, the header edits that
 * inject credentials) is intercept-request.c's (intercept-internal.h).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include "net/intercept-internal.h"

/* What the guest gets when upstream cannot be reached (RFC 9110 15.6.3). */
#define HTTP_STATUS_BAD_GATEWAY 502U
/* Upstream owed a response and was silent past the deadline (15.6.5). */
#define HTTP_STATUS_GATEWAY_TIMEOUT 504U
/* What the guest reads then; the host's log says how long it waited. */
#define UPSTREAM_TIMED_OUT "upstream timed out"
/* Plaintext given to one TLS write at most: a record's worth. */
#define TLS_WRITE_MAX (16U << 10)
/*
 * What upstream is offered first (its choice wins); the guest is offered
 * what upstream chose: h2 (and http/1.1, for a guest without h2) or
 * http/1.1. A guest on h2 is intercepted by net/h2.c.
 */
#define UP_ALPN	      "h2,http/1.1"
#define GUEST_ALPN_H2 "h2,http/1.1"
#define ALPN_H2	      "h2"
#define ALPN_HTTP1    "http/1.1"
/* A TLS record's first byte when it carries a handshake (RFC 8446 5.1). */
#define TLS_CONTENT_HANDSHAKE 0x16U

static int unfiltered(struct intercept *ic, int (*fn)(void *), void *arg);

struct mint_args {
	struct tls_ca *ca;
	const char *host;
};

static int do_mint(void *arg)
{
	struct mint_args *a = arg;
	const uint8_t *der;
	size_t len;

	return tls_ca__leaf(a->ca, a->host, &der, &len);
}

/*
 * TLS: the guest's SNI, before any certificate is minted for it: it
 * must be bound to the destination and granted on the port, as a
 * request's name is. Refused: the handshake is aborted. Allowed: the
 * leaf is minted (or found) now where files may be opened (wolfSSL's
 * signing seeds a generator), so that the server finds it in the CA's
 * cache.
 */
static bool sni_ok(void *opaque, const char *sni)
{
	struct intercept *ic = opaque;
	struct mint_args m = { .ca = ic->tls.ca, .host = sni };
	struct net_http_decision d;
	bool ok;

	/* A second ClientHello (after a HelloRetryRequest) names the same. */
	if (ic->peeked[0] && strcmp(sni, ic->peeked)) {
		intercept__report(ic, sni, false, "tls sni changed");
		ic->counted = true;
		return false;
	}
	intercept__decide(ic, sni, &d);
	/* A grant that asks the hook does so request by request. */
	ok = d.verdict == NET_VERDICT_ALLOW || d.verdict == NET_VERDICT_ASK;
	if (ok) {
		ic->verified = true;
		snprintf(ic->host, sizeof(ic->host), "%s", sni);
	} else {
		intercept__report(ic, sni, false, d.reason);
		ic->counted = true;
	}
	explicit_bzero(&d, sizeof(d));
	/* Failed, the server's own minting fails too, and says why. */
	if (ok)
		unfiltered(ic, do_mint, &m);
	return ok;
}

/* ---- the sides: plain sockets or TLS --------------------------------- */

/* Plaintext: > 0, 0 (the peer's end), -EAGAIN or -errno. */
static ssize_t side_recv(struct intercept *ic, int s, void *buf, size_t len)
{
	struct ic_side *S = &ic->side[s];
	ssize_t n;

	if (!S->tls) {
		n = recv(S->fd, buf, len, MSG_DONTWAIT);
		if (n >= 0)
			return n;
		return errno == EAGAIN || errno == EINTR ? -EAGAIN : -errno;
	}
	n = tls_conn__read(S->tls, buf, len);
	if (n == -EAGAIN) {
		S->rwant = tls_conn__wants(S->tls);
		return n;
	}
	S->rwant = EPOLLIN;
	if (!n)
		S->clean = true;
	/* A TCP end without close_notify: an end, not a clean one. */
	return n == -ECONNRESET ? 0 : n;
}

/*
 * Plaintext: how many were sent (maybe 0: wait), or -errno. A TLS write
 * that waited is made again with the same bytes: buf must start with
 * them, as the rewriter's output and `back` do until drained.
 */
static ssize_t side_send(struct intercept *ic, int s, const void *buf,
			 size_t len)
{
	struct ic_side *S = &ic->side[s];
	ssize_t n;

	if (!S->tls) {
		n = send(S->fd, buf, len, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (n >= 0)
			return n;
		return errno == EAGAIN || errno == EINTR ? 0 : -errno;
	}
	len = S->wpend ? S->wpend : len < TLS_WRITE_MAX ? len : TLS_WRITE_MAX;
	n = tls_conn__write(S->tls, buf, len);
	if (n == -EAGAIN) {
		S->wpend = len;
		S->wwant = tls_conn__wants(S->tls);
		return 0;
	}
	S->wpend = 0;
	S->wwant = EPOLLOUT;
	return n;
}

/*
 * Our end: TLS's close_notify when notify (the other side's end was
 * clean), then the socket's FIN. 0, or -errno.
 */
static int side_shut(struct intercept *ic, int s, bool notify)
{
	struct ic_side *S = &ic->side[s];
	int ret;

	if (S->shut || S->fd < 0)
		return 0;
	if (S->tls && notify) {
		ret = tls_conn__shutdown(S->tls);
		S->shutting = ret == -EAGAIN;
		if (S->shutting) {
			S->wwant = tls_conn__wants(S->tls);
			return 0;
		}
		/* Failed (the peer gone): the FIN still goes. */
	}
	S->shut = true;
	return shutdown(S->fd, SHUT_WR) && errno != ENOTCONN ? -errno : 0;
}

/* Whether a TLS side holds decrypted bytes epoll cannot see. */
static bool side_pending(struct intercept *ic, int s)
{
	struct tls_conn *c = ic->side[s].tls;

	return c && tls_conn__pending(c);
}

/* ---- the buffers ----------------------------------------------------- */

static size_t back_pending(const struct intercept *ic)
{
	return ic->back_len - ic->back_off;
}

static void back_compact(struct intercept *ic)
{
	if (!ic->back_off)
		return;
	memmove(ic->back, ic->back + ic->back_off, back_pending(ic));
	ic->back_len -= ic->back_off;
	ic->back_off = 0;
}

static size_t out_pending(const struct intercept *ic)
{
	size_t len = 0;

	if (ic->h2)
		return h2__pending(ic->h2, H2_UP);
	if (ic->req)
		http1_req__output(ic->req, &len);
	return len;
}

/* h2: what waits for the guest (back is not used). */
static size_t guest_pending(const struct intercept *ic)
{
	return ic->h2 ? h2__pending(ic->h2, H2_GUEST) : 0;
}

/* ---- reading ---------------------------------------------------------- */

/* After a refusal: the guest's bytes dropped, up to its end. */
static int guest_linger(struct intercept *ic)
{
	ssize_t n;

	for (;;) {
		n = side_recv(ic, INTERCEPT_GUEST, ic->in, INTERCEPT_BUF);
		if (n == -EAGAIN)
			return 0;
		if (n <= 0)
			return n ? (int)n : INTERCEPT_DONE;
		ic->lingered += n;
		if (ic->lingered > INTERCEPT_LINGER_MAX)
			return -E2BIG;
	}
}

static int guest_read(struct intercept *ic, bool *progress)
{
	struct ic_side *g = &ic->side[INTERCEPT_GUEST];
	ssize_t n;

	if (ic->state == IC_LINGER)
		return guest_linger(ic);
	if (ic->state != IC_RELAY || g->eof || ic->in_len == INTERCEPT_BUF)
		return 0;
	n = side_recv(ic, INTERCEPT_GUEST, ic->in + ic->in_len,
		      INTERCEPT_BUF - ic->in_len);
	if (n == -EAGAIN)
		return 0;
	if (n < 0)
		return n;
	*progress = true;
	if (!n)
		g->eof = true;
	ic->in_len += n;
	if (n && ic->ops.bytes)
		ic->ops.bytes(ic->ops.opaque, n, 0);
	return 0;
}

/* h2: upstream's bytes wait in up_in for the session. */
static int up_read_h2(struct intercept *ic, bool *progress)
{
	struct ic_side *u = &ic->side[INTERCEPT_UP];
	ssize_t n;

	if (ic->up_len == INTERCEPT_BUF)
		return 0;
	n = side_recv(ic, INTERCEPT_UP, ic->up_in + ic->up_len,
		      INTERCEPT_BUF - ic->up_len);
	if (n == -EAGAIN)
		return 0;
	if (n < 0)
		return n;
	*progress = true;
	if (!n)
		u->eof = true;
	ic->up_len += n;
	if (n && ic->ops.bytes)
		ic->ops.bytes(ic->ops.opaque, 0, n);
	return 0;
}

static int up_read(struct intercept *ic, bool *progress)
{
	struct ic_side *u = &ic->side[INTERCEPT_UP];
	ssize_t n;

	if (u->fd < 0 || !ic->up_ready || u->eof ||
	    (ic->state != IC_RELAY && ic->state != IC_REFUSED))
		return 0;
	if (ic->h2)
		return up_read_h2(ic, progress);
	/* A TLS write to the guest that waited keeps its bytes in place. */
	if (!ic->side[INTERCEPT_GUEST].wpend)
		back_compact(ic);
	if (ic->back_len == INTERCEPT_BUF)
		return 0;
	n = side_recv(ic, INTERCEPT_UP, ic->back + ic->back_len,
		      INTERCEPT_BUF - ic->back_len);
	if (n == -EAGAIN)
		return 0;
	if (n < 0)
		return n;
	*progress = true;
	ic->up_heard = true;
	if (!n) {
		u->eof = true;
		if (!ic->resp_dead && http1_resp__eof(ic->resp))
			ic->resp_dead = true;
		return 0;
	}
	/* Watched only: the guest gets upstream's bytes as they came. */
	if (!ic->resp_dead &&
	    http1_resp__feed(ic->resp, ic->back + ic->back_len, n))
		ic->resp_dead = true;
	ic->back_len += n;
	if (ic->ops.bytes)
		ic->ops.bytes(ic->ops.opaque, 0, n);
	return 0;
}

/* ---- writing ---------------------------------------------------------- */

/* What the rewriter produced, upstream, once upstream is ready. */
static int flush_up(struct intercept *ic, bool *progress)
{
	const uint8_t *out;
	size_t len;
	ssize_t n;

	if ((!ic->req && !ic->h2) || !ic->up_ready ||
	    ic->side[INTERCEPT_UP].fd < 0)
		return 0;
	out = ic->h2 ? h2__output(ic->h2, H2_UP, &len) :
		       http1_req__output(ic->req, &len);
	if (!len)
		return 0;
	n = side_send(ic, INTERCEPT_UP, out, len);
	if (n <= 0)
		return n;
	*progress = true;
	ic->up_heard = true;
	if (ic->h2)
		h2__drain(ic->h2, H2_UP, n);
	else
		http1_req__drain(ic->req, n);
	return 0;
}

/* h2: the session's bytes for the guest. */
static int flush_guest_h2(struct intercept *ic, bool *progress)
{
	const uint8_t *out;
	size_t len;
	ssize_t n;

	for (;;) {
		out = h2__output(ic->h2, H2_GUEST, &len);
		if (!len || ic->side[INTERCEPT_GUEST].shut)
			return 0;
		n = side_send(ic, INTERCEPT_GUEST, out, len);
		if (n <= 0)
			return n;
		*progress = true;
		h2__drain(ic->h2, H2_GUEST, n);
	}
}

static int flush_back(struct intercept *ic, bool *progress)
{
	ssize_t n;

	if (ic->h2)
		return flush_guest_h2(ic, progress);
	while (back_pending(ic)) {
		n = side_send(ic, INTERCEPT_GUEST, ic->back + ic->back_off,
			      back_pending(ic));
		if (n <= 0)
			return n;
		*progress = true;
		ic->back_off += n;
	}
	ic->back_off = ic->back_len = 0;
	return 0;
}

/* The guest's bytes through the rewriter, as far as it takes them. */
/* h2: what either side sent, into the sessions, as far as they take it. */
static int feed_h2(struct intercept *ic, bool *progress)
{
	ssize_t n;

	if (ic->in_len) {
		n = h2__feed(ic->h2, H2_GUEST, ic->in, ic->in_len);
		if (n < 0)
			return n;
		if (n) {
			*progress = true;
			memmove(ic->in, ic->in + n, ic->in_len - n);
			ic->in_len -= n;
		}
	}
	if (ic->up_len) {
		n = h2__feed(ic->h2, H2_UP, ic->up_in, ic->up_len);
		if (n < 0)
			return n;
		if (n) {
			*progress = true;
			memmove(ic->up_in, ic->up_in + n, ic->up_len - n);
			ic->up_len -= n;
		}
	}
	return 0;
}

static int feed(struct intercept *ic, bool *progress)
{
	ssize_t n;

	if (ic->h2)
		return feed_h2(ic, progress);
	while (ic->state == IC_RELAY && ic->in_len) {
		n = http1_req__feed(ic->req, ic->in, ic->in_len);
		if (n < 0)
			return n;
		if (!n)
			break;
		*progress = true;
		memmove(ic->in, ic->in + n, ic->in_len - n);
		ic->in_len -= n;
	}
	return 0;
}

/* ---- refusals --------------------------------------------------------- */

/* Upstream is done with: the proxy closes its socket (intercept.h). */
static void up_drop(struct intercept *ic)
{
	tls_conn__free(ic->side[INTERCEPT_UP].tls);
	ic->side[INTERCEPT_UP].tls = NULL;
	ic->side[INTERCEPT_UP].fd = -1;
	ic->up_closed = true;
}

/*
 * An error response for the guest, after what `back` holds already;
 * upstream is done with (the proxy closes it: intercept.h).
 */
static int answer(struct intercept *ic, unsigned int status, const char *reason)
{
	char buf[HTTP1_ERROR_RESPONSE_MAX];
	ssize_t n;

	n = http1__error_response(status, reason, buf, sizeof(buf));
	if (n < 0)
		return n;
	if (!ic->side[INTERCEPT_GUEST].wpend)
		back_compact(ic);
	if (n > (ssize_t)(INTERCEPT_BUF - ic->back_len))
		return -ENOSPC;
	memcpy(ic->back + ic->back_len, buf, n);
	ic->back_len += n;
	ic->state = IC_ANSWER;
	ic->in_len = 0;
	up_drop(ic);
	return 0;
}

/* The rewriter refused (feed's ret): report it, stop reading the guest. */
int intercept__refused(struct intercept *ic, ssize_t ret)
{
	const struct http1_refusal *r = http1_req__refusal(ic->req);

	if (!r || ret == -ENOMEM)
		return ret ? (int)ret : -EPROTO;
	if (!ic->counted)
		intercept__report(ic, ic->host, false, r->reason);
	ic->counted = true;
	/* Its head went upstream, its body broke: no answer is coming. */
	if (r->head_sent)
		return -EPROTO;
	ic->state = IC_REFUSED;
	ic->in_len = 0;
	return 0;
}

/*
 * Refused: once the requests before it have their responses, the error
 * response goes to the guest. Without the tracker nobody knows where
 * those end: a reset, as when upstream ends before they did.
 */
static int refused_step(struct intercept *ic)
{
	const struct http1_refusal *r = http1_req__refusal(ic->req);

	if (out_pending(ic) || back_pending(ic))
		return 0;
	if (http1_resp__answered(ic->resp) >= r->request)
		return answer(ic, r->status, r->reason);
	if (ic->resp_dead || ic->side[INTERCEPT_UP].eof ||
	    ic->side[INTERCEPT_UP].fd < 0)
		return -EPROTO;
	return 0;
}

/* ---- the flow --------------------------------------------------------- */

/*
 * h2: a peer's end is the session's news (its streams reset on the other
 * side, which is told to go away); each side's end goes once its session
 * is over and its last bytes are out. The flow is over when the guest's
 * is, and upstream's (if it was ever connected).
 */
static int finish_h2(struct intercept *ic)
{
	struct ic_side *g = &ic->side[INTERCEPT_GUEST];
	struct ic_side *u = &ic->side[INTERCEPT_UP];
	bool progress = false;
	int ret = 0;

	if (g->eof && !ic->in_len && !ic->eof_told[INTERCEPT_GUEST]) {
		ic->eof_told[INTERCEPT_GUEST] = true;
		h2__eof(ic->h2, H2_GUEST);
	}
	if (u->eof && !ic->up_len && !ic->eof_told[INTERCEPT_UP]) {
		ic->eof_told[INTERCEPT_UP] = true;
		h2__eof(ic->h2, H2_UP);
	}
	/* What those ends made (a GOAWAY, resets) goes out now. */
	ret = flush_up(ic, &progress);
	if (!ret)
		ret = flush_back(ic, &progress);
	if (!ret && ic->up_ready && u->fd >= 0 && h2__done(ic->h2, H2_UP))
		ret = side_shut(ic, INTERCEPT_UP, true);
	if (!ret && h2__done(ic->h2, H2_GUEST))
		ret = side_shut(ic, INTERCEPT_GUEST, true);
	if (ret)
		return ret;
	if (g->shut && (u->fd < 0 || !ic->up_ready || u->shut))
		return INTERCEPT_DONE;
	return 0;
}

/* Ends passed on; whether the flow is over. */
static int finish(struct intercept *ic)
{
	struct ic_side *g = &ic->side[INTERCEPT_GUEST];
	struct ic_side *u = &ic->side[INTERCEPT_UP];
	int ret = 0;

	switch (ic->state) {
	case IC_HELLO:
	case IC_UPSTREAM:
	case IC_HANDSHAKE:
		return 0;
	case IC_RELAY:
		if (ic->h2)
			return finish_h2(ic);
		if (g->eof && !ic->in_len && !out_pending(ic)) {
			/* Nothing was allowed: nothing to wait for. */
			if (u->fd < 0 && !ic->want_up)
				return INTERCEPT_DONE;
			if (ic->up_ready)
				ret = side_shut(ic, INTERCEPT_UP, g->clean);
		}
		if (!ret && u->eof && !back_pending(ic))
			ret = side_shut(ic, INTERCEPT_GUEST, u->clean);
		if (!ret && g->shut && u->shut)
			return INTERCEPT_DONE;
		return ret;
	case IC_REFUSED:
		return refused_step(ic);
	case IC_ANSWER:
		if (back_pending(ic))
			return 0;
		ret = side_shut(ic, INTERCEPT_GUEST, true);
		if (ret || !g->shut)
			return ret;
		ic->state = IC_LINGER;
		return g->eof ? INTERCEPT_DONE : guest_linger(ic);
	case IC_LINGER:
		return 0;
	}
	return 0;
}

/* Everything that can move, moved; then the state's next step. */
static int pump(struct intercept *ic)
{
	struct ic_side *g = &ic->side[INTERCEPT_GUEST];
	struct ic_side *u = &ic->side[INTERCEPT_UP];
	bool progress;
	int ret;

	do {
		progress = false;
		/* Bytes TLS decrypted already: no event will say so. */
		if (side_pending(ic, INTERCEPT_GUEST))
			ret = guest_read(ic, &progress);
		else
			ret = 0;
		if (!ret && side_pending(ic, INTERCEPT_UP))
			ret = up_read(ic, &progress);
		if (!ret) {
			ret = feed(ic, &progress);
			if (ret < 0 && ic->h2 && !ic->counted) {
				intercept__report(ic, ic->host, false,
						  "malformed http/2");
				ic->counted = true;
			} else if (ret < 0 && !ic->h2) {
				ret = intercept__refused(ic, ret);
			}
		}
		if (!ret)
			ret = flush_up(ic, &progress);
		if (!ret)
			ret = flush_back(ic, &progress);
		if (ret)
			return ret;
	} while (progress);
	/* A close_notify that waited for room. */
	if (g->shutting)
		ret = side_shut(ic, INTERCEPT_GUEST, true);
	if (!ret && u->shutting)
		ret = side_shut(ic, INTERCEPT_UP, true);
	if (!ret)
		ret = finish(ic);
	/* An error response queued by this step goes out at once. */
	if (!ret && ic->state == IC_ANSWER) {
		progress = false;
		ret = flush_back(ic, &progress);
		if (!ret)
			ret = finish(ic);
	}
	return ret;
}

/* ---- TLS handshakes ---------------------------------------------------- */

/*
 * The guest's handshake: the SNI was checked by sni_ok (a refusal was
 * reported there); any other failure is the guest's (not TLS, no SNI,
 * no common protocol). Done, requests must name the SNI's host; a guest
 * on http/1.1 whose upstream chose h2 gets a new upstream (below), one
 * whose upstream failed its 502 at once.
 */
static int guest_handshake(struct intercept *ic)
{
	struct tls_conn *c = ic->side[INTERCEPT_GUEST].tls;
	struct tls_conn *u = ic->side[INTERCEPT_UP].tls;
	int ret = tls_conn__handshake(c);
	const char *alpn;

	if (ret == -EAGAIN)
		return 0;
	if (ret) {
		if (!ic->counted)
			intercept__report(ic, tls_conn__error(c), false,
					  "tls handshake failed");
		ic->counted = true;
		return ret;
	}
	alpn = tls_conn__alpn(c);
	if (alpn && !strcmp(alpn, ALPN_H2))
		ret = intercept__make_h2(ic);
	else
		ret = intercept__make_http1(ic, ic->host, true);
	if (ret)
		return ret;
	ic->state = IC_RELAY;
	if (ic->up_error)
		return answer(ic, HTTP_STATUS_BAD_GATEWAY, ic->up_error);
	/*
	 * Upstream on h2, the guest not: nothing was sent on it yet, so it
	 * goes, and the first allowed request asks for one on http/1.1.
	 */
	if (!ic->h2 && u && tls_conn__alpn(u) &&
	    !strcmp(tls_conn__alpn(u), ALPN_H2)) {
		up_drop(ic);
		ic->want_up = ic->asked_up = ic->up_ready = false;
	}
	return 0;
}

/* What may open files runs where it may (intercept_ops.unfiltered). */
static int unfiltered(struct intercept *ic, int (*fn)(void *), void *arg)
{
	if (ic->ops.unfiltered)
		return ic->ops.unfiltered(ic->ops.opaque, fn, arg);
	return fn(arg);
}

struct accept_args {
	struct intercept *ic;
	const char *alpn;
};

static int do_accept(void *arg)
{
	struct accept_args *a = arg;
	struct intercept *ic = a->ic;
	struct tls_accept_params p = { .sni_ok = sni_ok,
				       .opaque = ic,
				       .alpn = a->alpn };

	return tls_conn__accept(&ic->side[INTERCEPT_GUEST].tls, ic->tls.server,
				ic->side[INTERCEPT_GUEST].fd, &p);
}

/*
 * On to the guest's handshake, offered what upstream chose: h2 (then
 * http/1.1 too), else http/1.1; no upstream (it failed, or the
 * ClientHello was refused): http/1.1. The ClientHello waits in the
 * socket: the handshake starts at once.
 */
static int guest_accept(struct intercept *ic)
{
	struct tls_conn *u = ic->side[INTERCEPT_UP].tls;
	struct accept_args a = { .ic = ic, .alpn = ALPN_HTTP1 };
	int ret;

	free(ic->hello);
	ic->hello = NULL;
	if (ic->up_ready && u && tls_conn__alpn(u) &&
	    !strcmp(tls_conn__alpn(u), ALPN_H2))
		a.alpn = GUEST_ALPN_H2;
	ret = unfiltered(ic, do_accept, &a);
	if (ret)
		return ret;
	ic->state = IC_HANDSHAKE;
	return guest_handshake(ic);
}

/*
 * A flow whose first byte is not TLS's ("tls": "auto"): clear-text HTTP
 * from now on, the first request's Host naming the connection, as on a
 * plain port.
 */
static int clear_text(struct intercept *ic)
{
	free(ic->hello);
	ic->hello = NULL;
	ic->tls = (struct intercept_tls){ 0 };
	ic->state = IC_RELAY;
	return intercept__make_http1(ic, NULL, false);
}

/*
 * IC_HELLO: the guest's first record, peeked at (it stays in the socket
 * for the handshake). A ClientHello whose SNI the policy allows, as
 * sni_ok would: upstream first. Anything else goes to the handshake
 * without upstream, which refuses it as it always did (same reasons,
 * counters, alerts); more bytes to come: wait for them.
 */
static int hello_peek(struct intercept *ic)
{
	struct net_http_decision d;
	bool progress = false;
	char sni[NET_HOSTNAME_MAX + 1];
	ssize_t n;
	bool ok;
	int ret;

	n = recv(ic->side[INTERCEPT_GUEST].fd, ic->hello, TLS_RECORD_MAX,
		 MSG_PEEK | MSG_DONTWAIT);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return 0;
	if (n < 0)
		return -errno;
	/* "tls": "auto": anything but a handshake record is clear text. */
	if (ic->tls_auto && n && ic->hello[0] != TLS_CONTENT_HANDSHAKE) {
		ret = clear_text(ic);
		if (!ret)
			ret = guest_read(ic, &progress);
		return ret ? ret : pump(ic);
	}
	ret = tls__hello_sni(ic->hello, n, sni);
	/* Not all there, and more can come: the next edge (EPOLLET). */
	if (ret == -EAGAIN && n && n < (ssize_t)TLS_RECORD_MAX)
		return 0;
	if (ret)
		return guest_accept(ic);
	intercept__decide(ic, sni, &d);
	ok = d.verdict == NET_VERDICT_ALLOW || d.verdict == NET_VERDICT_ASK;
	explicit_bzero(&d, sizeof(d));
	if (!ok)
		return guest_accept(ic);
	snprintf(ic->peeked, sizeof(ic->peeked), "%s", sni);
	snprintf(ic->host, sizeof(ic->host), "%s", sni);
	ic->want_up = true;
	ic->state = IC_UPSTREAM;
	return 0;
}

/* Upstream failed (connect, or TLS): 502, upstream done with. */
static int up_failed(struct intercept *ic, const char *why, const char *reason)
{
	int ret;

	if (ic->ops.upstream_failed)
		ic->ops.upstream_failed(ic->ops.opaque, &ic->flow, why);
	/* Before the guest's handshake: the 502 once it is done. */
	if (ic->state == IC_UPSTREAM) {
		up_drop(ic);
		ic->up_error = reason;
		return guest_accept(ic);
	}
	/* h2: every stream sent upstream gets the 502, the guest a GOAWAY. */
	if (ic->h2) {
		h2__upstream_failed(ic->h2, HTTP_STATUS_BAD_GATEWAY, reason);
		up_drop(ic);
		return pump(ic);
	}
	/* No request reached upstream: the first allowed one gets the 502. */
	ret = answer(ic, HTTP_STATUS_BAD_GATEWAY, reason);
	return ret ? ret : pump(ic);
}

/*
 * Upstream's handshake: its certificate must be for the guest's name.
 * Done in IC_UPSTREAM: the guest's turn.
 */
static int up_handshake(struct intercept *ic)
{
	struct tls_conn *c = ic->side[INTERCEPT_UP].tls;
	int ret = tls_conn__handshake(c);

	if (ret == -EAGAIN)
		return 0;
	if (ret)
		return up_failed(ic, tls_conn__error(c),
				 ret == -EACCES ?
					 "upstream certificate not trusted" :
					 "upstream tls failed");
	ic->up_ready = true;
	return ic->state == IC_UPSTREAM ? guest_accept(ic) : 0;
}

struct connect_args {
	struct intercept *ic;
	const char *alpn;
};

static int do_connect(void *arg)
{
	struct connect_args *a = arg;
	struct intercept *ic = a->ic;
	struct tls_connect_params p = { .host = ic->host, .alpn = a->alpn };

	return tls_conn__connect(&ic->side[INTERCEPT_UP].tls, ic->tls.client,
				 ic->side[INTERCEPT_UP].fd, &p);
}

/* ---- the interface ----------------------------------------------------- */

int intercept__run(struct intercept *ic, enum intercept_side side,
		   uint32_t events)
{
	struct ic_side *S = &ic->side[side];
	bool progress = false;
	int ret = 0;

	if (events & EPOLLERR)
		return -ECONNRESET;
	switch (ic->state) {
	case IC_HELLO:
		return side == INTERCEPT_GUEST ? hello_peek(ic) : 0;
	case IC_UPSTREAM:
		/* The guest waits (its ClientHello in its socket). */
		if (side == INTERCEPT_GUEST)
			return events & EPOLLHUP ? -ECONNRESET : 0;
		if (!S->tls)
			return 0;
		return up_handshake(ic);
	case IC_HANDSHAKE:
		ret = side == INTERCEPT_GUEST ? guest_handshake(ic) : 0;
		if (ret || ic->state == IC_HANDSHAKE)
			return ret;
		break;
	default:
		ret = intercept__apply_answers(ic);
		if (ret)
			return ret;
		if (side == INTERCEPT_UP && S->tls && !ic->up_ready &&
		    S->fd >= 0) {
			ret = up_handshake(ic);
			if (ret || !ic->up_ready)
				return ret;
		}
	}
	/* TLS may read on either readiness (intercept.h, tls.h). */
	if (S->tls || (events & (EPOLLIN | EPOLLHUP)))
		ret = side == INTERCEPT_GUEST ? guest_read(ic, &progress) :
						up_read(ic, &progress);
	return ret ? ret : pump(ic);
}

/* What a side's reading and writing wait for, TLS or not. */
static uint32_t side_events(const struct ic_side *s, bool rd, bool wr)
{
	uint32_t ev = 0;

	if (rd)
		ev |= s->tls ? s->rwant : EPOLLIN;
	if (wr || s->wpend || s->shutting)
		ev |= s->tls ? s->wwant : EPOLLOUT;
	return ev;
}

uint32_t intercept__interest(const struct intercept *ic,
			     enum intercept_side side)
{
	const struct ic_side *s = &ic->side[side];
	bool relaying = ic->state == IC_RELAY || ic->state == IC_REFUSED;

	if (s->fd < 0)
		return 0;
	if (side == INTERCEPT_GUEST) {
		/*
		 * Peeked bytes stay readable: level-triggered, EPOLLIN would
		 * fire until the rest came. Edge-triggered, it fires when
		 * bytes come.
		 */
		if (ic->state == IC_HELLO)
			return EPOLLIN | EPOLLET;
		if (ic->state == IC_UPSTREAM)
			return 0;
		if (ic->state == IC_HANDSHAKE)
			return tls_conn__wants(s->tls);
		return side_events(s,
				   (ic->state == IC_RELAY && !s->eof &&
				    ic->in_len < INTERCEPT_BUF) ||
					   ic->state == IC_LINGER,
				   back_pending(ic) ||
					   (guest_pending(ic) && !s->shut));
	}
	if (s->tls && !ic->up_ready)
		return tls_conn__wants(s->tls);
	return side_events(s,
			   relaying && !s->eof &&
				   (ic->h2 ? ic->up_len : back_pending(ic)) <
					   INTERCEPT_BUF,
			   out_pending(ic) && !s->shut);
}

bool intercept__wants_upstream(const struct intercept *ic)
{
	return ic->want_up && !ic->asked_up &&
	       (ic->state == IC_UPSTREAM || ic->state == IC_RELAY ||
		ic->state == IC_REFUSED);
}

int intercept__upstream(struct intercept *ic, int fd)
{
	struct ic_side *u = &ic->side[INTERCEPT_UP];
	struct connect_args a = { .ic = ic };
	int ret;

	ic->asked_up = true;
	ic->up_closed = false;
	u->fd = fd;
	if (!ic->tls.client) {
		ic->up_ready = true;
		return pump(ic);
	}
	/*
	 * Before the guest's handshake: both, upstream chooses. After it
	 * (a guest on http/1.1 that upstream's h2 did not suit): the
	 * guest's protocol (none: none asked).
	 */
	a.alpn = ic->state == IC_UPSTREAM ?
			 UP_ALPN :
			 tls_conn__alpn(ic->side[INTERCEPT_GUEST].tls);
	ret = unfiltered(ic, do_connect, &a);
	if (ret)
		return up_failed(ic, strerror(-ret), "upstream tls failed");
	ret = up_handshake(ic);
	return ret || !ic->up_ready ? ret : pump(ic);
}

int intercept__upstream_failed(struct intercept *ic)
{
	int ret;

	ic->asked_up = true;
	ic->side[INTERCEPT_UP].fd = -1;
	ic->up_closed = true;
	/* The proxy counted and logged it: the guest's 502 after its handshake. */
	if (ic->state == IC_UPSTREAM) {
		ic->up_error = "upstream unreachable";
		return guest_accept(ic);
	}
	if (ic->h2) {
		h2__upstream_failed(ic->h2, HTTP_STATUS_BAD_GATEWAY,
				    "upstream unreachable");
		return pump(ic);
	}
	ret = answer(ic, HTTP_STATUS_BAD_GATEWAY, "upstream unreachable");
	return ret ? ret : pump(ic);
}

bool intercept__upstream_done(const struct intercept *ic)
{
	/* A new one asked for (after an h2 one the guest did not take). */
	return ic->up_closed && !intercept__wants_upstream(ic);
}

bool intercept__setting_up(const struct intercept *ic)
{
	return ic->state == IC_HELLO || ic->state == IC_UPSTREAM ||
	       ic->state == IC_HANDSHAKE;
}

int intercept__expire(struct intercept *ic)
{
	if (!ic->counted)
		intercept__report(ic, "no TLS handshake within the deadline",
				  false, "tls handshake failed");
	ic->counted = true;
	return -ETIMEDOUT;
}

/*
 * HTTP/1.1: upstream owes a response and nothing of it, nor of ours,
 * waits for the guest: upstream's turn.
 */
static bool owes_response(const struct intercept *ic)
{
	return ic->resp && !ic->resp_dead && ic->up_ready &&
	       ic->side[INTERCEPT_UP].fd >= 0 && !back_pending(ic) &&
	       http1_resp__owed(ic->resp);
}

/* Upstream silent past the deadline: a 504 in front of nothing, or a reset. */
static int response_expired(struct intercept *ic)
{
	char why[64];
	int ret;

	snprintf(why, sizeof(why), "no response within %llu ms",
		 (unsigned long long)ic->response_ms);
	if (ic->ops.upstream_failed)
		ic->ops.upstream_failed(ic->ops.opaque, &ic->flow, why);
	if (http1_resp__under_way(ic->resp))
		return -ETIMEDOUT;
	ret = answer(ic, HTTP_STATUS_GATEWAY_TIMEOUT, UPSTREAM_TIMED_OUT);
	return ret ? ret : pump(ic);
}

int intercept__sweep(struct intercept *ic, uint64_t now)
{
	char why[64];
	int n;

	if (ic->state != IC_RELAY && ic->state != IC_REFUSED)
		return 0;
	if (ic->h2) {
		n = h2__expire(ic->h2, now, ic->response_ms,
			       HTTP_STATUS_GATEWAY_TIMEOUT, UPSTREAM_TIMED_OUT);
		if (n <= 0)
			return n;
		snprintf(why, sizeof(why),
			 "%d h2 stream%s: no response within %llu ms", n,
			 n == 1 ? "" : "s",
			 (unsigned long long)ic->response_ms);
		if (ic->ops.upstream_failed)
			ic->ops.upstream_failed(ic->ops.opaque, &ic->flow, why);
		return pump(ic);
	}
	if (!owes_response(ic)) {
		ic->quiet_since = 0;
		return 0;
	}
	if (ic->up_heard || !ic->quiet_since) {
		ic->up_heard = false;
		ic->quiet_since = now;
		return 0;
	}
	if (now - ic->quiet_since < ic->response_ms)
		return 0;
	return response_expired(ic);
}

/* ---- create, destroy -------------------------------------------------- */

int intercept__create(struct intercept **out, const struct intercept_params *p)
{
	struct intercept *ic;
	int ret;

	*out = NULL;
	if (p->guest_fd < 0 || !p->ops || !p->ops->decide ||
	    (p->tls && (!p->tls->ca || !p->tls->server || !p->tls->client)))
		return -EINVAL;
	ic = calloc(1, sizeof(*ic));
	if (!ic)
		return -ENOMEM;
	ic->flow = p->flow;
	ic->owner = p->owner;
	ic->budget = p->budget;
	ic->tls_auto = p->tls && p->tls_auto;
	ic->hook_flow = p->hook_flow;
	ic->hook_each_request = p->hook_each_request;
	snprintf(ic->hook_host, sizeof(ic->hook_host), "%s",
		 p->hook_host ? p->hook_host : "");
	ic->response_ms =
		p->response_ms ? p->response_ms : INTERCEPT_RESPONSE_MS;
	ic->ops = *p->ops;
	if (p->tls)
		ic->tls = *p->tls;
	for (int s = 0; s < INTERCEPT_SIDES; s++)
		ic->side[s] = (struct ic_side){ .fd = -1,
						.rwant = EPOLLIN,
						.wwant = EPOLLOUT };
	ic->side[INTERCEPT_GUEST].fd = p->guest_fd;
	ic->in = malloc(INTERCEPT_BUF);
	ic->back = malloc(INTERCEPT_BUF);
	if (!ic->in || !ic->back)
		ret = -ENOMEM;
	else if (p->tls) /* the ClientHello first (IC_HELLO) */
		/*
		 * Whole and zeroed: wolfSSL's SNI parser may look a few bytes
		 * past the length it is given before it checks it.
		 */
		ret = (ic->hello = calloc(1, TLS_RECORD_MAX)) ? 0 : -ENOMEM;
	else /* plain: the first request's Host names the connection */
		ret = intercept__make_http1(ic, NULL, false);
	if (ret) {
		intercept__destroy(ic);
		return ret;
	}
	ic->state = p->tls ? IC_HELLO : IC_RELAY;
	*out = ic;
	return 0;
}

void intercept__destroy(struct intercept *ic)
{
	if (!ic)
		return;
	/* Questions out are cancelled; answers kept are wiped. */
	for (unsigned int i = 0; i < IC_MAX_ASKS; i++)
		intercept__ask_free(ic, &ic->asks[i]);
	for (int s = 0; s < INTERCEPT_SIDES; s++)
		tls_conn__free(ic->side[s].tls);
	http1_resp__destroy(ic->resp);
	http1_req__destroy(ic->req);
	h2__destroy(ic->h2);
	if (ic->up_in)
		explicit_bzero(ic->up_in, INTERCEPT_BUF);
	free(ic->up_in);
	/* The guest's requests, before and after the rewriter: best effort. */
	if (ic->in)
		explicit_bzero(ic->in, INTERCEPT_BUF);
	free(ic->in);
	free(ic->back);
	free(ic->hello);
	free(ic);
}
