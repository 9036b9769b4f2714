// SPDX-License-Identifier: GPL-2.0
/*
 * --net and "net" (net/netcfg.c through the option table): the forms
 * accepted, the defaults filled in, what the guest is told on the kernel
 * command line, and the values refused with the reason naming the option.
 * In-process: options__parse_argv, options__load_json, config__validate.
 * selftests/unit/cli.c checks that the vmm says it in one line.
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <unistd.h>

#include "lib/compiler.h"
#include "net/netcfg.h"
#include "net/proxy.h"
#include "selftests/kselftest.h"
#include "selftests/options_argv.h"
#include "vmm/config.h"
#include "vmm/options.h"

/* argv of `vmm run --kernel k ARGS...`, parsed and validated. */
static int parse(struct vm_config *c, const char *const args[], char *err,
		 size_t len)
{
	return options_argv__run(c, args, err, len);
}

static const char *ip(uint32_t addr, char buf[NET_ADDR_STRLEN])
{
	net_addr__format_ipv4(addr, buf);
	return buf;
}

TEST(no_net_by_default)
{
	char err[CONFIG_ERR_LEN], line[NET_CMDLINE_MAX];
	struct vm_config c;

	ASSERT_EQ(0, parse(&c, NULL, err, sizeof(err)));
	EXPECT_EQ(NET_NONE, c.net.mode);
	ASSERT_EQ(0, netcfg__cmdline(&c.net, line, sizeof(line)));
	EXPECT_STREQ("", line);
	config__free(&c);
}

TEST(auto_defaults)
{
	char err[CONFIG_ERR_LEN], line[NET_CMDLINE_MAX], b[NET_ADDR_STRLEN];
	struct vm_config c, d;

	ASSERT_EQ(0, parse(&c, ARGS("--net", "auto"), err, sizeof(err)))
	TH_LOG("%s", err);
	EXPECT_EQ(NET_AUTO, c.net.mode);
	EXPECT_STREQ("10.0.2.15", ip(c.net.address, b));
	EXPECT_EQ(24, c.net.prefix);
	EXPECT_STREQ("10.0.2.2", ip(c.net.gateway, b));
	EXPECT_STREQ("10.0.2.2", ip(c.net.dns, b));
	EXPECT_EQ(1500, c.net.mtu);
	/* Locally administered, unicast, "KL", then random. */
	EXPECT_EQ(0x02, c.net.mac[0]);
	EXPECT_EQ(0x4b, c.net.mac[1]);
	EXPECT_EQ(0x4c, c.net.mac[2]);
	ASSERT_EQ(0, netcfg__cmdline(&c.net, line, sizeof(line)));
	EXPECT_STREQ(" kiln.net=10.0.2.15/24,10.0.2.2,1500,10.0.2.2", line);

	/* Two VMs, two MACs (24 random bits: a clash is one in 16 M). */
	ASSERT_EQ(0, parse(&d, ARGS("--net", "auto"), err, sizeof(err)));
	EXPECT_NE(0, memcmp(c.net.mac, d.net.mac, NET_MAC_LEN));
	config__free(&c);
	config__free(&d);
}

TEST(netns_and_tap_fd_forms)
{
	char err[CONFIG_ERR_LEN];
	struct vm_config c;

	ASSERT_EQ(0, parse(&c, ARGS("--net", "netns:/run/netns/vm1"), err,
			   sizeof(err)))
	TH_LOG("%s", err);
	EXPECT_EQ(NET_NETNS, c.net.mode);
	EXPECT_STREQ("/run/netns/vm1", c.net.netns_path);
	config__free(&c);

	ASSERT_EQ(0, parse(&c, ARGS("--net", "tap-fd:7"), err, sizeof(err)))
	TH_LOG("%s", err);
	EXPECT_EQ(NET_TAP_FD, c.net.mode);
	EXPECT_EQ(7, c.net.tap_fd);
	EXPECT_TRUE(c.net.netns_path == NULL);
	config__free(&c);

	/* The last --net wins, and drops what went with the one before. */
	ASSERT_EQ(0, parse(&c, ARGS("--net", "netns:/x", "--net", "auto"), err,
			   sizeof(err)))
	TH_LOG("%s", err);
	EXPECT_EQ(NET_AUTO, c.net.mode);
	EXPECT_TRUE(c.net.netns_path == NULL);
	config__free(&c);
	ASSERT_EQ(0, parse(&c, ARGS("--net", "auto", "--net", "none"), err,
			   sizeof(err)));
	EXPECT_EQ(NET_NONE, c.net.mode);
	config__free(&c);
}

TEST(every_setting)
{
	char err[CONFIG_ERR_LEN], line[NET_CMDLINE_MAX], m[NET_MAC_STRLEN];
	struct vm_config c;

	ASSERT_EQ(0,
		  parse(&c,
			ARGS("--net", "auto", "--net-address", "192.168.7.2/28",
			     "--net-gateway", "192.168.7.14", "--net-dns",
			     "192.0.2.53", "--net-mtu", "9000", "--net-mac",
			     "02:00:5E:10:00:01"),
			err, sizeof(err)))
	TH_LOG("%s", err);
	ASSERT_EQ(0, netcfg__cmdline(&c.net, line, sizeof(line)));
	EXPECT_STREQ(" kiln.net=192.168.7.2/28,192.168.7.14,9000,192.0.2.53",
		     line);
	net_addr__format_mac(c.net.mac, m);
	EXPECT_STREQ("02:00:5e:10:00:01", m);
	config__free(&c);
}

static void write_json(const char *path, const char *doc)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);

	if (fd < 0 || write(fd, doc, strlen(doc)) != (ssize_t)strlen(doc))
		abort();
	close(fd);
}

/* JSON, then the command line's override; err for the refused ones. */
static int parse_json(struct vm_config *c, const char *doc,
		      const char *const args[], char *err, size_t len)
{
	char path[] = "/tmp/kiln-netcfg-XXXXXX";
	int fd = mkstemp(path), ret;

	if (fd < 0)
		abort();
	close(fd);
	write_json(path, doc);
	config__init(c);
	err[0] = '\0';
	ret = options__load_json(c, path, err, len);
	unlink(path);
	if (ret)
		return ret;
	if (!c->kernel_path)
		c->kernel_path = strdup("/k");
	if (args) {
		ret = options_argv__parse(c, ARGS("run"), args);
		if (ret)
			return ret;
	}
	return config__validate(c, err, len);
}

TEST(json_forms)
{
	char err[CONFIG_ERR_LEN], line[NET_CMDLINE_MAX], m[NET_MAC_STRLEN];
	struct vm_config c;

	ASSERT_EQ(0,
		  parse_json(&c,
			     "{\"net\": {\"mode\": \"auto\", \"address\": "
			     "\"10.9.0.2/16\", \"gateway\": \"10.9.0.1\", "
			     "\"mtu\": 1400, \"mac\": \"02:aa:bb:cc:dd:ee\", "
			     "\"dns\": \"10.9.0.53\"}}",
			     NULL, err, sizeof(err)))
	TH_LOG("%s", err);
	EXPECT_EQ(NET_AUTO, c.net.mode);
	ASSERT_EQ(0, netcfg__cmdline(&c.net, line, sizeof(line)));
	EXPECT_STREQ(" kiln.net=10.9.0.2/16,10.9.0.1,1400,10.9.0.53", line);
	net_addr__format_mac(c.net.mac, m);
	EXPECT_STREQ("02:aa:bb:cc:dd:ee", m);
	config__free(&c);

	ASSERT_EQ(0, parse_json(&c,
				"{\"net\": {\"mode\": \"netns\", \"netns\": "
				"\"/run/netns/a\"}}",
				NULL, err, sizeof(err)))
	TH_LOG("%s", err);
	EXPECT_STREQ("/run/netns/a", c.net.netns_path);
	config__free(&c);

	ASSERT_EQ(0,
		  parse_json(&c,
			     "{\"net\": {\"mode\": \"tap-fd\", \"tapFd\": 9}}",
			     NULL, err, sizeof(err)))
	TH_LOG("%s", err);
	EXPECT_EQ(NET_TAP_FD, c.net.mode);
	EXPECT_EQ(9, c.net.tap_fd);
	config__free(&c);

	/* The command line overrides the file, path and all. */
	ASSERT_EQ(0, parse_json(&c,
				"{\"net\": {\"mode\": \"netns\", \"netns\": "
				"\"/run/netns/a\", \"mtu\": 9000}}",
				ARGS("--net", "auto", "--net-mtu", "1280"), err,
				sizeof(err)))
	TH_LOG("%s", err);
	EXPECT_EQ(NET_AUTO, c.net.mode);
	EXPECT_TRUE(c.net.netns_path == NULL);
	EXPECT_EQ(1280, c.net.mtu);
	config__free(&c);
}

struct refused {
	const char *const *args; /* command line, or NULL */
	const char *json;	 /* or a document */
	const char *why;	 /* in the error */
};

static const struct refused refused[] = {
	{ ARGS("--net", "bridge"), NULL,
	  "--net bridge: must be auto, netns:/path, tap-fd:N or none" },
	{ ARGS("--net", "netns:"), NULL, "give the namespace's path" },
	{ ARGS("--net", "tap-fd:x"), NULL,
	  "--net tap-fd:x: give the tap's fd" },
	{ ARGS("--net", "tap-fd:2"), NULL, "net tap fd 2: must be 3 or more" },
	{ ARGS("--net-address", "10.0.2.15/24"), NULL,
	  "net options given without a network" },
	{ ARGS("--net", "auto", "--net-address", "10.0.2.15"), NULL,
	  "--net-address 10.0.2.15: not an IPv4 address with a prefix" },
	{ ARGS("--net", "auto", "--net-address", "10.0.2.15/31"), NULL,
	  "the prefix must be 1 to 30" },
	{ ARGS("--net", "auto", "--net-address", "10.0.2.0/24"), NULL,
	  "net address 10.0.2.0/24 (--net-address, \"net.address\"): not a "
	  "host address" },
	{ ARGS("--net", "auto", "--net-address", "127.0.0.2/8"), NULL,
	  "not a host address" },
	{ ARGS("--net", "auto", "--net-address", "192.168.1.5/24"), NULL,
	  "net gateway 10.0.2.2 (the default) (--net-gateway, "
	  "\"net.gateway\"): must be another host of the guest's subnet "
	  "192.168.1.5/24" },
	{ ARGS("--net", "auto", "--net-gateway", "10.0.2.15"), NULL,
	  "must be another host" },
	{ ARGS("--net", "auto", "--net-gateway", "10.0.2.255"), NULL,
	  "must be another host" },
	{ ARGS("--net", "auto", "--net-gateway", "10.0.2.256"), NULL,
	  "--net-gateway 10.0.2.256: not an IPv4 address (A.B.C.D)" },
	{ ARGS("--net", "auto", "--net-dns", "224.0.0.1"), NULL,
	  "net DNS server 224.0.0.1 (--net-dns, \"net.dns\"): not a unicast" },
	{ ARGS("--net", "auto", "--net-mtu", "67"), NULL,
	  "net MTU 67 (--net-mtu, \"net.mtu\"): must be 68 to 65535" },
	{ ARGS("--net", "auto", "--net-mtu", "65536"), NULL,
	  "must be 68 to 65535" },
	{ ARGS("--net", "auto", "--net-mac", "03:00:00:00:00:01"), NULL,
	  "net MAC 03:00:00:00:00:01 (--net-mac, \"net.mac\"): must be a "
	  "nonzero unicast" },
	{ ARGS("--net", "auto", "--net-mac", "00:00:00:00:00:00"), NULL,
	  "nonzero unicast" },
	{ ARGS("--net", "auto", "--net-mac", "02:00:00:00:00"), NULL,
	  "--net-mac 02:00:00:00:00: not a MAC address" },
	{ NULL, "{\"net\": {\"mode\": \"bridge\"}}",
	  "\"net.mode\" must be \"none\", \"auto\", \"netns\" or \"tap-fd\"" },
	{ NULL, "{\"net\": {\"mode\": \"netns\"}}",
	  "net mode netns needs the namespace's path" },
	{ NULL, "{\"net\": {\"mode\": \"tap-fd\"}}",
	  "net mode tap-fd needs the tap's fd" },
	{ NULL, "{\"net\": {\"mode\": \"auto\", \"netns\": \"/x\"}}",
	  "net namespace \"/x\": only for mode netns (mode is auto)" },
	{ NULL, "{\"net\": {\"mode\": \"auto\", \"tapFd\": 5}}",
	  "net tap fd 5: only for mode tap-fd (mode is auto)" },
	{ NULL, "{\"net\": {\"mode\": \"auto\", \"address\": 5}}",
	  "\"net.address\" must be an IPv4 address with a prefix length "
	  "(A.B.C.D/N) as a string" },
	{ NULL, "{\"net\": {\"mode\": \"auto\", \"mtu\": \"1500\"}}",
	  "\"net.mtu\" must be an integer" },
	{ NULL, "{\"net\": {\"mode\": \"auto\", \"gw\": \"10.0.2.2\"}}",
	  "unknown key \"net.gw\"" },
	{ NULL, "{\"net\": \"auto\"}", "\"net\" must be an object" },
	{ ARGS("--net", "tap-fd:5", "--net-ca-bundle", "/b.pem"), NULL,
	  "net CA bundle \"/b.pem\": only with an egress proxy (mode auto or "
	  "netns; mode is tap-fd)" },
	{ ARGS("--net-ca-bundle", "/b.pem"), NULL,
	  "net CA bundle \"/b.pem\": only with an egress proxy (mode auto or "
	  "netns; mode is none)" },
	{ NULL, "{\"net\": {\"mode\": \"auto\", \"caBundle\": \"\"}}",
	  "net CA bundle: empty path" },
	{ NULL, "{\"net\": {\"mode\": \"auto\", \"caBundle\": 5}}",
	  "\"net.caBundle\" must be a string" },
	{ ARGS("--net", "auto", "--net-relay", "sockmap"), NULL,
	  "--net-relay sockmap: must be splice, auto or kernel" },
	{ NULL, "{\"net\": {\"mode\": \"auto\", \"relay\": true}}",
	  "\"net.relay\"" },
};

/* How granted TCP flows are relayed: splice by default, each name its own. */
TEST(relay_forms)
{
	char err[CONFIG_ERR_LEN];
	struct vm_config c;

	ASSERT_EQ(0, parse(&c, ARGS("--net", "auto"), err, sizeof(err)));
	EXPECT_STREQ("splice", netcfg__relays[c.net.relay]);
	EXPECT_EQ(PROXY_RELAY_SPLICE, c.net.relay);
	config__free(&c);
	ASSERT_EQ(0, parse(&c, ARGS("--net", "auto", "--net-relay", "auto"),
			   err, sizeof(err)))
	TH_LOG("%s", err);
	EXPECT_STREQ("auto", netcfg__relays[c.net.relay]);
	EXPECT_EQ(PROXY_RELAY_AUTO, c.net.relay); /* vm-net.c's cast */
	config__free(&c);
	ASSERT_EQ(0, parse(&c, ARGS("--net", "auto", "--net-relay", "splice"),
			   err, sizeof(err)))
	TH_LOG("%s", err);
	EXPECT_STREQ("splice", netcfg__relays[c.net.relay]);
	EXPECT_EQ(PROXY_RELAY_SPLICE, c.net.relay); /* vm-net.c's cast */
	config__free(&c);
	ASSERT_EQ(0, parse(&c, ARGS("--net", "auto", "--net-relay", "kernel"),
			   err, sizeof(err)))
	TH_LOG("%s", err);
	EXPECT_STREQ("kernel", netcfg__relays[c.net.relay]);
	EXPECT_EQ(PROXY_RELAY_KERNEL, c.net.relay);
	config__free(&c);
	ASSERT_EQ(0, parse(&c, ARGS("--net", "auto", "--net-relay", "split"),
			   err, sizeof(err)))
	TH_LOG("%s", err);
	EXPECT_STREQ("split", netcfg__relays[c.net.relay]);
	EXPECT_EQ(PROXY_RELAY_SPLIT, c.net.relay);
	config__free(&c);
	ASSERT_EQ(0, parse_json(&c,
				"{\"net\": {\"mode\": \"auto\", "
				"\"relay\": \"splice\"}}",
				NULL, err, sizeof(err)))
	TH_LOG("%s", err);
	EXPECT_STREQ("splice", netcfg__relays[c.net.relay]);
	config__free(&c);
}

/* Where upstream TLS certificates must chain to: a path, kept as given. */
TEST(ca_bundle_forms)
{
	char err[CONFIG_ERR_LEN];
	struct vm_config c;

	ASSERT_EQ(0, parse(&c, ARGS("--net", "auto"), err, sizeof(err)));
	EXPECT_TRUE(c.net.ca_bundle == NULL);
	config__free(&c);
	ASSERT_EQ(0, parse(&c,
			   ARGS("--net", "netns:/run/netns/a",
				"--net-ca-bundle", "/etc/kiln/upstream.pem"),
			   err, sizeof(err)))
	TH_LOG("%s", err);
	EXPECT_STREQ("/etc/kiln/upstream.pem", c.net.ca_bundle);
	config__free(&c);
	ASSERT_EQ(0, parse_json(&c,
				"{\"net\": {\"mode\": \"auto\", \"caBundle\": "
				"\"/a.pem\"}}",
				ARGS("--net-ca-bundle", "/b.pem"), err,
				sizeof(err)))
	TH_LOG("%s", err);
	EXPECT_STREQ("/b.pem", c.net.ca_bundle);
	config__free(&c);
}

TEST(refused_with_reason)
{
	char err[CONFIG_ERR_LEN];
	struct vm_config c;
	int ret;

	for (size_t i = 0; i < ARRAY_SIZE(refused); i++) {
		const struct refused *r = &refused[i];

		/*
		 * Command-line parse errors go to stderr (pr_err) and are
		 * checked, one line, in cli.c; here only that they fail.
		 */
		if (r->args)
			ret = parse(&c, r->args, err, sizeof(err));
		else
			ret = parse_json(&c, r->json, NULL, err, sizeof(err));
		EXPECT_NE(0, ret) TH_LOG("case %zu accepted", i);
		if (err[0] || !r->args)
			EXPECT_TRUE(strstr(err, r->why) != NULL)
		TH_LOG("case %zu: want '%s' in '%s'", i, r->why, err);
		config__free(&c);
	}
}

TEST_HARNESS_MAIN
