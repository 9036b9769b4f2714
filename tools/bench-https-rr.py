#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""tools/bench-https-rr.py - small HTTPS GETs, both ends, and a DNS stub.

Usage:
  bench-https-rr.py server ADDR CERT KEY PORT [PORT...]
  bench-https-rr.py dns ADDR NAME IP
  bench-https-rr.py client URL [--count N] [--warmup N] [--cafile FILE]
                               [--mark NAME] [--out FILE]

The server answers every GET on ADDR:PORT (each PORT, TLS with CERT and
KEY) with 200 and a 2-byte body in one write, HTTP/1.1 keep-alive, one
thread per connection, TCP_NODELAY (as the client). The same process and certificate serve every port: the
benchmark's two paths reach the same upstream.

The DNS stub answers UDP queries on ADDR:53 for NAME (type A) with IP,
TTL 3600, and everything else with NXDOMAIN: the vmm's resolver forwards
to it, and its answer is the trusted binding an http grant needs.

The client opens one connection (TLS verified: against FILE with
--cafile, else the system's trust store, where the guest's init put the
VM's CA) and does WARMUP unmeasured GETs of URL, then COUNT measured
ones, each timed on its own with time.perf_counter_ns(). It prints one
JSON object (to FILE with --out): the count, requests per second over
the measured GETs (count / their total time), and the minimum, p50, p90,
p99, maximum and mean in microseconds (nearest-rank percentiles). With
--mark NAME it prints `kiln-bench: begin NAME` and `kiln-bench: end NAME`
around the measured GETs, as tools/bench-net-rr.py does.

tools/bench-https runs the server and the stub in its own netns and the
client in the guest (fed to `python3 -`). See
Documentation/benchmarks.md.
"""

import argparse
import http.client
import http.server
import json
import math
import socket
import ssl
import struct
import sys
import threading
import time
import urllib.parse

BODY = b"ok"
DNS_PORT = 53
DNS_TTL = 3600
QTYPE_A = 1
QCLASS_IN = 1
RCODE_NXDOMAIN = 3


RESPONSE = (b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(BODY), BODY))


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def setup(self):
        # One segment per answer, sent at once: no Nagle, no delayed ACK.
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        super().setup()

    def do_GET(self):
        self.wfile.write(RESPONSE)

    def log_message(self, *a):
        pass


def server(args):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(args.cert, args.key)
    servers = []
    for port in args.ports:
        s = http.server.ThreadingHTTPServer((args.addr, port), Handler)
        s.daemon_threads = True
        s.socket = ctx.wrap_socket(s.socket, server_side=True)
        servers.append(s)
    for s in servers[1:]:
        threading.Thread(target=s.serve_forever, daemon=True).start()
    servers[0].serve_forever()


def dns_answer(q, name, ip):
    """The answer to query q: A NAME -> ip, else NXDOMAIN; None: not a
    query we read."""
    if len(q) < 12:
        return None
    qid, flags, qd = struct.unpack("!HHH", q[:6])
    if flags & 0x8000 or qd != 1:
        return None
    at, labels = 12, []
    while at < len(q) and q[at]:
        n = q[at]
        labels.append(q[at + 1:at + 1 + n].decode(errors="replace"))
        at += 1 + n
    if at + 5 > len(q):
        return None
    question = q[12:at + 5]
    qtype, qclass = struct.unpack("!HH", q[at + 1:at + 5])
    hit = (".".join(labels).lower() == name and qtype == QTYPE_A and
           qclass == QCLASS_IN)
    rflags = 0x8180 | (0 if hit else RCODE_NXDOMAIN)   # QR, RD, RA
    head = struct.pack("!HHHHHH", qid, rflags, 1, 1 if hit else 0, 0, 0)
    if not hit:
        return head + question
    rr = struct.pack("!HHHIH", 0xc00c, QTYPE_A, QCLASS_IN, DNS_TTL, 4)
    return head + question + rr + socket.inet_aton(ip)


def dns(args):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((args.addr, DNS_PORT))
    name = args.name.lower().rstrip(".")
    while True:
        q, peer = s.recvfrom(512)
        a = dns_answer(q, name, args.ip)
        if a:
            s.sendto(a, peer)


def percentile(sorted_us, p):
    """Nearest rank."""
    return sorted_us[max(0, math.ceil(p / 100 * len(sorted_us)) - 1)]


def client(args):
    u = urllib.parse.urlsplit(args.url)
    ctx = ssl.create_default_context(cafile=args.cafile)
    c = http.client.HTTPSConnection(u.hostname, u.port or 443, context=ctx,
                                    timeout=60)
    path = u.path or "/"
    c.connect()
    c.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def get():
        c.request("GET", path)
        r = c.getresponse()
        body = r.read()
        if r.status != 200 or body != BODY:
            sys.exit(f"bench-https-rr: GET {args.url}: {r.status} "
                     f"{body[:80]!r}")

    for _ in range(args.warmup):
        get()
    times = []
    if args.mark:
        print(f"kiln-bench: begin {args.mark}", flush=True)
    for _ in range(args.count):
        t = time.perf_counter_ns()
        get()
        times.append(time.perf_counter_ns() - t)
    if args.mark:
        print(f"kiln-bench: end {args.mark}", flush=True)
    c.close()
    us = sorted(t / 1000 for t in times)
    total_s = sum(times) / 1e9
    res = {"count": args.count, "url": args.url,
           "rps": args.count / total_s if total_s else None,
           "min_us": us[0], "p50_us": percentile(us, 50),
           "p90_us": percentile(us, 90), "p99_us": percentile(us, 99),
           "max_us": us[-1], "mean_us": sum(us) / len(us)}
    out = open(args.out, "w") if args.out else sys.stdout
    json.dump(res, out)
    out.write("\n")
    if args.out:
        out.close()


def main():
    p = argparse.ArgumentParser(prog="bench-https-rr.py")
    sub = p.add_subparsers(dest="mode", required=True)
    s = sub.add_parser("server")
    s.add_argument("addr")
    s.add_argument("cert")
    s.add_argument("key")
    s.add_argument("ports", type=int, nargs="+")
    d = sub.add_parser("dns")
    d.add_argument("addr")
    d.add_argument("name")
    d.add_argument("ip")
    c = sub.add_parser("client")
    c.add_argument("url")
    c.add_argument("--count", type=int, default=1000)
    c.add_argument("--warmup", type=int, default=50)
    c.add_argument("--cafile")
    c.add_argument("--mark")
    c.add_argument("--out")
    a = p.parse_args()
    if a.mode == "client" and (a.count < 1 or a.warmup < 0):
        p.error("--count wants >= 1, --warmup >= 0")
    {"server": server, "dns": dns, "client": client}[a.mode](a)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(130)
