#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""tools/bench-agent-wire.py - the guest agent under Kiln and under QEMU
microvm's vhost-vsock, in one run (issue 37 item 3).

Usage: bench-agent-wire.py [--rounds N] [--execs N] [--mib N]
                           [--qemu BIN] [--cid N] [--vmm BIN]
                           [--json FILE] [O]

The same guest under both: O/guest/vmlinux (QEMU: through PVH) and its
initramfs, 1 vCPU, 256 MiB, kiln.agent=on, `-- sleep`. The agent listens
on vsock port 1024 and speaks its own frames (Documentation/
agent-protocol.md); this client speaks them too, one connection per
request as the protocol has it:

  kiln-wire  vmm run --vsock-socket S: the host connects to S and says
             `CONNECT 1024` (Kiln's user-space virtio-vsock device);
  qemu-wire  -device vhost-vsock-device,guest-cid=N: AF_VSOCK to (N,
             1024), the kernel's vhost-vsock;
  kiln-api   vmm start (the same initramfs, the kiln-test image on
             virtio-blk) and its JSON-RPC control socket, which the vmm
             serves by speaking the same frames to the agent: exec,
             spawn's stream.stdout, fs.writeFile with stream, then
             fs.write three ways: 48 KiB base64 chunks, 4 in flight (what
             vmmctl cp did), the same as raw bodies (fs.write {stream,
             size} and the bytes after the line), 256 KiB raw
             bodies, 4 in flight, and 1 MiB bodies (the largest), 4 in
             flight (what vmmctl cp and the SDK send now);
             and fs.readFile with stream two ways: fs.chunk notifications
             with base64 data, and with raw (each chunk's line says its
             size, its bytes follow: what vmmctl cp and the SDK ask for).

All three VMs run at once; each round runs every workload on each, the
order rotating: N exec calls of `true` (each a new connection; the
round trip is connect to exit code), `head -c MiB /dev/zero` with its
stdout read to the end, a MiB file written to /tmp and read back.
Medians and ranges over the rounds; exec p50 and p99 over all the
calls. Needs /dev/kvm and /dev/vhost-vsock (the vhost_vsock module);
without hardware KVM it re-runs itself through tools/vmtest. Exit 1 if
a VM or a workload failed, 2 on usage errors.
"""

import argparse
import base64
import datetime
import importlib.machinery
import importlib.util
import json
import os
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
MIB = 1 << 20
MB = 1000 * 1000

# proto/agent.h
AGENT_PORT = 1024
F_EOF = 1
HELLO, ERROR, RESULT = 1, 2, 3
PROC_START, PROC_STARTED, PROC_STDOUT, PROC_STDERR, PROC_EXIT = (
    16, 17, 19, 20, 23)
FS_READ, FS_WRITE, FS_DATA = 34, 35, 39
T_ERRNO, T_MESSAGE, T_ARG, T_EXIT_CODE = 3, 5, 16, 24
T_PATH, T_CREATE_PARENTS, T_SIZE = 32, 38, 41
DATA_CHUNK = 64 * 1024          # KILN_DATA_CHUNK
API_CHUNK = 48 * 1024           # vmmctl cp's fs.write chunks (base64)
API_BODY_CHUNK = 256 * 1024     # a raw body of a quarter of the most
API_IN_FLIGHT = 4
# The API's file write: (result key, row label, chunk, raw body or base64)
API_WRITES = (("write", "base64 48 KiB x4", API_CHUNK, False),
              ("write_body48", "raw body 48 KiB x4", API_CHUNK, True),
              ("write_body", "raw body 256 KiB x4", API_BODY_CHUNK, True),
              ("write_body1m", "raw body 1 MiB x4", MIB, True))
# The API's file read: (result key, row label, raw chunks or base64)
API_READS = (("read", "base64 fs.chunk", False),
             ("read_raw", "raw fs.chunk bodies", True))
FILE = "/tmp/bench-agent-wire.bin"
# Where QEMU microvm puts the one virtio-mmio device (QEMU 7.2).
QEMU_VIRTIO_MMIO = "virtio_mmio.device=512@0xfeb00e00:12"


def load(name, path):
    spec = importlib.util.spec_from_loader(
        name, importlib.machinery.SourceFileLoader(name, path))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


bb = load("bench_boot", os.path.join(HERE, "bench-boot"))
client = load("bench_agent_client", os.path.join(HERE,
                                                 "bench-agent-client.py"))
BenchError = client.BenchError
now = time.perf_counter


def die(msg, code=1):
    print(f"bench-agent-wire: {msg}", file=sys.stderr)
    sys.exit(code)


# ---- the agent's frames -------------------------------------------------

def tlv(tag, value):
    if isinstance(value, int):
        value = struct.pack("<Q", value)
    elif isinstance(value, str):
        value = value.encode()
    return struct.pack("<HHI", tag, 0, len(value)) + value


def fields(payload):
    out, off = {}, 0
    while off + 8 <= len(payload):
        tag, _, n = struct.unpack_from("<HHI", payload, off)
        v = payload[off + 8:off + 8 + n]
        out.setdefault(tag, v)
        off += 8 + n
    return out


def u64(f, tag):
    return struct.unpack("<Q", f[tag])[0] if tag in f else None


class Conn:
    """One connection to the agent: the socket is connected and, for
    Kiln, the CONNECT line answered; HELLO read."""

    def __init__(self, sock):
        self.s = sock
        self.r = sock.makefile("rb", buffering=1 << 20)
        t, _, _ = self.frame()
        if t != HELLO:
            raise BenchError(f"the agent said {t} before HELLO")

    def send(self, typ, payload=b"", flags=0):
        self.s.sendall(struct.pack("<IHH", len(payload), typ, flags) +
                       payload)

    def frame(self):
        hdr = self.r.read(8)
        if len(hdr) < 8:
            raise BenchError("the agent closed the connection")
        n, typ, flags = struct.unpack("<IHH", hdr)
        payload = self.r.read(n) if n else b""
        if len(payload) != n:
            raise BenchError("the agent closed the connection mid-frame")
        if typ == ERROR:
            f = fields(payload)
            raise BenchError(f"agent ERROR {u64(f, T_ERRNO)}: "
                             f"{f.get(T_MESSAGE, b'').decode()}")
        return typ, flags, payload

    def close(self):
        self.r.close()
        self.s.close()


class Wire:
    """How to reach the agent: Kiln's Unix socket or AF_VSOCK."""

    def __init__(self, kind, where, timeout):
        self.kind, self.where, self.timeout = kind, where, timeout

    def connect(self):
        if self.kind == "kiln":
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(self.timeout)
            s.connect(self.where)
            s.sendall(f"CONNECT {AGENT_PORT}\n".encode())
            line = b""
            while not line.endswith(b"\n"):
                c = s.recv(1)
                if not c:
                    s.close()
                    raise ConnectionResetError("no OK")
                line += c
            if not line.startswith(b"OK "):
                s.close()
                raise BenchError(f"CONNECT answered {line!r}")
        else:
            s = socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)
            s.settimeout(self.timeout)
            s.connect((self.where, AGENT_PORT))
        return Conn(s)

    def wait_ready(self, proc, deadline):
        while True:
            if proc.poll() is not None:
                raise BenchError(f"{self.kind} exited {proc.returncode} "
                                 "before the agent answered")
            try:
                c = self.connect()
                c.close()
                return
            except (OSError, BenchError):
                if now() > deadline:
                    raise BenchError(f"{self.kind}: the agent did not "
                                     "answer")
                time.sleep(0.05)


def wire_exec(w, argv):
    """A process to its end: (seconds, stdout bytes)."""
    t = now()
    c = w.connect()
    try:
        c.send(PROC_START, b"".join(tlv(T_ARG, a) for a in argv))
        got = 0
        while True:
            typ, _, p = c.frame()
            if typ == PROC_STDOUT:
                got += len(p)
            elif typ == PROC_EXIT:
                code = u64(fields(p), T_EXIT_CODE)
                break
    finally:
        c.close()
    dt = now() - t
    if code != 0:
        raise BenchError(f"{' '.join(argv)}: exit {code}")
    return dt, got


def wire_write(w, nbytes):
    chunk = bytes(DATA_CHUNK)
    t = now()
    c = w.connect()
    try:
        c.send(FS_WRITE, tlv(T_PATH, FILE) + tlv(T_CREATE_PARENTS, 1))
        left = nbytes
        while left:
            n = min(left, DATA_CHUNK)
            left -= n
            c.send(FS_DATA, chunk[:n], F_EOF if not left else 0)
        typ, _, p = c.frame()
        size = u64(fields(p), T_SIZE)
    finally:
        c.close()
    dt = now() - t
    if typ != RESULT or size != nbytes:
        raise BenchError(f"FS_WRITE: {typ}, {size} bytes")
    return dt


def wire_read(w, nbytes):
    t = now()
    c = w.connect()
    got = 0
    try:
        c.send(FS_READ, tlv(T_PATH, FILE))
        while True:
            typ, _, p = c.frame()
            if typ == FS_DATA:
                got += len(p)
            elif typ == RESULT:
                break
    finally:
        c.close()
    dt = now() - t
    if got != nbytes:
        raise BenchError(f"FS_READ: {got} bytes")
    return dt


# ---- the JSON-RPC side (kiln-api) ---------------------------------------

def api_exec(rpc):
    return client.exec_true(rpc)


def api_stream(rpc, nbytes):
    return client.stream(rpc, nbytes)["seconds"]


def api_write(rpc, nbytes, chunk, raw):
    full = bytes(chunk) if raw else base64.b64encode(bytes(chunk)).decode()
    t = now()
    sid = rpc.call("fs.writeFile", {"path": FILE, "stream": True,
                                    "createParents": True})["stream"]
    sent = acked = 0
    inflight = set()
    while acked < sent or sent * chunk < nbytes:
        while (len(inflight) < API_IN_FLIGHT and
               sent * chunk < nbytes):
            n = min(chunk, nbytes - sent * chunk)
            if raw:
                d = full if n == chunk else bytes(n)
                inflight.add(rpc.send_body("fs.write", {"stream": sid}, d))
            else:
                d = full if n == chunk else base64.b64encode(
                    bytes(n)).decode()
                inflight.add(rpc.send("fs.write",
                                      {"stream": sid, "data": d}))
            sent += 1
        m = rpc.recv()
        if m.get("id") in inflight:
            if "error" in m:
                raise BenchError(f"fs.write: {m['error']}")
            inflight.discard(m["id"])
            acked += 1
    size = rpc.call("fs.close", {"stream": sid}).get("size")
    dt = now() - t
    if size != nbytes:
        raise BenchError(f"fs.close: {size} bytes")
    return dt


def api_read(rpc, nbytes, raw):
    t = now()
    rid = rpc.send("fs.readFile", {"path": FILE, "stream": True,
                                   "raw": raw})
    got = 0
    while True:
        m = rpc.recv()
        if m.get("method") == "fs.chunk" and "size" in m.get("params", {}):
            body = rpc.recv_body(m["params"]["size"])
            if m["params"].get("id") == rid:
                got += len(body)
        elif m.get("method") == "fs.chunk" and \
                m.get("params", {}).get("id") == rid:
            got += len(base64.b64decode(m["params"]["data"]))
        elif m.get("id") == rid:
            if "error" in m:
                raise BenchError(f"fs.readFile: {m['error']}")
            break
    dt = now() - t
    if got != nbytes:
        raise BenchError(f"fs.readFile: {got} bytes")
    return dt


# ---- the VMs ------------------------------------------------------------

def kiln_wire_vm(a, d):
    sock = os.path.join(d, "v.sock")
    argv = [a.vmm, "run", "--kernel", a.kernel, "--initrd", a.initrd,
            "--cpus", "1", "--memory", str(a.memory), "--vsock-socket",
            sock, "--cmdline", "kiln.agent=on", "--", "sleep", "100000"]
    return argv, Wire("kiln", sock, a.timeout)


def qemu_vm(a, d):
    # microvm would append the device's virtio_mmio.device= after the
    # command's "--" (auto-kernel-cmdline): given here, before it.
    append = " ".join([bb.KILN_CMDLINE, "kiln.console=raw", "kiln.agent=on",
                       QEMU_VIRTIO_MMIO, "--", "sleep", "100000"])
    argv = [a.qemu, "-M", a.qemu_machine, "-accel", "kvm", "-cpu", "host",
            "-smp", "1", "-m", str(a.memory), "-nodefaults",
            "-no-user-config", "-display", "none", "-serial", "stdio",
            "-no-reboot", "-kernel", a.qemu_kernel, "-initrd", a.initrd,
            "-append", append,
            "-device", f"vhost-vsock-device,guest-cid={a.cid}"]
    return argv, Wire("qemu", a.cid, a.timeout)


class ApiArgs:
    pass


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, max(0, int(round(p / 100 * len(v) + 0.5)) - 1))]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("O", nargs="?", default="build")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--execs", type=int, default=100)
    p.add_argument("--mib", type=int, default=64)
    p.add_argument("--memory", type=int, default=256)
    p.add_argument("--cid", type=int, default=42)
    p.add_argument("--timeout", type=int, default=120)
    p.add_argument("--qemu", default="qemu-system-x86_64")
    p.add_argument("--qemu-machine",
                   default="microvm,x-option-roms=off,isa-serial=on,"
                           "rtc=off,acpi=off,auto-kernel-cmdline=off")
    p.add_argument("--image", default="kiln-test")
    p.add_argument("--vmm", help="another vmm binary than O/vmm")
    p.add_argument("--json")
    a = p.parse_args()
    if a.rounds < 1 or a.execs < 1 or a.mib < 1:
        die("--rounds, --execs and --mib want 1 or more", 2)
    O = a.O
    a.vmm = a.vmm or os.path.join(O, "vmm")
    a.kernel = os.path.join(O, "guest", "vmlinux")
    a.initrd = os.path.join(O, "guest", "initramfs.cpio")
    a.rootfs = os.path.join(O, "images", a.image + ".json")
    a.qemu_kernel = (a.kernel if bb.has_pvh_note(a.kernel)
                     else os.path.join(O, "guest", "bzImage"))
    missing = [f for f in (a.vmm, a.kernel, a.initrd, a.rootfs,
                           a.qemu_kernel) if not os.path.exists(f)]
    if missing:
        die(f"missing {', '.join(missing)} (make && make guest O={O})")
    if not (os.path.exists("/dev/kvm") and
            (os.path.isdir("/sys/module/kvm_intel") or
             os.path.isdir("/sys/module/kvm_amd"))):
        if os.environ.get("KILN_IN_HARNESS") != "1":
            vmtest = os.path.join(HERE, "vmtest")
            limit = 900 + a.rounds * (a.execs + a.mib * 3)
            os.execv(vmtest, [vmtest, "--timeout", str(limit),
                              sys.executable, os.path.abspath(__file__)] +
                     sys.argv[1:])
        die("/dev/kvm is missing or not backed by kvm_intel/kvm_amd")
    subprocess.run(["modprobe", "-q", "vhost_vsock"], check=False)
    if not os.path.exists("/dev/vhost-vsock"):
        die("/dev/vhost-vsock is missing (modprobe vhost_vsock)")
    nbytes = a.mib * MIB
    tmp = tempfile.mkdtemp(prefix="kiln-bench-agent-wire.")
    procs, ok = [], False
    try:
        sides = {}
        for name, make in (("kiln-wire", kiln_wire_vm), ("qemu-wire",
                                                         qemu_vm)):
            d = os.path.join(tmp, name)
            os.mkdir(d)
            argv, w = make(a, d)
            con = open(os.path.join(d, "console"), "wb")
            pr = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                                  stdout=con, stderr=subprocess.STDOUT)
            procs.append((name, pr, d))
            sides[name] = (w, pr)
        aa = ApiArgs()
        aa.vmm, aa.kernel, aa.initrd, aa.rootfs = (a.vmm, a.kernel,
                                                   a.initrd, a.rootfs)
        aa.cpus, aa.memory, aa.timeout = 1, a.memory, a.timeout
        aa.dir = os.path.join(tmp, "kiln-api")
        os.mkdir(aa.dir)
        vm = client.Vm(aa)
        vm.start()
        deadline = now() + a.timeout
        for name, (w, pr) in sides.items():
            w.wait_ready(pr, deadline)
        vm.wait_ready()
        rpc = vm.rpc
        names = ["kiln-wire", "qemu-wire", "kiln-api"]
        res = {n: {"exec": [], "stream": [], "write": [], "read": []}
               for n in names}
        for key, _, _, _ in API_WRITES:
            res["kiln-api"][key] = []
        for key, _, _ in API_READS:
            res["kiln-api"][key] = []
        for r in range(a.rounds):
            order = names[r % 3:] + names[:r % 3]
            print(f"bench-agent-wire: round {r + 1}/{a.rounds}: "
                  f"{', '.join(order)}", file=sys.stderr)
            for n in order:
                x = res[n]
                if n == "kiln-api":
                    x["exec"] += [api_exec(rpc) for _ in range(a.execs)]
                    x["stream"].append(api_stream(rpc, nbytes))
                    for key, _, chunk, raw in API_WRITES:
                        x[key].append(api_write(rpc, nbytes, chunk, raw))
                    for key, _, raw in API_READS:
                        x[key].append(api_read(rpc, nbytes, raw))
                    continue
                w = sides[n][0]
                x["exec"] += [wire_exec(w, ["true"])[0]
                              for _ in range(a.execs)]
                dt, got = wire_exec(w, ["head", "-c", str(nbytes),
                                        "/dev/zero"])
                if got != nbytes:
                    raise BenchError(f"{n}: head gave {got} bytes")
                x["stream"].append(dt)
                x["write"].append(wire_write(w, nbytes))
                x["read"].append(wire_read(w, nbytes))
        vm.stop()
        ok = True
    except BenchError as e:
        print(f"bench-agent-wire: {e}", file=sys.stderr)
        for name, pr, d in procs:
            try:
                with open(os.path.join(d, "console"), "rb") as f:
                    tail = f.read()[-1500:].decode(errors="replace")
                print(f"--- {name} console (tail) ---\n{tail}",
                      file=sys.stderr)
            except OSError:
                pass
    finally:
        try:
            vm.kill()
        except Exception:
            pass
        for name, pr, d in procs:
            if pr.poll() is None:
                pr.kill()
                pr.wait(10)
        shutil.rmtree(tmp, ignore_errors=True)
    if not ok:
        sys.exit(1)
    report(a, res, nbytes)


def rng(v, scale=1.0, fmt="{:.1f}"):
    v = [x * scale for x in v]
    return (fmt.format(statistics.median(v)) + " [" + fmt.format(min(v)) +
            "-" + fmt.format(max(v)) + "]")


def report(a, res, nbytes):
    names = ["kiln-wire", "qemu-wire", "kiln-api"]
    rate = {n: {k: [nbytes / MB / t for t in res[n][k]]
                for k in ("stream", "write", "read")} for n in names}
    ver = subprocess.run([a.qemu, "-version"], capture_output=True,
                         text=True).stdout.split("\n")[0]
    print("Kiln agent channel against vhost-vsock, "
          + datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M UTC"))
    print(f"guest:   1 vCPU, {a.memory} MiB, {a.kernel} (QEMU: "
          f"{a.qemu_kernel}), {a.initrd}, kiln.agent=on")
    print(f"vmm:     {a.vmm}")
    print(f"qemu:    {ver}; -M {a.qemu_machine}; vhost-vsock-device")
    print(f"method:  {a.rounds} rounds, all three VMs running, order "
          f"rotating; {a.execs} exec of true per round (p50/p99 over all "
          f"{a.rounds * a.execs}); {a.mib} MiB stdout, file write, read "
          f"per round (median [min-max] of the rounds); kiln-api's file "
          f"write row: fs.write in base64, its file read row: base64 "
          f"fs.chunk (all their forms below)")
    w = 22
    print(f"{'metric':34}" + "".join(f"{n:>{w}}" for n in names) +
          f"{'kiln/qemu wire':>16}")

    def row(label, vals, ratio):
        print(f"{label:34}" + "".join(f"{v:>{w}}" for v in vals) +
              f"{ratio:>16.2f}")
    ex = {n: [t * 1000 for t in res[n]["exec"]] for n in names}
    row("exec true p50 (ms)", [f"{pct(ex[n], 50):.2f}" for n in names],
        pct(ex["kiln-wire"], 50) / pct(ex["qemu-wire"], 50))
    row("exec true p99 (ms)", [f"{pct(ex[n], 99):.2f}" for n in names],
        pct(ex["kiln-wire"], 99) / pct(ex["qemu-wire"], 99))
    for k, label in (("stream", f"stdout {a.mib} MiB (MB/s)"),
                     ("write", f"file write {a.mib} MiB (MB/s)"),
                     ("read", f"file read {a.mib} MiB (MB/s)")):
        row(label, [rng(rate[n][k]) for n in names],
            statistics.median(rate["kiln-wire"][k]) /
            statistics.median(rate["qemu-wire"][k]))
    # The API's file write each way, beside the frames' (the ratio).
    wire = statistics.median(rate["kiln-wire"]["write"])
    print(f"kiln-api file write {a.mib} MiB by fs.write form (MB/s; "
          f"last column: / kiln-wire's)")
    for key, label, _, _ in API_WRITES:
        v = [nbytes / MB / t for t in res["kiln-api"][key]]
        print(f"  {label:32}" + f"{'':>{w * 2}}" + f"{rng(v):>{w}}" +
              f"{statistics.median(v) / wire:>16.2f}")
    wire = statistics.median(rate["kiln-wire"]["read"])
    print(f"kiln-api file read {a.mib} MiB by fs.chunk form (MB/s; "
          f"last column: / kiln-wire's)")
    for key, label, _ in API_READS:
        v = [nbytes / MB / t for t in res["kiln-api"][key]]
        print(f"  {label:32}" + f"{'':>{w * 2}}" + f"{rng(v):>{w}}" +
              f"{statistics.median(v) / wire:>16.2f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"date": datetime.datetime.utcnow().isoformat(),
                       "qemu": ver, "rounds": a.rounds, "execs": a.execs,
                       "mib": a.mib, "seconds": res}, f, indent=1)


if __name__ == "__main__":
    main()
