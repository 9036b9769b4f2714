/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_VMM_TLS_H
#define KILN_VMM_TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "lib/compiler.h"

/*
 * TLS interception's building blocks (Documentation/network.md, "TLS
 * interception: the CA and the connections"), on wolfSSL:
 *
 *	tls_ca__create(&ca, &cap, err, len);   the VM's CA: fresh or loaded
 *	tls_ca__cert_pem(ca, &pem, &n);        what the guest trusts
 *	tls_ca__leaf(ca, host, &der, &n);      a certificate for host
 *	tls_server__create(&srv, ca, err, len);     toward the guest
 *	tls_client__create(&cli, &clp, err, len);   toward upstream
 *	tls_conn__accept(&c, srv, fd, &ap);    a guest connection
 *	tls_conn__connect(&c, cli, fd, &cp);   an upstream connection
 *	tls_conn__handshake(c);  0, -EAGAIN (wait for tls_conn__wants(c)),
 *	                         or -errno with tls_conn__error(c)
 *	tls_conn__read(c, ...), tls_conn__write(c, ...), tls_conn__shutdown(c)
 *	tls_conn__free(c); tls_server__destroy(srv); tls_client__destroy(cli);
 *	tls_ca__destroy(ca);
 *
 * Nothing here locks: a CA, its servers and clients and their
 * connections are used by one thread at a time (the proxy's). A CA must
 * outlive the servers made on it; a server or client the connections
 * made on it. Connections borrow their fd: nonblocking, never closed here.
 */

/* A generated CA is valid from now - TLS_BACKDATE_S for this many days. */
#define TLS_CA_DAYS	365U
#define TLS_CA_MAX_DAYS 3650U /* what tls_ca_params.days may ask for */
/* A leaf, from now - TLS_BACKDATE_S: shorter than the CA. */
#define TLS_LEAF_DAYS 30U
/* Certificates start an hour in the past: a guest clock a little behind. */
#define TLS_BACKDATE_S 3600U
/* A cached leaf with less than this left is minted again. */
#define TLS_LEAF_RENEW_S (24U * 3600U)
/* Leaves kept per CA; the least recently used goes first. */
#define TLS_LEAF_CACHE_MAX 256U
/* What upstream certificates are checked against unless told otherwise. */
#define TLS_DEFAULT_CA_BUNDLE "/etc/ssl/certs/ca-certificates.crt"
/* The CA certificate written out (cert_out): anyone may read it. */
#define TLS_CA_CERT_MODE 0644
/* A PEM file read in (key, certificate): larger is refused. */
#define TLS_PEM_MAX (64U << 10)
/* tls_conn__error()'s text, terminated. */
#define TLS_REASON_LEN 192U
/* An ALPN list ("h2,http/1.1"), terminated; one protocol at most 255. */
#define TLS_ALPN_LIST_MAX 64U
#define TLS_ALPN_NAME_MAX 255U

struct tls_ca;
struct tls_server;
struct tls_client;
struct tls_conn;

struct tls_ca_params {
	/*
	 * Both NULL: a fresh CA for this VM (an ECDSA P-256 key that never
	 * leaves the vmm's memory). Both set: the orchestrator's CA, PEM
	 * files: an EC private key (SEC 1 or PKCS #8, unencrypted) that
	 * group and others may not read, and its CA certificate.
	 */
	const char *key_path;
	const char *cert_path;
	/* NULL, or where to write the CA certificate (PEM, TLS_CA_CERT_MODE). */
	const char *cert_out;
	/* A generated CA's validity; 0: TLS_CA_DAYS; else over TLS_LEAF_DAYS. */
	unsigned int days;
};

/*
 * The CA, and one leaf key (ECDSA P-256) for every leaf it mints. 0, or
 * -errno with "what: why" in err (-EPERM: a key file others may read;
 * -EINVAL: files that are not a CA and its EC key).
 */
int __must_check tls_ca__create(struct tls_ca **out,
				const struct tls_ca_params *p, char *err,
				size_t len);
/* NULL and half-built are fine. */
void tls_ca__destroy(struct tls_ca *ca);
/* The CA certificate, PEM, terminated; valid while ca lives. */
void tls_ca__cert_pem(const struct tls_ca *ca, const char **pem, size_t *len);
/* The CA certificate, DER; valid while ca lives. */
void tls_ca__cert_der(const struct tls_ca *ca, const uint8_t **der,
		      size_t *len);
/*
 * The leaf certificate (DER) for host, a DNS name (not an address; at
 * most 253 bytes): from the cache, or minted and cached. *der stays
 * valid until the next tls_ca__leaf() or tls_ca__destroy(). 0; -EINVAL
 * for a host that is not a DNS name; -ENOMEM or -EIO from wolfSSL.
 */
int __must_check tls_ca__leaf(struct tls_ca *ca, const char *host,
			      const uint8_t **der, size_t *len);
/* Leaves minted since create (cache misses), for the tests and stats. */
uint64_t tls_ca__minted(const struct tls_ca *ca);
/*
 * OpenSSL's subject hash (X509_NAME_hash: SHA-1 of the canonical subject)
 * of a certificate (DER), the name of its file in a hashed directory
 * ("%08x.0", what -CApath looks up). 0; -EINVAL for a certificate that
 * does not parse; -EOPNOTSUPP for a subject whose values are not
 * printable ASCII with single inner spaces (wolfSSL's canonical form
 * differs from OpenSSL's there, so its hash would name the wrong file).
 */
int __must_check tls__subject_hash(const uint8_t *der, size_t len,
				   uint32_t *hash);

/* Toward the guest: TLS 1.2 and 1.3, certificates minted by ca per SNI. */
int __must_check tls_server__create(struct tls_server **out, struct tls_ca *ca,
				    char *err, size_t len);
void tls_server__destroy(struct tls_server *s);

struct tls_client_params {
	/* PEM bundle upstream certificates must chain to; NULL: default. */
	const char *ca_bundle;
};

/*
 * Toward upstream: TLS 1.2 and 1.3, the peer verified against the bundle.
 * The bundle is opened here (a file that cannot be, or is empty, is the
 * error) and parsed at the first tls_conn__connect(): its certificate
 * store costs memory only once a connection needs it.
 */
int __must_check tls_client__create(struct tls_client **out,
				    const struct tls_client_params *p,
				    char *err, size_t len);
void tls_client__destroy(struct tls_client *c);

struct tls_accept_params {
	/*
	 * Called during the handshake, once per ClientHello (so again after
	 * a TLS 1.3 HelloRetryRequest), with its SNI normalized
	 * (net_hostname__normalize()), before any certificate is chosen or
	 * minted: false aborts the handshake (an unrecognized_name alert).
	 * A ClientHello without a DNS name in its SNI (none, an address,
	 * bytes that are no name) is refused without a call.
	 */
	bool (*sni_ok)(void *opaque, const char *sni);
	void *opaque;
	/*
	 * Protocols the guest may pick, "h2,http/1.1"; NULL: no ALPN. The
	 * guest's first offer on the list wins (its preference, not the
	 * list's order); a guest that offers ALPN but none of these gets a
	 * no_application_protocol alert; one that offers none gets none.
	 */
	const char *alpn;
};

/*
 * A guest connection on fd (nonblocking, borrowed). 0 or -errno: -EINVAL
 * for bad params, -EIO when wolfSSL could not make one (memory, or the
 * seed of its random generator: network.md, "Threads and seccomp").
 */
int __must_check tls_conn__accept(struct tls_conn **out, struct tls_server *s,
				  int fd, const struct tls_accept_params *p);

struct tls_connect_params {
	/* The name checked in the certificate and sent as SNI. */
	const char *host;
	/*
	 * The protocols offered ("h2,http/1.1"), or NULL. The server must
	 * choose one of them; a server that chooses none is taken as
	 * speaking "http/1.1" (TLS_ALPN_IMPLICIT), which must be listed.
	 */
	const char *alpn;
};

#define TLS_ALPN_IMPLICIT "http/1.1"

/*
 * An upstream connection on fd (nonblocking, connected, borrowed); errors
 * as tls_conn__accept()'s, and the CA bundle's, parsed at the first
 * connection of c: -EIO (unreadable), -ENOKEY (no certificate wolfSSL
 * can load).
 */
int __must_check tls_conn__connect(struct tls_conn **out, struct tls_client *c,
				   int fd, const struct tls_connect_params *p);

/*
 * Drives the handshake: 0 when it is done, -EAGAIN when the socket must
 * be ready for tls_conn__wants() first, else the failure (kept: every
 * later call returns it) with its reason in tls_conn__error():
 * -EACCES for trust (SNI refused, certificate not trusted or not for the
 * host), -EPROTO for the protocol (an alert, garbage, no common ALPN),
 * -ECONNRESET when the peer went away.
 */
int __must_check tls_conn__handshake(struct tls_conn *c);
/*
 * After -EAGAIN from any call: EPOLLIN or EPOLLOUT (the same bits as
 * POLLIN, POLLOUT), what the socket must be ready for before that call
 * is made again. A read can need EPOLLOUT and a write EPOLLIN: wolfSSL
 * may send from inside a read (an alert, a post-handshake message) and
 * the first read or write finishes a handshake not yet done. Watch what
 * this says, not what the call was.
 */
uint32_t tls_conn__wants(const struct tls_conn *c);
/* Bytes decrypted and buffered: read them without waiting for EPOLLIN. */
size_t tls_conn__pending(struct tls_conn *c);
/*
 * Up to len bytes of application data: > 0 read, 0 the peer's
 * close_notify (and every read after it), -EAGAIN, or the failure
 * (-ECONNRESET: closed without close_notify, which a caller may take
 * as an end too). Read until -EAGAIN, or mind tls_conn__pending().
 */
ssize_t __must_check tls_conn__read(struct tls_conn *c, void *buf, size_t len);
/*
 * len > 0 bytes (at most INT_MAX): all of them sent (len), or -EAGAIN:
 * then call again with the same bytes once tls_conn__wants() is met.
 * -EPIPE after tls_conn__shutdown(); or the failure.
 */
ssize_t __must_check tls_conn__write(struct tls_conn *c, const void *buf,
				     size_t len);
/*
 * Sends close_notify, after the last write completed, not waiting for
 * the peer's: 0 (again: 0), -EAGAIN, or the failure.
 */
int __must_check tls_conn__shutdown(struct tls_conn *c);
/* Why the connection failed; "" while it has not. */
const char *tls_conn__error(const struct tls_conn *c);
/* The guest's SNI (normalized) once seen, else NULL. Server side. */
const char *tls_conn__sni(const struct tls_conn *c);
/* The negotiated ALPN protocol after the handshake, else NULL. */
const char *tls_conn__alpn(const struct tls_conn *c);
/* "TLSv1.3", "TLSv1.2" after the handshake. */
const char *tls_conn__version(const struct tls_conn *c);
/*
 * The largest TLS record a peer may send (RFC 8446 5.1: 2^14 bytes of
 * plaintext, after its 5-byte header): what tls__hello_sni() is given
 * at most.
 */
#define TLS_RECORD_HEADER 5U
#define TLS_RECORD_MAX	  ((16U << 10) + TLS_RECORD_HEADER)

/*
 * The SNI of the ClientHello that buf holds (its first len bytes of a
 * connection, one TLS record; wolfSSL_SNI_GetFromBuffer()), normalized
 * into sni (NET_HOSTNAME_MAX + 1 bytes): 0; -EAGAIN: the record is not
 * all there yet; -ENOENT: no SNI; -EACCES: one that is no DNS name;
 * -EPROTO: not a TLS ClientHello in one record.
 */
int __must_check tls__hello_sni(const uint8_t *buf, size_t len, char *sni);

/* Frees the connection (no close_notify: see tls_conn__shutdown). */
void tls_conn__free(struct tls_conn *c);

#endif
