// SPDX-License-Identifier: GPL-2.0
/*
 * `vmm --version` (version.h). The libraries say their own versions where
 * they can; liburing has no call for it and gives the one it was built
 * with (pkg-config's, in kiln-version.h).
 */
#include <bpf/libbpf.h>
#include <errno.h>
#include <http_parser.h>
#include <jansson.h>
#include <nghttp2/nghttp2.h>
#include <limits.h>
#include <seccomp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <wolfssl/options.h>
#include <wolfssl/ssl.h>
#include <zlib.h>
#include <zstd.h>

#include "kiln-version.h"
#include "vmm/guest-default.h"
#include "lib/compiler.h"
#include "vmm/version.h"

static void print_file(FILE *f, const struct guest_default *g, const char *what,
		       const char *name)
{
	char pin[GUEST_DIGEST_LEN], actual[GUEST_DIGEST_LEN], err[1024];
	char path[PATH_MAX], release[64] = "";
	int ret;

	if (snprintf(path, sizeof(path), "%s/%s", g->dir, name) >=
	    (int)sizeof(path)) {
		fprintf(f, "  %s: %s/%s: %s\n", what, g->dir, name,
			strerror(ENAMETOOLONG));
		return;
	}
	if (!strcmp(name, GUEST_DEFAULT_KERNEL) &&
	    guest_default__kernel_release(path, release, sizeof(release)))
		snprintf(release, sizeof(release), "release unknown");
	ret = guest_default__verify(g->dir, name, pin, actual, err,
				    sizeof(err));
	fprintf(f, "  %s: %s%s%s, ", what, path, release[0] ? ", Linux " : "",
		release);
	if (!ret)
		fprintf(f, "%s (matches its pin)\n", actual);
	else if (ret == -EKEYREJECTED)
		fprintf(f, "%s (does NOT match its pin %s)\n", actual, pin);
	else
		fprintf(f, "%s\n", err);
}

static void print_guest(FILE *f)
{
	char exe[PATH_MAX], err[1024];
	struct guest_default g;

	if (guest_default__find(
		    &g, getenv("KILN_GUEST_DIR"),
		    guest_default__exe_dir(exe, sizeof(exe)) ? exe : NULL,
		    guest_default__install_dir(), err, sizeof(err))) {
		fprintf(f, "default guest: none (%s)\n", err);
		return;
	}
	fprintf(f, "default guest: %s (%s)\n", g.dir,
		guest_default__source_name(g.source));
	print_file(f, &g, "kernel", GUEST_DEFAULT_KERNEL);
	print_file(f, &g, "initramfs", GUEST_DEFAULT_INITRD);
}

void version__print(FILE *f)
{
	const struct scmp_version *sv = seccomp_version();
	const nghttp2_info *nv = nghttp2_version(0);
	unsigned long hp = http_parser_version();

	fprintf(f, "vmm (Kiln) %s\n", KILN_BUILD_VERSION);
	print_guest(f);
	fprintf(f,
		"libraries (%s): libbpf %s, liburing %s, jansson %s, "
		"libseccomp %u.%u.%u, wolfSSL %s, nghttp2 %s, "
		"http-parser %lu.%lu.%lu, zlib %s, zstd %s\n",
		KILN_LIBS_LINKED, libbpf_version_string(),
		KILN_LIBURING_VERSION, jansson_version_str(), sv->major,
		sv->minor, sv->micro, wolfSSL_lib_version(), nv->version_str,
		(hp >> 16) & 255, (hp >> 8) & 255, hp & 255, zlibVersion(),
		ZSTD_versionString());
	/* A test build (SAN=1): what it refuses (--rlimit-as) follows. */
	if (KILN_ASAN)
		fprintf(f, "sanitizers: AddressSanitizer, "
			   "UndefinedBehaviorSanitizer (SAN=1)\n");
}
