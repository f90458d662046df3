"""An HTTP server that starts a child per request and never reaps it: every request to /call
spawns `sleep CHILD_S` (os.posix_spawn, no wait), so the children pile up asleep, and those that
end stay zombies. /health answers at once and spawns nothing. Its own memory stays flat.

usage: child_leak.py PORT CHILD_S"""
import os
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

port, child_s = int(sys.argv[1]), sys.argv[2]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def answer(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n:
            self.rfile.read(n)
        if self.path.startswith("/call"):
            os.posix_spawnp("sleep", ["sleep", child_s], os.environ)
        body = b"ok\n"
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = answer
    do_POST = answer

    def log_message(self, *args):
        pass


ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
