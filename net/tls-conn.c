// SPDX-License-Identifier: GPL-2.0
/*
 * TLS connections for the interception (net/tls.h): the server side
 * toward the guest, its certificate minted for the ClientHello's SNI
 * once the caller has accepted that name, and the client side toward
 * upstream, verified against a CA bundle and the hostname. Both are
 * wolfSSL on a nonblocking fd the caller's epoll loop drives.
 */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include <wolfssl/options.h>
#include <wolfssl/ssl.h>
#include <wolfssl/error-ssl.h>
#include <wolfssl/wolfcrypt/error-crypt.h>

#include "lib/compiler.h"
#include "lib/errf.h"
#include "net/policy.h"
#include "net/tls-internal.h"
#include "net/tls.h"

/* wolfSSL's callback answers (enum SNICbReturn): go on, or abort. */
#define SNI_CB_OK 0

struct tls_server {
	bool lib; /* tls__lib_get() held */
	WOLFSSL_CTX *ctx;
	struct tls_ca *ca;
};

struct tls_client {
	bool lib;
	WOLFSSL_CTX *ctx;
	/*
	 * The CA bundle, opened by tls_client__create and parsed into ctx
	 * at the first connection (load_bundle): its certificate store
	 * (~330 KiB of heap for Debian's bundle) is held only by a VM
	 * whose guest made a TLS flow through an http grant.
	 */
	pthread_mutex_t lock;
	int bundle_fd;	    /* -1 once parsed or failed */
	size_t bundle_size; /* bytes, at create */
	int loaded;	    /* 0: not yet, 1: parsed, -errno: failed */
};

struct tls_conn {
	WOLFSSL *ssl;
	bool server;
	bool done; /* handshake complete and checked */
	bool eof;  /* the peer's close_notify read */
	bool shut; /* our close_notify sent */
	int error; /* the failure, kept; 0 until then */
	uint32_t wants;
	/* Server side. */
	struct tls_ca *ca;
	bool (*sni_ok)(void *opaque, const char *sni);
	void *opaque;
	bool sni_seen;
	char sni[NET_HOSTNAME_MAX + 1];
	/* Client side. */
	char host[NET_HOSTNAME_MAX + 1];
	char alpn_want[TLS_ALPN_LIST_MAX]; /* the list offered */
	/* Both. */
	char alpn[TLS_ALPN_NAME_MAX + 1];
	char reason[TLS_REASON_LEN];
};

static int conn_fail(struct tls_conn *c, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Records the first failure and its reason; later ones keep it. */
static int conn_fail(struct tls_conn *c, int err, const char *fmt, ...)
{
	va_list ap;

	if (c->error)
		return c->error;
	va_start(ap, fmt);
	vsnprintf(c->reason, sizeof(c->reason), fmt, ap);
	va_end(ap);
	c->error = err;
	c->wants = 0;
	return err;
}

static const char *wolf_reason(int e, char *buf, size_t len)
{
	wolfSSL_ERR_error_string_n((unsigned long)(long)e, buf, len);
	return buf;
}

/* ---- the server side ------------------------------------------------- */

int tls__hello_sni(const uint8_t *buf, size_t len, char *sni)
{
	/* One more than a name may have: a longer one is cut to it. */
	unsigned char raw[NET_HOSTNAME_MAX + 2];
	unsigned int n = sizeof(raw) - 1;
	bool wildcard;
	int ret;

	if (!len)
		return -EAGAIN;
	ret = wolfSSL_SNI_GetFromBuffer(buf, len > UINT_MAX ? UINT_MAX : len,
					WOLFSSL_SNI_HOST_NAME, raw, &n);
	if (ret == INCOMPLETE_DATA)
		return -EAGAIN;
	if (ret == 0)
		return -ENOENT; /* a ClientHello without SNI */
	if (ret != WOLFSSL_SUCCESS)
		return -EPROTO; /* not a ClientHello, or not one record */
	/* The guest's bytes: bounded (a trailing dot allowed), no NUL. */
	if (n >= sizeof(raw) - 1 || memchr(raw, '\0', n))
		return -EACCES;
	raw[n] = '\0';
	if (net_hostname__normalize((const char *)raw, sni, false, &wildcard))
		return -EACCES;
	return 0;
}

/*
 * During the ClientHello, before any certificate is chosen: the SNI, the
 * caller's verdict on it, and the leaf for it. Fatal returns abort the
 * handshake with alert *ad.
 */
static int on_sni(WOLFSSL *ssl, int *ad, void *arg)
{
	struct tls_conn *c = wolfSSL_get_app_data(ssl);
	char raw[NET_HOSTNAME_MAX + 2];
	const uint8_t *der, *key;
	size_t len, key_len;
	bool wildcard;
	void *name = NULL;
	unsigned short n;
	int ret;

	*ad = unrecognized_name;
	if (!c)
		return fatal_return;
	n = wolfSSL_SNI_GetRequest(ssl, WOLFSSL_SNI_HOST_NAME, &name);
	if (!n || !name) {
		conn_fail(c, -EACCES, "no SNI in the ClientHello");
		return fatal_return;
	}
	/* The guest's bytes: bounded (a trailing dot allowed), no NUL. */
	if (n >= sizeof(raw) || memchr(name, '\0', n)) {
		conn_fail(c, -EACCES, "SNI is not a DNS name");
		return fatal_return;
	}
	memcpy(raw, name, n);
	raw[n] = '\0';
	if (net_hostname__normalize(raw, c->sni, false, &wildcard)) {
		conn_fail(c, -EACCES, "SNI is not a DNS name");
		return fatal_return;
	}
	c->sni_seen = true;
	if (!c->sni_ok(c->opaque, c->sni)) {
		conn_fail(c, -EACCES, "SNI %s refused", c->sni);
		return fatal_return;
	}
	ret = tls_ca__leaf(c->ca, c->sni, &der, &len);
	if (ret) {
		*ad = internal_error;
		conn_fail(c, ret, "a certificate for %s: %s", c->sni,
			  strerror(-ret));
		return fatal_return;
	}
	tls_ca__leaf_key(c->ca, &key, &key_len);
	if (wolfSSL_use_certificate_buffer(ssl, der, (long)len,
					   WOLFSSL_FILETYPE_ASN1) !=
		    WOLFSSL_SUCCESS ||
	    wolfSSL_use_PrivateKey_buffer(ssl, key, (long)key_len,
					  WOLFSSL_FILETYPE_ASN1) !=
		    WOLFSSL_SUCCESS) {
		*ad = internal_error;
		conn_fail(c, -EIO, "loading the certificate for %s", c->sni);
		return fatal_return;
	}
	return SNI_CB_OK;
}

/*
 * Both sides: TLS 1.2 and up, no session cache. A server issues no
 * tickets either: every guest connection is a full handshake, so every
 * one passes the SNI check. A client resumes only sessions it is handed
 * (wolfSSL_set_session()), which this module never does.
 */
static int ctx_setup(WOLFSSL_CTX *ctx, bool server)
{
	if (wolfSSL_CTX_SetMinVersion(ctx, WOLFSSL_TLSV1_2) != WOLFSSL_SUCCESS)
		return -EIO;
	wolfSSL_CTX_set_session_cache_mode(ctx, WOLFSSL_SESS_CACHE_OFF);
	if (server && (wolfSSL_CTX_NoTicketTLSv12(ctx) != WOLFSSL_SUCCESS ||
		       wolfSSL_CTX_no_ticket_TLSv13(ctx) != 0))
		return -EIO;
	return 0;
}

/*
 * The library held (*lib) and a context for a server or a client, set
 * up: 0, or -errno with the error line in err.
 */
static int ctx_open(WOLFSSL_CTX **ctx, bool *lib, bool server, char *err,
		    size_t len)
{
	const char *who = server ? "TLS server" : "TLS client";
	int ret;

	ret = tls__lib_get();
	if (ret)
		return errf(err, len, ret, "%s: wolfSSL_Init failed", who);
	*lib = true;
	*ctx = wolfSSL_CTX_new(server ? wolfSSLv23_server_method() :
					wolfSSLv23_client_method());
	if (!*ctx)
		return errf(err, len, -ENOMEM, "%s: wolfSSL_CTX_new", who);
	ret = ctx_setup(*ctx, server);
	if (ret)
		return errf(err, len, ret, "%s: setting up the context", who);
	return 0;
}

/* What ctx_open() took, whatever of it it got. */
static void ctx_close(WOLFSSL_CTX *ctx, bool lib)
{
	if (ctx)
		wolfSSL_CTX_free(ctx);
	if (lib)
		tls__lib_put();
}

int tls_server__create(struct tls_server **out, struct tls_ca *ca, char *err,
		       size_t len)
{
	struct tls_server *s;
	int ret;

	*out = NULL;
	s = calloc(1, sizeof(*s));
	if (!s)
		return errf(err, len, -ENOMEM, "TLS server: %s",
			    strerror(ENOMEM));
	s->ca = ca;
	ret = ctx_open(&s->ctx, &s->lib, true, err, len);
	if (ret)
		goto out_destroy;
	wolfSSL_CTX_set_servername_callback(s->ctx, on_sni);
	*out = s;
	return 0;
out_destroy:
	tls_server__destroy(s);
	return ret;
}

void tls_server__destroy(struct tls_server *s)
{
	if (!s)
		return;
	ctx_close(s->ctx, s->lib);
	free(s);
}

/* ---- the client side ------------------------------------------------- */

int tls_client__create(struct tls_client **out,
		       const struct tls_client_params *p, char *err, size_t len)
{
	const char *bundle =
		p->ca_bundle ? p->ca_bundle : TLS_DEFAULT_CA_BUNDLE;
	struct tls_client *c;
	struct stat st;
	int ret;

	*out = NULL;
	c = calloc(1, sizeof(*c));
	if (!c)
		return errf(err, len, -ENOMEM, "TLS client: %s",
			    strerror(ENOMEM));
	c->bundle_fd = -1;
	pthread_mutex_init(&c->lock, NULL);
	ret = ctx_open(&c->ctx, &c->lib, false, err, len);
	if (ret)
		goto out_destroy;
	wolfSSL_CTX_set_verify(c->ctx, WOLFSSL_VERIFY_PEER, NULL);
	/* Opened now, before any seccomp filter; parsed when first used. */
	c->bundle_fd = open(bundle, O_RDONLY | O_CLOEXEC);
	if (c->bundle_fd < 0 || fstat(c->bundle_fd, &st)) {
		ret = errf(err, len, -errno, "TLS client: CA bundle %s: %s",
			   bundle, strerror(errno));
		goto out_destroy;
	}
	if (!S_ISREG(st.st_mode) || !st.st_size) {
		ret = errf(err, len, -EINVAL,
			   "TLS client: CA bundle %s: not a file with PEM "
			   "certificates",
			   bundle);
		goto out_destroy;
	}
	c->bundle_size = st.st_size;
	*out = c;
	return 0;
out_destroy:
	tls_client__destroy(c);
	return ret;
}

/*
 * The bundle into the context, once, at the first connection (under the
 * lock: connections may come from several threads). Only pread and
 * close, which every thread's filter allows. 0, or the failure again at
 * every later connection: -EIO (unreadable), -ENOKEY (no certificate
 * wolfSSL can load); -ENOMEM is tried again.
 */
static int load_bundle(struct tls_client *c)
{
	size_t got = 0;
	ssize_t n;
	char *buf;
	int ret;

	pthread_mutex_lock(&c->lock);
	if (c->loaded) {
		ret = c->loaded < 0 ? c->loaded : 0;
		goto out_unlock;
	}
	buf = malloc(c->bundle_size);
	ret = buf ? 0 : -ENOMEM;
	while (!ret && got < c->bundle_size) {
		n = pread(c->bundle_fd, buf + got, c->bundle_size - got, got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			ret = -EIO;
		else
			got += n;
	}
	if (!ret && wolfSSL_CTX_load_verify_buffer(
			    c->ctx, (const unsigned char *)buf, (long)got,
			    WOLFSSL_FILETYPE_PEM) != WOLFSSL_SUCCESS)
		ret = -ENOKEY;
	free(buf);
	if (ret == -ENOMEM)
		goto out_unlock; /* the next connection tries again */
	c->loaded = ret ? ret : 1;
	close(c->bundle_fd);
	c->bundle_fd = -1;
out_unlock:
	pthread_mutex_unlock(&c->lock);
	return ret;
}

void tls_client__destroy(struct tls_client *c)
{
	if (!c)
		return;
	ctx_close(c->ctx, c->lib);
	if (c->bundle_fd >= 0)
		close(c->bundle_fd);
	pthread_mutex_destroy(&c->lock);
	free(c);
}

/* ---- connections ----------------------------------------------------- */

static int conn_new(struct tls_conn **out, WOLFSSL_CTX *ctx, int fd,
		    bool server)
{
	struct tls_conn *c;

	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->server = server;
	/* A server waits for the ClientHello, a client sends one. */
	c->wants = server ? EPOLLIN : EPOLLOUT;
	/* NULL: no memory, or no seed for its DRBG (/dev/urandom). */
	c->ssl = wolfSSL_new(ctx);
	if (!c->ssl) {
		free(c);
		return -EIO;
	}
	if (wolfSSL_set_fd(c->ssl, fd) != WOLFSSL_SUCCESS ||
	    wolfSSL_set_app_data(c->ssl, c) != WOLFSSL_SUCCESS) {
		tls_conn__free(c);
		return -EIO;
	}
	/* A peer gone while wolfSSL sends: EPIPE, not SIGPIPE. */
	wolfSSL_SetIOWriteFlags(c->ssl, MSG_NOSIGNAL);
	*out = c;
	return 0;
}

/*
 * An ALPN list "a,b" into buf for wolfSSL_UseALPN() (which wants it
 * writable): 1 to TLS_ALPN_NAME_MAX bytes per name, no empty ones.
 */
static int alpn_copy(const char *list, char *buf, size_t size, bool one)
{
	size_t n = strlen(list), i, name = 0;

	if (!n || n >= size)
		return -EINVAL;
	for (i = 0; i <= n; i++) {
		if (i == n || list[i] == ',') {
			if (!name || (one && i != n))
				return -EINVAL;
			name = 0;
			continue;
		}
		if (list[i] <= ' ' || list[i] > '~' ||
		    ++name > TLS_ALPN_NAME_MAX)
			return -EINVAL;
	}
	memcpy(buf, list, n + 1);
	return 0;
}

int tls_conn__accept(struct tls_conn **out, struct tls_server *s, int fd,
		     const struct tls_accept_params *p)
{
	char alpn[TLS_ALPN_LIST_MAX];
	struct tls_conn *c;
	int ret;

	*out = NULL;
	if (!p->sni_ok ||
	    (p->alpn && alpn_copy(p->alpn, alpn, sizeof(alpn), false)))
		return -EINVAL;
	ret = conn_new(&c, s->ctx, fd, true);
	if (ret)
		return ret;
	c->ca = s->ca;
	c->sni_ok = p->sni_ok;
	c->opaque = p->opaque;
	/* No common protocol: a no_application_protocol alert (RFC 7301). */
	if (p->alpn && wolfSSL_UseALPN(c->ssl, alpn, (unsigned int)strlen(alpn),
				       WOLFSSL_ALPN_FAILED_ON_MISMATCH) !=
			       WOLFSSL_SUCCESS) {
		tls_conn__free(c);
		return -EIO;
	}
	*out = c;
	return 0;
}

int tls_conn__connect(struct tls_conn **out, struct tls_client *cl, int fd,
		      const struct tls_connect_params *p)
{
	struct tls_conn *c;
	char host[NET_HOSTNAME_MAX + 1];
	char alpn[TLS_ALPN_LIST_MAX];
	bool wildcard;
	int ret;

	*out = NULL;
	if (!p->host ||
	    net_hostname__normalize(p->host, host, false, &wildcard))
		return -EINVAL;
	if (p->alpn && alpn_copy(p->alpn, alpn, sizeof(alpn), false))
		return -EINVAL;
	ret = load_bundle(cl);
	if (ret)
		return ret;
	ret = conn_new(&c, cl->ctx, fd, false);
	if (ret)
		return ret;
	memcpy(c->host, host, sizeof(host));
	if (p->alpn)
		memcpy(c->alpn_want, alpn, sizeof(alpn));
	if (wolfSSL_UseSNI(c->ssl, WOLFSSL_SNI_HOST_NAME, c->host,
			   (unsigned short)strlen(c->host)) !=
		    WOLFSSL_SUCCESS ||
	    wolfSSL_check_domain_name(c->ssl, c->host) != WOLFSSL_SUCCESS ||
	    (p->alpn &&
	     wolfSSL_UseALPN(c->ssl, alpn, (unsigned int)strlen(alpn),
			     WOLFSSL_ALPN_FAILED_ON_MISMATCH) !=
		     WOLFSSL_SUCCESS)) {
		tls_conn__free(c);
		return -EIO;
	}
	*out = c;
	return 0;
}

/* A wolfSSL_get_error() code from a failed call, as the failure. */
static int conn_error(struct tls_conn *c, int e)
{
	const char *side = c->server ? "guest" : "upstream";
	WOLFSSL_ALERT_HISTORY h;
	char why[WOLFSSL_MAX_ERROR_SZ];

	if (c->error) /* the SNI callback's, with its own reason */
		return c->error;
	switch (e) {
	case DOMAIN_NAME_MISMATCH:
	case IPADDR_MISMATCH:
		return conn_fail(c, -EACCES,
				 "upstream certificate is not for %s", c->host);
	case ASN_AFTER_DATE_E:
		return conn_fail(c, -EACCES, "%s certificate expired", side);
	case ASN_BEFORE_DATE_E:
		return conn_fail(c, -EACCES, "%s certificate not yet valid",
				 side);
	case ASN_NO_SIGNER_E:
	case ASN_SELF_SIGNED_E:
	case ASN_SIG_CONFIRM_E:
	case ASN_SIG_OID_E:
	case ASN_SIG_KEY_E:
	case ASN_SIG_HASH_E:
	case ASN_PATHLEN_INV_E:
	case ASN_PATHLEN_SIZE_E:
	case VERIFY_CERT_ERROR:
		return conn_fail(c, -EACCES, "%s certificate not trusted: %s",
				 side, wolf_reason(e, why, sizeof(why)));
	case FATAL_ERROR:
		if (wolfSSL_get_alert_history(c->ssl, &h) == WOLFSSL_SUCCESS &&
		    h.last_rx.level == alert_fatal)
			return conn_fail(
				c, -EPROTO, "%s sent alert %s (%d)", side,
				wolfSSL_alert_desc_string_long(h.last_rx.code),
				h.last_rx.code);
		break;
	case WOLFSSL_ERROR_SYSCALL:
	case SOCKET_ERROR_E:
	case SOCKET_PEER_CLOSED_E:
		return conn_fail(c, -ECONNRESET, "%s closed the connection",
				 side);
	case MEMORY_E:
	case MEMORY_ERROR:
		return conn_fail(c, -ENOMEM, "out of memory");
	}
	return conn_fail(c, -EPROTO, "TLS with the %s: %s", side,
			 wolf_reason(e, why, sizeof(why)));
}

/* -EAGAIN with what to wait for, or the failure. */
static int conn_again(struct tls_conn *c, int ret)
{
	int e = wolfSSL_get_error(c->ssl, ret);

	switch (e) {
	case WOLFSSL_ERROR_WANT_READ:
		c->wants = EPOLLIN;
		return -EAGAIN;
	case WOLFSSL_ERROR_WANT_WRITE:
		c->wants = EPOLLOUT;
		return -EAGAIN;
	}
	return conn_error(c, e);
}

/* Whether name is one of list's ("h2,http/1.1"). */
static bool alpn_listed(const char *list, const char *name)
{
	size_t n = strlen(name);

	for (const char *p = list; *p; p += strcspn(p, ",")) {
		if (*p == ',')
			p++;
		if (!strncmp(p, name, n) && (p[n] == ',' || !p[n]))
			return true;
	}
	return false;
}

/* After the handshake: the ALPN outcome, checked on the client side. */
static int conn_established(struct tls_conn *c)
{
	char *name = NULL;
	unsigned short n = 0;

	if (wolfSSL_ALPN_GetProtocol(c->ssl, &name, &n) == WOLFSSL_SUCCESS &&
	    name && n && n <= TLS_ALPN_NAME_MAX) {
		memcpy(c->alpn, name, n);
		c->alpn[n] = '\0';
	}
	if (!c->server && c->alpn_want[0] &&
	    !alpn_listed(c->alpn_want,
			 c->alpn[0] ? c->alpn : TLS_ALPN_IMPLICIT))
		return conn_fail(c, -EPROTO, "upstream chose ALPN %s, not %s",
				 c->alpn[0] ? c->alpn : "none", c->alpn_want);
	c->done = true;
	c->wants = 0;
	return 0;
}

int tls_conn__handshake(struct tls_conn *c)
{
	int ret;

	if (c->error)
		return c->error;
	if (c->done)
		return 0;
	ret = c->server ? wolfSSL_accept(c->ssl) : wolfSSL_connect(c->ssl);
	if (ret == WOLFSSL_SUCCESS)
		return conn_established(c);
	return conn_again(c, ret);
}

uint32_t tls_conn__wants(const struct tls_conn *c)
{
	return c->wants;
}

size_t tls_conn__pending(struct tls_conn *c)
{
	int n;

	if (c->error || !c->done)
		return 0;
	n = wolfSSL_pending(c->ssl);
	return n > 0 ? (size_t)n : 0;
}

ssize_t tls_conn__read(struct tls_conn *c, void *buf, size_t len)
{
	int ret, e;

	ret = tls_conn__handshake(c);
	if (ret)
		return ret;
	if (c->eof || !len)
		return 0;
	ret = wolfSSL_read(c->ssl, buf, len > INT_MAX ? INT_MAX : (int)len);
	if (ret > 0)
		return ret;
	e = wolfSSL_get_error(c->ssl, ret);
	if (e == WOLFSSL_ERROR_ZERO_RETURN) {
		c->eof = true;
		return 0;
	}
	if (e == WOLFSSL_ERROR_SYSCALL || e == SOCKET_PEER_CLOSED_E)
		return conn_fail(c, -ECONNRESET,
				 "%s closed the connection without "
				 "close_notify",
				 c->server ? "guest" : "upstream");
	return conn_again(c, ret);
}

ssize_t tls_conn__write(struct tls_conn *c, const void *buf, size_t len)
{
	int ret;

	ret = tls_conn__handshake(c);
	if (ret)
		return ret;
	if (!len)
		return 0;
	if (c->shut)
		return -EPIPE;
	ret = wolfSSL_write(c->ssl, buf, len > INT_MAX ? INT_MAX : (int)len);
	if (ret > 0)
		return ret;
	return conn_again(c, ret);
}

int tls_conn__shutdown(struct tls_conn *c)
{
	int ret;

	if (c->error)
		return c->error;
	if (c->shut)
		return 0;
	ret = wolfSSL_shutdown(c->ssl);
	/* Sent (the peer's may still come): done, we do not wait for it. */
	if (ret == WOLFSSL_SUCCESS || ret == WOLFSSL_SHUTDOWN_NOT_DONE) {
		c->shut = true;
		return 0;
	}
	return conn_again(c, ret);
}

const char *tls_conn__error(const struct tls_conn *c)
{
	return c->reason;
}

const char *tls_conn__sni(const struct tls_conn *c)
{
	return c->sni_seen ? c->sni : NULL;
}

const char *tls_conn__alpn(const struct tls_conn *c)
{
	return c->alpn[0] ? c->alpn : NULL;
}

const char *tls_conn__version(const struct tls_conn *c)
{
	return c->done ? wolfSSL_get_version(c->ssl) : NULL;
}

void tls_conn__free(struct tls_conn *c)
{
	if (!c)
		return;
	if (c->ssl)
		wolfSSL_free(c->ssl);
	free(c);
}
