// SPDX-License-Identifier: GPL-2.0
/*
 * The interception CA in the guest without a static http grant (issue
 * 31, item 4; Documentation/network.md, "The CA in the guest"), on the
 * Debian image: a policy of a hook alone, or "net.interceptCa" with no
 * policy, puts the VM's CA in /etc/ssl/certs/ca-certificates.crt and, as
 * HASH.N, in /etc/ssl/certs, where `openssl verify -CApath` finds it by
 * its subject hash alone (the bundle kept out with -no-CAfile); both
 * through an overlay, the image untouched. A VM with neither has no CA.
 * Root only (network namespaces).
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "selftests/kselftest.h"
#include "selftests/kvm/test_tmp.h"
#include "selftests/kvm/vmm_util.h"

/*
 * What the guest says of its trust store: the bundle's last certificate
 * (where the init appends the CA) by subject, the hashed entries named
 * by that certificate's subject hash, whether the entry is the same
 * certificate, OpenSSL's lookup of it through -CApath alone, and what is
 * mounted over /etc/ssl/certs. A 203.0.113.9 connection puts one flow
 * question to a hook, if there is one.
 */
static const char probe[] =
	"B=/etc/ssl/certs/ca-certificates.crt; "
	"awk '/BEGIN CERT/ { c = \"\" } { c = c $0 \"\\n\" } "
	"END { printf \"%s\", c }' $B > /tmp/last.pem; "
	"openssl x509 -in /tmp/last.pem -noout -subject | "
	"sed 's/CA [0-9a-f]*$/CA HEX/'; "
	"h=$(openssl x509 -in /tmp/last.pem -noout -subject_hash); "
	"for f in /etc/ssl/certs/$h.*; do "
	"  cmp -s \"$f\" /tmp/last.pem && echo \"entry ${f##*.}: the CA\"; "
	"done; "
	"openssl verify -no-CAfile -no-CAstore -CApath /etc/ssl/certs "
	"/tmp/last.pem 2>&1 | grep -o ': OK$' || echo capath refuses; "
	"awk '$2 ~ \"^/etc/ssl/certs\" { print \"mounted\", $2, $3 }' "
	"/proc/mounts; "
	/* The proxy takes the handshake, then cuts a denied flow: read. */
	"timeout 20 bash -c 'exec 3<>/dev/tcp/203.0.113.9/80 && echo x >&3 "
	"&& read -t 10 l <&3' 2>/dev/null || echo flow refused";

/* The subject line of a VM's CA (net/tls-ca.c's CA_CN_PREFIX). */
#define CA_SUBJECT "subject=CN = Kiln VM CA HEX\n"
#define HASHED                                               \
	"entry 0: the CA\n"                                  \
	": OK\n"                                             \
	"mounted /etc/ssl/certs overlay\n"                   \
	"mounted /etc/ssl/certs/ca-certificates.crt tmpfs\n" \
	"flow refused\n"

/* A hook that denies every flow and counts the questions. */
struct deny_hook {
	char path[100]; /* sun_path holds 108 */
	int lsn;
	pthread_t thread;
	unsigned int asked; /* read after the join */
};

static void *deny_hook_serve(void *arg)
{
	struct deny_hook *k = arg;
	char buf[4096], reply[128];
	ssize_t n;
	long id;
	int fd;

	while ((fd = accept(k->lsn, NULL, NULL)) >= 0) {
		while ((n = read(fd, buf, sizeof(buf) - 1)) > 0) {
			char *at;

			buf[n] = '\0';
			at = strstr(buf, "\"id\": ");
			id = at ? strtol(at + 6, NULL, 10) : -1;
			k->asked++;
			n = snprintf(reply, sizeof(reply),
				     "{\"id\": %ld, \"verdict\": \"deny\"}\n",
				     id);
			if (write(fd, reply, (size_t)n) != n)
				break;
		}
		close(fd);
	}
	return NULL;
}

static bool deny_hook_start(struct __test_metadata *_metadata,
			    struct deny_hook *k, const char *dir)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };

	k->asked = 0;
	snprintf(k->path, sizeof(k->path), "%s/hook.sock", dir);
	snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", k->path);
	k->lsn = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ASSERT_LE(0, k->lsn);
	ASSERT_EQ(0, bind(k->lsn, (struct sockaddr *)&sun, sizeof(sun)));
	ASSERT_EQ(0, listen(k->lsn, 4));
	ASSERT_EQ(0, pthread_create(&k->thread, NULL, deny_hook_serve, k));
	return true;
}

/* Shutting the listener down ends accept(); the vmm is gone by then. */
static void deny_hook_stop(struct deny_hook *k)
{
	shutdown(k->lsn, SHUT_RDWR);
	pthread_join(k->thread, NULL);
	close(k->lsn);
	unlink(k->path);
}

/* Root, KVM, the Debian image (its descriptor in image), dir made. */
static bool debian_ready(struct __test_metadata *_metadata, char *image,
			 size_t len, char *dir)
{
	struct guest g;

	if (geteuid())
		SKIP(return false, "needs root (network namespaces)");
	if (access("/dev/kvm", R_OK | W_OK))
		SKIP(return false,
			    "no usable /dev/kvm (run through tools/vmtest)");
	guest_paths(&g);
	snprintf(image, len, "%s/debian-12-agent.json", g.images);
	ASSERT_EQ(0, access(image, R_OK))
	TH_LOG("%s missing: make image", image);
	ASSERT_TRUE(mkdtemp(dir) != NULL);
	return true;
}

static void put_text(struct __test_metadata *_metadata, const char *path,
		     const char *text)
{
	FILE *f = fopen(path, "w");

	ASSERT_TRUE(f != NULL);
	ASSERT_LE(0, fputs(text, f));
	ASSERT_EQ(0, fclose(f));
}

static void remove_dir(const char *dir, const char *const files[])
{
	char path[256];

	for (; *files; files++) {
		snprintf(path, sizeof(path), "%s/%s", dir, *files);
		unlink(path);
	}
	rmdir(dir);
}

/* A policy of a hook alone: the hook may intercept, so the CA is in. */
TEST_TIMEOUT(hook_only_policy_trusts_the_ca, BOOT_TIMEOUT)
{
	char dir[64], image[300], policy[160], doc[300];
	struct spawn_result r;
	struct deny_hook k;
	int ret;

	test_tmp_name(dir, sizeof(dir), "kiln-ica-hook-XXXXXX");
	if (!debian_ready(_metadata, image, sizeof(image), dir))
		return;
	ASSERT_TRUE(deny_hook_start(_metadata, &k, dir));
	snprintf(doc, sizeof(doc),
		 "{\"hook\": {\"socket\": \"%s\", \"timeoutMs\": 5000}}",
		 k.path);
	snprintf(policy, sizeof(policy), "%s/policy.json", dir);
	put_text(_metadata, policy, doc);
	ret = boot_spec(_metadata,
			&(struct boot_spec){
				.initrd = "",
				.opts = ARGS("--rootfs", image, "--net", "auto",
					     "--net-policy", policy),
				.cmd = ARGS("bash", "-c", probe) },
			&r);
	deny_hook_stop(&k);
	remove_dir(dir, ARGS("policy.json"));
	if (ret)
		return;
	EXPECT_EQ(0, r.status);
	EXPECT_STREQ(CA_SUBJECT HASHED, r.out)
	TH_LOG("stderr: %.3000s", r.err);
	/* The flow went to the hook, which denied it. */
	EXPECT_LE(1, k.asked);
}

/* "net": {"interceptCa": true} and no policy at all: the CA is in. */
TEST_TIMEOUT(intercept_ca_without_a_policy_trusts_the_ca, BOOT_TIMEOUT)
{
	char dir[64], image[300], config[160];
	struct spawn_result r;
	int ret;

	test_tmp_name(dir, sizeof(dir), "kiln-ica-flag-XXXXXX");
	if (!debian_ready(_metadata, image, sizeof(image), dir))
		return;
	snprintf(config, sizeof(config), "%s/vm.json", dir);
	put_text(_metadata, config,
		 "{\"net\": {\"mode\": \"auto\", \"interceptCa\": true}}");
	ret = boot_spec(_metadata,
			&(struct boot_spec){ .initrd = "",
					     .opts = ARGS("--config", config,
							  "--rootfs", image),
					     .cmd = ARGS("bash", "-c", probe) },
			&r);
	remove_dir(dir, ARGS("vm.json"));
	if (ret)
		return;
	EXPECT_EQ(0, r.status);
	EXPECT_STREQ(CA_SUBJECT HASHED, r.out)
	TH_LOG("stderr: %.3000s", r.err);
}

/* Neither: the image's store as it is, nothing mounted over it. */
TEST_TIMEOUT(neither_leaves_the_store_alone, BOOT_TIMEOUT)
{
	char dir[64], image[300];
	struct spawn_result r;
	int ret;

	test_tmp_name(dir, sizeof(dir), "kiln-ica-none-XXXXXX");
	if (!debian_ready(_metadata, image, sizeof(image), dir))
		return;
	ret = boot_spec(_metadata,
			&(struct boot_spec){ .initrd = "",
					     .opts = ARGS("--rootfs", image,
							  "--net", "auto"),
					     .cmd = ARGS("bash", "-c", probe) },
			&r);
	rmdir(dir);
	if (ret)
		return;
	EXPECT_EQ(0, r.status);
	EXPECT_EQ(NULL, strstr(r.out, "Kiln VM CA")) TH_LOG("%s", r.out);
	EXPECT_EQ(NULL, strstr(r.out, "mounted")) TH_LOG("%s", r.out);
	EXPECT_TRUE(strstr(r.out, "flow refused\n") != NULL)
	TH_LOG("%s", r.out);
}

TEST_HARNESS_MAIN
