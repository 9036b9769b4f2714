#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""A policy hook that decides interception (Documentation/network.md,
"The hook intercepts"), as selftests/kvm/net_hook.c runs it and as the
seed's network.policy() example reads: a flow to a destination this VM's
DNS bound to API is intercepted ("grant-http", TLS or clear text as the
first bytes say, every request asked, API the one name it may give);
each of its requests goes upstream with a header computed from its URL;
everything else is denied. Standard library only.

    hook-intercept.py SOCKET LOG [API]

LOG gets each line read, and for each request field whose value is not
ASCII, "field NAME HEX": the value's bytes, as the guest sent them."""
import json
import os
import socket
import sys
import urllib.parse

path, log = sys.argv[1], sys.argv[2]
API = sys.argv[3] if len(sys.argv) > 3 else "api.kiln.test"


def note(text):
    with open(log, "a", encoding="utf-8") as f:
        f.write(text + "\n")


def decide(q):
    if q.get("type") == "http":
        # A request of a flow granted below ("flow": that answer's id).
        for name, value in q["headers"]:
            raw = value.encode("latin-1")  # each character one byte
            if not raw.isascii():
                note(f"field {name.lower()} {raw.hex()}")
        if q["destination"]["hostname"] != API:
            return {"verdict": "deny", "reason": "not the api"}
        url = urllib.parse.urlsplit(q["url"])
        target = url.path + ("?" + url.query if url.query else "")
        # No secret in it: it may go in clear text too ("tls": "auto").
        return {"verdict": "grant-http", "flow": q["flow"],
                "set": {"x-kiln-request": q["method"] + " " + target},
                "clearText": True}
    # A new flow: its destination and the names DNS bound it to.
    if q["proto"] == "tcp" and API in q["hostnames"]:
        return {"verdict": "grant-http", "tls": "auto", "ask": "request",
                "host": API}
    return {"verdict": "deny", "reason": "default deny"}


if os.path.exists(path):
    os.unlink(path)
srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
srv.bind(path)
srv.listen()
print("ready", flush=True)
while True:
    conn, _ = srv.accept()  # one VM; again if it reconnects
    with conn, conn.makefile("r", encoding="utf-8") as lines:
        for line in lines:
            note(line.rstrip("\n"))
            q = json.loads(line)
            answer = {"id": q["id"], **decide(q)}
            conn.sendall((json.dumps(answer) + "\n").encode())
