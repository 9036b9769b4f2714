#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""tools/bench-net-rr.py - TCP request/response latency, both ends.

Usage:
  bench-net-rr.py server ADDR PORT
  bench-net-rr.py client ADDR PORT [--count N] [--warmup N] [--size B]
                                   [--mark NAME] [--out FILE]

The server accepts connections on ADDR:PORT and echoes every byte back,
one thread per connection, until the client closes.

The client opens one connection and does WARMUP unmeasured round trips,
then COUNT measured ones: send SIZE bytes, wait until SIZE bytes came
back. Each round trip is timed on its own with time.perf_counter_ns()
(CLOCK_MONOTONIC). TCP_NODELAY is set on both ends, so every request and
every answer is one segment of its own. It prints one JSON object (to
FILE with --out, else to stdout): the count, the size, and the minimum,
p50, p90, p99, maximum and mean round trip in microseconds (nearest-rank
percentiles), the full round trip, not half of it. With --mark NAME it
prints `kiln-bench: begin NAME` and `kiln-bench: end NAME` on stdout
around the measured round trips, the markers tools/bench-blk's console
reader samples the monitor's CPU at.

tools/bench-net runs the server in the upstream netns and the client in
the guest (fed to `python3 -` on its stdin: the guest image has python3
but not this tree). Python's own cost per round trip, a few
microseconds on hardware, is in every figure, the same under every
monitor. See Documentation/benchmarks.md.
"""

import argparse
import json
import math
import socket
import sys
import threading
import time


def echo(conn):
    with conn:
        while True:
            try:
                data = conn.recv(65536)
            except OSError:
                return
            if not data:
                return
            try:
                conn.sendall(data)
            except OSError:
                return


def server(args):
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((args.addr, args.port))
    ls.listen(16)
    while True:
        conn, _ = ls.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=echo, args=(conn,), daemon=True).start()


def round_trip(s, msg, buf):
    s.sendall(msg)
    view = memoryview(buf)
    got = 0
    while got < len(buf):
        n = s.recv_into(view[got:])
        if not n:
            raise ConnectionError("the server closed the connection")
        got += n


def percentile(sorted_v, p):
    """Nearest rank: the smallest value with at least p % at or below."""
    return sorted_v[max(0, math.ceil(p / 100 * len(sorted_v)) - 1)]


def client(args):
    s = socket.create_connection((args.addr, args.port), timeout=30)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    msg = bytes(i & 0xff for i in range(args.size))
    buf = bytearray(args.size)
    for _ in range(args.warmup):
        round_trip(s, msg, buf)
    if args.mark:
        print(f"kiln-bench: begin {args.mark}", flush=True)
    ns = []
    clock = time.perf_counter_ns
    for _ in range(args.count):
        t0 = clock()
        round_trip(s, msg, buf)
        ns.append(clock() - t0)
    if args.mark:
        print(f"kiln-bench: end {args.mark}", flush=True)
    s.close()
    if bytes(buf) != msg:
        sys.exit("bench-net-rr: the echo differs from the request")
    ns.sort()
    res = {"count": args.count, "size": args.size,
           "min_us": ns[0] / 1000,
           "p50_us": percentile(ns, 50) / 1000,
           "p90_us": percentile(ns, 90) / 1000,
           "p99_us": percentile(ns, 99) / 1000,
           "max_us": ns[-1] / 1000,
           "mean_us": sum(ns) / len(ns) / 1000}
    text = json.dumps(res, separators=(",", ":"))
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    else:
        print(text, flush=True)


def main():
    p = argparse.ArgumentParser(
        prog="bench-net-rr.py",
        description="TCP request/response latency (tools/bench-net).")
    sub = p.add_subparsers(dest="mode", required=True)
    ps = sub.add_parser("server", help="echo server")
    pc = sub.add_parser("client", help="timed round trips")
    for q in (ps, pc):
        q.add_argument("addr")
        q.add_argument("port", type=int)
    pc.add_argument("--count", type=int, default=2000,
                    help="measured round trips (default 2000)")
    pc.add_argument("--warmup", type=int, default=100,
                    help="unmeasured round trips first (default 100)")
    pc.add_argument("--size", type=int, default=64,
                    help="bytes each way per round trip (default 64)")
    pc.add_argument("--mark", metavar="NAME",
                    help="print kiln-bench begin/end NAME markers")
    pc.add_argument("--out", metavar="FILE",
                    help="write the JSON result here, not to stdout")
    args = p.parse_args()
    if args.mode == "client" and (args.count < 1 or args.warmup < 0 or
                                  args.size < 1):
        p.error("--count and --size want >= 1, --warmup >= 0")
    if args.mode == "server":
        server(args)
    else:
        client(args)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(130)
