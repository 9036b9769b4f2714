#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""tools/bench-agent-client.py - the timing half of tools/bench-agent.

Usage: bench-agent-client.py boot [options]     one VM: boot, measure, stop
       bench-agent-client.py run [options]      vmm run -- true, for reference
       bench-agent-client.py report [options] RUNS.jsonl

`boot` starts `vmm start` itself (the clock starts just before the spawn),
polls the control socket every 10 ms until vm.status says the agent is
ready, optionally runs the exec, streaming and CLI workloads over the
control socket, then vm.shutdown, and prints one JSON line with every
figure (times in seconds). `report` turns those lines into the table.
Only the Python standard library; called by tools/bench-agent, see
Documentation/benchmarks.md.
"""

import argparse
import base64
import datetime
import json
import math
import os
import socket
import statistics
import subprocess
import sys
import threading
import time

MARK = b"kiln-init: boot mark"
POLL = 0.010
MB = 1000 * 1000
MIB = 1 << 20


class BenchError(Exception):
    pass


def now():
    return time.perf_counter()      # CLOCK_MONOTONIC on Linux


# ---- JSON-RPC over the control socket -----------------------------------

class Rpc:
    """One connection; one request at a time unless the caller reads
    notifications itself (recv)."""

    def __init__(self, path, timeout):
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.s.settimeout(timeout)
        try:
            self.s.connect(path)
        except OSError:
            self.s.close()
            raise
        self.buf = bytearray()
        self.pos = 0            # start of the first unread line in buf
        self.next_id = 0

    def close(self):
        self.s.close()

    def send(self, method, params=None):
        self.next_id += 1
        msg = {"jsonrpc": "2.0", "id": self.next_id, "method": method}
        if params is not None:
            msg["params"] = params
        self.s.sendall(json.dumps(msg, separators=(",", ":")).encode()
                       + b"\n")
        return self.next_id

    def send_body(self, method, params, body):
        """A request whose raw body follows its line (fs.write with
        size: Documentation/api.md)."""
        self.next_id += 1
        msg = {"jsonrpc": "2.0", "id": self.next_id, "method": method,
               "params": dict(params, size=len(body))}
        self.s.sendall(json.dumps(msg, separators=(",", ":")).encode()
                       + b"\n")
        self.s.sendall(body)
        return self.next_id

    def recv(self):
        """The next message, as a dict."""
        while True:
            i = self.buf.find(b"\n", self.pos)
            if i >= 0:
                line = self.buf[self.pos:i]
                self.pos = i + 1
                return json.loads(line)
            if self.pos:            # compact only when nothing is left
                del self.buf[:self.pos]
                self.pos = 0
            chunk = self.s.recv(1 << 20)
            if not chunk:
                raise BenchError("the control socket closed")
            self.buf += chunk

    def recv_body(self, n):
        """The n raw bytes after the last line recv returned (fs.chunk
        with size: fs.readFile with raw, Documentation/api.md)."""
        while len(self.buf) - self.pos < n:
            chunk = self.s.recv(1 << 20)
            if not chunk:
                raise BenchError("the control socket closed in a body")
            self.buf += chunk
        body = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        return body

    def call(self, method, params=None):
        """The result of one request; notifications in between are
        dropped; an error answer raises."""
        rid = self.send(method, params)
        while True:
            m = self.recv()
            if m.get("id") != rid:
                continue
            if "error" in m:
                raise BenchError(f"{method}: {m['error']}")
            return m["result"]


# ---- one VM -------------------------------------------------------------

class Vm:
    def __init__(self, a):
        self.a = a
        self.sock = os.path.join(a.dir, "ctl.sock")
        self.console = bytearray()
        self.t_mark = None
        self.proc = None
        self.t0 = None

    def _reader(self):
        f = self.proc.stdout
        tail = b""
        while True:
            chunk = os.read(f.fileno(), 65536)
            if not chunk:
                return
            t = now()
            if self.t_mark is None and MARK in tail + chunk:
                self.t_mark = t - self.t0
            tail = (tail + chunk)[-64:]
            self.console += chunk
            if len(self.console) > 65536:
                del self.console[:-32768]

    def start(self):
        a = self.a
        try:
            os.unlink(self.sock)
        except FileNotFoundError:
            pass
        argv = [a.vmm, "start", "--kernel", a.kernel, "--initrd", a.initrd,
                "--rootfs", a.rootfs, "--cpus", str(a.cpus), "--memory",
                str(a.memory), "--cmdline", "kiln.bootmark",
                "--control-socket", self.sock]
        self.err = open(os.path.join(a.dir, "vmm.stderr"), "wb")
        self.t0 = now()
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=self.err)
        self.thread = threading.Thread(target=self._reader, daemon=True)
        self.thread.start()

    def wait_ready(self):
        """Poll every 10 ms: connect, then vm.status on that connection
        until agent is "ready". Returns (t_socket, t_ready, polls)."""
        a = self.a
        rpc = None
        t_sock = None
        polls = 0
        tick = self.t0
        while True:
            t = now()
            if t - self.t0 > a.timeout:
                raise BenchError(f"agent not ready after {a.timeout} s")
            if self.proc.poll() is not None:
                raise BenchError(f"vmm exited {self.proc.returncode} "
                                 "before the agent was ready")
            if rpc is None:
                try:
                    rpc = Rpc(self.sock, a.timeout)
                except OSError:
                    rpc = None
            if rpc is not None:
                polls += 1
                st = rpc.call("vm.status")
                t = now()
                if t_sock is None:
                    t_sock = t - self.t0
                if st.get("agent") == "ready":
                    self.rpc = rpc
                    return t_sock, t - self.t0, polls
            tick += POLL
            t = now()
            while tick < t:
                tick += POLL
            time.sleep(tick - t)

    def stop(self):
        """vm.shutdown, then wait for the process. Returns seconds from
        the request to the exit, and the exit status."""
        t = now()
        try:
            self.rpc.call("vm.shutdown")
        finally:
            self.rpc.close()
        try:
            rc = self.proc.wait(self.a.timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise BenchError("vmm did not exit after vm.shutdown")
        dt = now() - t
        self.thread.join(5)
        self.err.close()
        return dt, rc

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                print(f"bench-agent: vmm (pid {self.proc.pid}) survives "
                      "SIGKILL", file=sys.stderr)

    def diag(self):
        try:
            with open(os.path.join(self.a.dir, "vmm.stderr"), "rb") as f:
                err = f.read()[-2000:]
        except OSError:
            err = b""
        con = bytes(self.console[-2000:])
        return ("--- console (tail) ---\n" +
                con.decode(errors="replace") +
                "\n--- vmm stderr (tail) ---\n" +
                err.decode(errors="replace"))


# ---- workloads ----------------------------------------------------------

def exec_true(rpc):
    t = now()
    r = rpc.call("exec", {"argv": ["true"]})
    dt = now() - t
    if r.get("exitCode") != 0:
        raise BenchError(f"exec true: {r}")
    return dt


def exec_loop(rpc, n, warmup):
    for _ in range(warmup):
        exec_true(rpc)
    return [exec_true(rpc) for _ in range(n)]


def exec_big(rpc, nbytes, n):
    """exec of `head -c nbytes /dev/zero` (exec keeps at most 1 MiB)."""
    out = []
    for _ in range(n):
        t = now()
        r = rpc.call("exec", {"argv": ["head", "-c", str(nbytes),
                                       "/dev/zero"]})
        dt = now() - t
        got = len(base64.b64decode(r["stdout"]))
        if r.get("exitCode") != 0 or got != nbytes:
            raise BenchError(f"exec head -c {nbytes}: exit "
                             f"{r.get('exitCode')}, {got} bytes")
        out.append(dt)
    return out


def stream(rpc, nbytes):
    """spawn `head -c nbytes /dev/zero`: stdout arrives as stream.stdout
    notifications, base64, decoded here. Time from sending spawn to
    stream.exit."""
    c0 = time.process_time()
    t = now()
    rid = rpc.send("spawn", {"argv": ["head", "-c", str(nbytes), "/dev/zero"],
                             "stdin": False})
    sid = None
    early = []                  # notifications before the result
    got = chunks = biggest = 0
    t_first = None
    exit_params = None
    while exit_params is None:
        m = rpc.recv()
        if m.get("id") == rid:
            if "error" in m:
                raise BenchError(f"spawn: {m['error']}")
            sid = m["result"]["stream"]
            msgs, early = early, []
        elif "method" in m and sid is None:
            early.append(m)
            continue
        elif "method" in m:
            msgs = [m]
        else:
            continue
        for mm in msgs:
            p = mm.get("params", {})
            if p.get("stream") != sid:
                continue
            if mm["method"] == "stream.stdout":
                d = base64.b64decode(p["data"])
                if t_first is None:
                    t_first = now() - t
                got += len(d)
                chunks += 1
                biggest = max(biggest, len(d))
            elif mm["method"] == "stream.exit":
                exit_params = p
                break
    dt = now() - t
    cpu = time.process_time() - c0
    if exit_params.get("exitCode") != 0 or got != nbytes:
        raise BenchError(f"spawn head -c {nbytes}: {exit_params}, "
                         f"{got} bytes")
    return {"bytes": got, "seconds": dt, "first_byte": t_first,
            "chunks": chunks, "max_chunk": biggest, "client_cpu": cpu}


def cli_stream(vmmctl, sock, nbytes):
    """`vmmctl exec SOCK -- head -c nbytes /dev/zero` into a pipe that
    we count: the C client (spawn, base64 decoded by vmmctl)."""
    t = now()
    p = subprocess.Popen([vmmctl, "exec", sock, "--", "head", "-c",
                          str(nbytes), "/dev/zero"],
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    got = 0
    while True:
        d = os.read(p.stdout.fileno(), 1 << 20)
        if not d:
            break
        got += len(d)
    err = p.stderr.read()
    rc = p.wait()
    dt = now() - t
    if rc != 0 or got != nbytes:
        raise BenchError(f"vmmctl exec head -c {nbytes}: exit {rc}, {got} "
                         f"bytes: {err.decode(errors='replace')}")
    return {"bytes": got, "seconds": dt}


def cli_exec(vmmctl, sock, n):
    out = []
    for _ in range(n):
        t = now()
        r = subprocess.run([vmmctl, "exec", sock, "--", "true"],
                           stdin=subprocess.DEVNULL, capture_output=True)
        dt = now() - t
        if r.returncode != 0:
            raise BenchError(f"vmmctl exec true: exit {r.returncode}: "
                             f"{r.stderr.decode(errors='replace')}")
        out.append(dt)
    return out


def cmd_boot(a):
    vm = Vm(a)
    rec = {}
    step = "boot"
    try:
        vm.start()
        t_sock, t_ready, polls = vm.wait_ready()
        rec.update(socket=t_sock, ready=t_ready, polls=polls,
                   mark=vm.t_mark)
        step = "first exec"
        rec["first_exec"] = exec_true(vm.rpc)
        if a.execs:
            step = f"{a.execs} x exec true"
            rec["exec"] = exec_loop(vm.rpc, a.execs, a.warmup)
        if a.big_execs:
            step = "exec head -c 1M"
            rec["exec_1m"] = exec_big(vm.rpc, MIB, a.big_execs)
        if a.stream_bytes:
            step = "spawn head"
            rec["stream"] = stream(vm.rpc, a.stream_bytes)
        if a.cli_execs:
            step = "vmmctl exec true"
            rec["cli_exec"] = cli_exec(a.vmmctl, vm.sock, a.cli_execs)
        if a.stream_bytes and a.vmmctl:
            step = "vmmctl exec head"
            rec["cli_stream"] = cli_stream(a.vmmctl, vm.sock, a.stream_bytes)
        step = "vm.shutdown"
        rec["shutdown"], rc = vm.stop()
        if rc != 0:
            raise BenchError(f"vmm start exited {rc} after vm.shutdown")
    except (BenchError, OSError, ValueError, KeyError) as e:
        vm.kill()
        print(f"bench-agent: {step}: {e}\n{vm.diag()}", file=sys.stderr)
        return 1
    print(json.dumps(rec))
    return 0


def cmd_run(a):
    """For reference: bench-boot's configuration, `vmm run` with the
    initramfs only (no root disk, no vsock, no agent), `-- true`: spawn
    to the console mark, and to the exit."""
    vm = Vm(a)
    argv = [a.vmm, "run", "--kernel", a.kernel, "--initrd", a.initrd,
            "--cpus", str(a.cpus), "--memory", str(a.memory), "--cmdline",
            "kiln.bootmark", "--", "true"]
    vm.err = open(os.path.join(a.dir, "vmm.stderr"), "wb")
    vm.t0 = now()
    vm.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=vm.err)
    vm.thread = threading.Thread(target=vm._reader, daemon=True)
    vm.thread.start()
    try:
        rc = vm.proc.wait(a.timeout)
    except subprocess.TimeoutExpired:
        vm.kill()
        rc = None
    t_exit = now() - vm.t0
    vm.thread.join(5)
    vm.err.close()
    if rc != 0 or vm.t_mark is None:
        print(f"bench-agent: vmm run -- true: exit {rc}, mark "
              f"{vm.t_mark}\n{vm.diag()}", file=sys.stderr)
        return 1
    print(json.dumps({"run_mark": vm.t_mark, "run_exit": t_exit}))
    return 0


# ---- report -------------------------------------------------------------

def pct(v, p):
    """Nearest-rank percentile."""
    s = sorted(v)
    return s[max(0, math.ceil(p / 100 * len(s)) - 1)]


def fmt_ms(x):
    return f"{x * 1000:.0f}" if x >= 0.1 else f"{x * 1000:.2f}"


def cmd_report(a):
    runs = []
    with open(a.runs) as f:
        for line in f:
            if line.strip():
                runs.append(json.loads(line))
    if not runs:
        print("bench-agent: no runs to report", file=sys.stderr)
        return 1
    rows = []

    def add(name, v, fmt=fmt_ms):
        v = [x for x in v if x is not None]
        if not v:
            rows.append((name, "-", "-", "-", "-", "-", "0"))
            return
        rows.append((name, fmt(statistics.median(v)), fmt(min(v)),
                     fmt(statistics.fmean(v)),
                     fmt(pct(v, 99)) if len(v) >= 100 else "-",
                     fmt(max(v)), str(len(v))))

    ref = [r for r in runs if "run_mark" in r]
    runs = [r for r in runs if "ready" in r]
    add("vmm start: spawn to init mark (ms)", [r.get("mark") for r in runs])
    add("  to control socket answering (ms)", [r["socket"] for r in runs])
    add("  to agent ready (ms)", [r["ready"] for r in runs])
    add("first exec true after ready (ms)", [r["first_exec"] for r in runs])
    add("vm.shutdown to exit (ms)", [r["shutdown"] for r in runs])
    if ref:
        add("ref. vmm run -- true: to init mark (ms)",
            [r["run_mark"] for r in ref])
        add("  to exit (ms)", [r["run_exit"] for r in ref])
    w = [r for r in runs if "exec" in r]
    for r in w:
        add("exec true round trip (ms)", r["exec"])
        if "exec_1m" in r:
            add("exec head -c 1M round trip (ms)", r["exec_1m"])
        if "cli_exec" in r:
            add("vmmctl exec -- true (ms)", r["cli_exec"])

    print(f"Kiln guest agent benchmark, "
          f"{datetime.datetime.now().astimezone():%Y-%m-%d %H:%M %Z}")
    for line in a.header:
        print(line)
    print()
    head = ("metric", "median", "min", "mean", "p99", "max", "n")
    widths = [max(len(r[i]) for r in [head] + rows) for i in range(7)]
    for r in [head] + rows:
        print("  ".join(x.ljust(w) if i == 0 else x.rjust(w)
                        for i, (x, w) in enumerate(zip(r, widths))).rstrip())
    for r in w:
        if "exec_1m" in r:
            m = statistics.median(r["exec_1m"])
            print(f"\nexec with 1 MiB of stdout: {MIB / m / MB:.1f} MB/s "
                  f"(median of {len(r['exec_1m'])})")
        s = r.get("stream")
        if s:
            print(f"\nstdout streaming (spawn `head -c {s['bytes']} "
                  f"/dev/zero`, stream.stdout notifications, base64 "
                  f"decoded):\n"
                  f"  {s['bytes'] / s['seconds'] / MB:.1f} MB/s "
                  f"({s['bytes'] / s['seconds'] / MIB:.1f} MiB/s): "
                  f"{s['bytes']} bytes in {s['seconds']:.2f} s, first "
                  f"byte after {s['first_byte'] * 1000:.0f} ms, "
                  f"{s['chunks']} notifications of up to "
                  f"{s['max_chunk']} bytes; client CPU "
                  f"{s['client_cpu']:.2f} s "
                  f"({100 * s['client_cpu'] / s['seconds']:.0f} % of the "
                  f"elapsed time)")
        s = r.get("cli_stream")
        if s:
            print(f"  vmmctl exec -- head -c {s['bytes']} /dev/zero (the C "
                  f"client, into a pipe): "
                  f"{s['bytes'] / s['seconds'] / MB:.1f} MB/s "
                  f"({s['seconds']:.2f} s, including vmmctl's start)")
    return 0


def main():
    p = argparse.ArgumentParser(prog="bench-agent-client.py")
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("boot")
    b.add_argument("--vmm", required=True)
    b.add_argument("--vmmctl")
    b.add_argument("--kernel", required=True)
    b.add_argument("--initrd", required=True)
    b.add_argument("--rootfs", required=True)
    b.add_argument("--dir", required=True, help="scratch directory")
    b.add_argument("--cpus", type=int, default=1)
    b.add_argument("--memory", type=int, default=256)
    b.add_argument("--timeout", type=float, default=120)
    b.add_argument("--execs", type=int, default=0)
    b.add_argument("--warmup", type=int, default=20)
    b.add_argument("--big-execs", type=int, default=0)
    b.add_argument("--stream-bytes", type=int, default=0)
    b.add_argument("--cli-execs", type=int, default=0)
    b2 = sub.add_parser("run")
    for opt in ("--vmm", "--kernel", "--initrd", "--dir"):
        b2.add_argument(opt, required=True)
    b2.add_argument("--cpus", type=int, default=1)
    b2.add_argument("--memory", type=int, default=256)
    b2.add_argument("--timeout", type=float, default=120)
    r = sub.add_parser("report")
    r.add_argument("--header", action="append", default=[])
    r.add_argument("runs")
    a = p.parse_args()
    if a.cmd == "boot":
        if a.cli_execs and not a.vmmctl:
            p.error("--cli-execs needs --vmmctl")
        return cmd_boot(a)
    if a.cmd == "run":
        return cmd_run(a)
    return cmd_report(a)


if __name__ == "__main__":
    sys.exit(main())
