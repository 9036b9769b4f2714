// SPDX-License-Identifier: GPL-2.0
/*
 * Kiln's init: the guest's network (guest/init/net.h), with ioctls on a
 * datagram socket (the init is static and small; no netlink needed for
 * one address and one route).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <net/if_arp.h>
#include <net/route.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "guest/init/net.h"

#define NET_FIELDS     4  /* address/prefix, gateway, MTU, DNS */
#define NET_FIELD_MAX  20 /* "255.255.255.255/30" and a NUL */
#define NET_MIN_PREFIX 1U
#define NET_MAX_PREFIX 30U
#define NET_MIN_MTU    68U
#define NET_MAX_MTU    65535U
/* virtio-net probes during the kernel's initcalls, like virtio-blk. */
#define NET_WAIT_MS	5000
#define NET_POLL_MS	10
#define RESOLV_LINE_MAX 64
#define RESOLV_DIR	"/run/kiln"
/* Of the root's /etc/hosts, what is kept at most. */
#define HOSTS_MAX (64U << 10)
/* Debian's address for the host's own name (its /etc/hosts, hostname(1)). */
#define LOOPBACK_HOSTNAME_ADDR "127.0.1.1"

static void warn_net(const char *what, int err)
{
	fprintf(stderr, "kiln-init: %s: %s\n", what, strerror(err));
}

/* A decimal number up to max, nothing else. */
static int parse_uint(const char *s, unsigned int max, unsigned int *out)
{
	unsigned long v;
	char *end;

	if (*s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	v = strtoul(s, &end, 10);
	if (*end || errno || v > max)
		return -EINVAL;
	*out = v;
	return 0;
}

static int parse_addr(const char *s, struct in_addr *a)
{
	return inet_pton(AF_INET, s, a) == 1 ? 0 : -EINVAL;
}

int init_net__parse(const char *val, size_t len, struct init_net *n)
{
	char f[NET_FIELDS][NET_FIELD_MAX];
	struct init_net out;
	size_t at = 0, flen;
	unsigned int i;
	char *slash;

	/* Four comma-separated fields, each short: nothing more, nothing less. */
	for (i = 0; i < NET_FIELDS; i++) {
		const char *comma = memchr(val + at, ',', len - at);

		flen = comma ? (size_t)(comma - (val + at)) : len - at;
		if (flen >= NET_FIELD_MAX)
			return -EINVAL;
		memcpy(f[i], val + at, flen);
		f[i][flen] = '\0';
		at += flen;
		if (i + 1 < NET_FIELDS) {
			if (at >= len || val[at] != ',')
				return -EINVAL;
			at++;
		}
	}
	if (at != len)
		return -EINVAL;
	slash = strchr(f[0], '/');
	if (!slash)
		return -EINVAL;
	*slash = '\0';
	if (parse_addr(f[0], &out.address) ||
	    parse_uint(slash + 1, NET_MAX_PREFIX, &out.prefix) ||
	    out.prefix < NET_MIN_PREFIX || parse_addr(f[1], &out.gateway) ||
	    parse_uint(f[2], NET_MAX_MTU, &out.mtu) || out.mtu < NET_MIN_MTU ||
	    parse_addr(f[3], &out.dns))
		return -EINVAL;
	*n = out;
	return 0;
}

static void ifr_for(struct ifreq *ifr, const char *name)
{
	memset(ifr, 0, sizeof(*ifr));
	snprintf(ifr->ifr_name, sizeof(ifr->ifr_name), "%s", name);
}

static int set_up(int sock, const char *name)
{
	struct ifreq ifr;

	ifr_for(&ifr, name);
	if (ioctl(sock, SIOCGIFFLAGS, &ifr))
		return -errno;
	ifr.ifr_flags |= IFF_UP;
	return ioctl(sock, SIOCSIFFLAGS, &ifr) ? -errno : 0;
}

void init_net__lo_up(void)
{
	int sock = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	int ret;

	if (sock < 0) {
		warn_net("cannot bring lo up", errno);
		return;
	}
	ret = set_up(sock, "lo");
	if (ret)
		warn_net("cannot bring lo up", -ret);
	close(sock);
}

static bool wait_for_interface(const char *name)
{
	struct timespec tick = { .tv_nsec = NET_POLL_MS * 1000000L };

	for (int i = 0; i < NET_WAIT_MS / NET_POLL_MS; i++) {
		if (if_nametoindex(name))
			return true;
		nanosleep(&tick, NULL);
	}
	return false;
}

static void set_sin(struct sockaddr *sa, struct in_addr a)
{
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_addr = a };

	memcpy(sa, &sin, sizeof(sin));
}

/* MTU, address and mask, up. Each step names itself in *what. */
static int configure_link(int sock, const struct init_net *n, const char **what)
{
	struct in_addr mask = { .s_addr = htonl(~0U << (32 - n->prefix)) };
	struct ifreq ifr;

	ifr_for(&ifr, INIT_NET_IFNAME);
	ifr.ifr_mtu = (int)n->mtu;
	*what = "MTU";
	if (ioctl(sock, SIOCSIFMTU, &ifr))
		return -errno;
	ifr_for(&ifr, INIT_NET_IFNAME);
	set_sin(&ifr.ifr_addr, n->address);
	*what = "address";
	if (ioctl(sock, SIOCSIFADDR, &ifr))
		return -errno;
	ifr_for(&ifr, INIT_NET_IFNAME);
	set_sin(&ifr.ifr_netmask, mask);
	*what = "netmask";
	if (ioctl(sock, SIOCSIFNETMASK, &ifr))
		return -errno;
	*what = "link up";
	return set_up(sock, INIT_NET_IFNAME);
}

/* default via GATEWAY dev eth0 */
static int add_default_route(int sock, const struct init_net *n)
{
	char dev[IFNAMSIZ] = INIT_NET_IFNAME;
	struct rtentry rt;

	memset(&rt, 0, sizeof(rt));
	set_sin(&rt.rt_dst, (struct in_addr){ .s_addr = INADDR_ANY });
	set_sin(&rt.rt_genmask, (struct in_addr){ .s_addr = INADDR_ANY });
	set_sin(&rt.rt_gateway, n->gateway);
	rt.rt_flags = RTF_UP | RTF_GATEWAY;
	rt.rt_dev = dev;
	return ioctl(sock, SIOCADDRT, &rt) ? -errno : 0;
}

int init_net__configure(const struct init_net *n)
{
	const char *what = "socket";
	char msg[64];
	int sock, ret;

	if (!wait_for_interface(INIT_NET_IFNAME)) {
		fprintf(stderr,
			"kiln-init: network: no %s (waited 5 s; is there a "
			"virtio-net device?)\n",
			INIT_NET_IFNAME);
		return -ENODEV;
	}
	sock = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (sock < 0) {
		ret = -errno;
		goto out_report;
	}
	ret = configure_link(sock, n, &what);
	if (!ret) {
		what = "default route";
		ret = add_default_route(sock, n);
	}
	close(sock);
	if (!ret)
		return 0;
out_report:
	snprintf(msg, sizeof(msg), "network: %s %s", INIT_NET_IFNAME, what);
	warn_net(msg, -ret);
	return ret;
}

static int set_down(int sock, const char *name)
{
	struct ifreq ifr;

	ifr_for(&ifr, name);
	if (ioctl(sock, SIOCGIFFLAGS, &ifr))
		return -errno;
	ifr.ifr_flags &= ~IFF_UP;
	return ioctl(sock, SIOCSIFFLAGS, &ifr) ? -errno : 0;
}

static int set_mac(int sock, const uint8_t mac[INIT_NET_MAC_LEN])
{
	struct ifreq ifr;

	ifr_for(&ifr, INIT_NET_IFNAME);
	ifr.ifr_hwaddr.sa_family = ARPHRD_ETHER;
	memcpy(ifr.ifr_hwaddr.sa_data, mac, INIT_NET_MAC_LEN);
	return ioctl(sock, SIOCSIFHWADDR, &ifr) ? -errno : 0;
}

int init_net__renew(const uint8_t mac[INIT_NET_MAC_LEN],
		    const struct init_net *n, const char **what)
{
	int sock, ret;

	*what = "socket";
	sock = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (sock < 0)
		return -errno;
	*what = "link down";
	ret = set_down(sock, INIT_NET_IFNAME);
	if (!ret) {
		*what = "MAC";
		ret = set_mac(sock, mac);
	}
	if (!ret)
		ret = configure_link(sock, n, what);
	if (!ret) {
		*what = "default route";
		ret = add_default_route(sock, n);
	}
	close(sock);
	return ret;
}

static int write_all(const char *path, int flags, const char *text)
{
	size_t len = strlen(text);
	int fd, ret = 0;

	fd = open(path, flags | O_WRONLY | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	if (write(fd, text, len) != (ssize_t)len)
		ret = errno ? -errno : -EIO;
	if (close(fd) && !ret)
		ret = -errno;
	return ret;
}

/*
 * text as the root's file `path`: written to `run` (under /run/kiln) and
 * bound over the root's own file when there is one (a read-only root
 * takes a bind mount; a persistent one keeps its file as it was). Else
 * (the initramfs, or a root without the file) a new file, which needs a
 * writable /etc; through a dangling symlink (systemd-resolved's) only if
 * the directory it points into exists. 0, or -errno, reported; with
 * optional, a read-only root without the file is left so, quietly.
 */
static int etc_file(const char *path, const char *run, const char *text,
		    bool optional)
{
	char msg[96];
	int ret;

	if (mkdir(RESOLV_DIR, 0755) && errno != EEXIST) {
		ret = -errno;
	} else {
		ret = write_all(run, O_CREAT | O_TRUNC, text);
		if (!ret && mount(run, path, NULL, MS_BIND, NULL))
			ret = -errno;
	}
	if (!ret)
		return 0;
	if (mkdir("/etc", 0755) && errno != EEXIST)
		ret = -errno;
	else
		ret = write_all(path, O_CREAT | O_TRUNC, text);
	if (ret == -EROFS && optional)
		return 0;
	if (ret) {
		snprintf(msg, sizeof(msg), "cannot write %s", path);
		warn_net(msg, -ret);
	}
	return ret;
}

int init_net__resolv_conf(const struct init_net *n)
{
	char line[RESOLV_LINE_MAX], addr[INET_ADDRSTRLEN];

	inet_ntop(AF_INET, &n->dns, addr, sizeof(addr));
	snprintf(line, sizeof(line), "nameserver %s\n", addr);
	return etc_file(INIT_NET_RESOLV_CONF, INIT_NET_RESOLV_RUN, line, false);
}

/*
 * The root's /etc/hosts (at most HOSTS_MAX bytes of it, whole lines)
 * without its 127.0.1.1 lines, then "127.0.1.1 HOSTNAME": into a new
 * string, or NULL (out of memory).
 */
static char *hosts_text(const char *hostname)
{
	size_t cap = HOSTS_MAX + INIT_NET_HOSTNAME_MAX + 32, len = 0;
	char *out = malloc(cap), *in = NULL, *line, *save = NULL;
	ssize_t n = -1;
	int fd;

	if (!out)
		return NULL;
	fd = open(INIT_NET_HOSTS, O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		in = calloc(1, HOSTS_MAX + 1);
		if (in)
			n = read(fd, in, HOSTS_MAX);
		close(fd);
	}
	/* A file cut at HOSTS_MAX loses its last, partial line. */
	if (n == HOSTS_MAX && strrchr(in, '\n'))
		strrchr(in, '\n')[1] = '\0';
	for (line = n > 0 ? strtok_r(in, "\n", &save) : NULL; line;
	     line = strtok_r(NULL, "\n", &save)) {
		size_t skip = strspn(line, " \t");

		if (!strncmp(line + skip, LOOPBACK_HOSTNAME_ADDR,
			     strlen(LOOPBACK_HOSTNAME_ADDR)) &&
		    strchr(" \t", line[skip + strlen(LOOPBACK_HOSTNAME_ADDR)]))
			continue;
		len += snprintf(out + len, cap - len, "%s\n", line);
	}
	snprintf(out + len, cap - len, "%s\t%s\n", LOOPBACK_HOSTNAME_ADDR,
		 hostname);
	free(in);
	return out;
}

int init_net__hostname_files(const char *hostname)
{
	char line[INIT_NET_HOSTNAME_MAX + 2];
	char *hosts = hosts_text(hostname);
	int ret, ret2 = -ENOMEM;

	snprintf(line, sizeof(line), "%s\n", hostname);
	ret = etc_file(INIT_NET_HOSTNAME, INIT_NET_HOSTNAME_RUN, line, true);
	if (hosts)
		ret2 = etc_file(INIT_NET_HOSTS, INIT_NET_HOSTS_RUN, hosts,
				true);
	free(hosts);
	return ret ? ret : ret2;
}
