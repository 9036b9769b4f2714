#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""The network tests' HTTPS upstream (selftests/kvm/net.c): serves one
JSON body on ADDR:PORT with CERT/KEY, appending each request's line and
headers to LOG, one "name: value" a line and a blank line after each
request. Runs until killed; prints "ready" once it listens."""
import http.server
import socketserver
import ssl
import sys

addr, port, cert, key, log = sys.argv[1], int(sys.argv[2]), *sys.argv[3:6]
BODY = b'{"login": "kiln-test-user"}\n'


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        with open(log, "a") as f:
            f.write(self.requestline + "\n")
            for name, value in self.headers.items():
                f.write(f"{name.lower()}: {value}\n")
            f.write("\n")
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(BODY)))
        self.end_headers()
        self.wfile.write(BODY)

    def log_message(self, *args):
        pass


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(cert, key)
srv = Server((addr, port), Handler)
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
print("ready", flush=True)
srv.serve_forever()
