"""An application whose library waits out its own lock timeout (2 s) on every /call, then logs an
ERROR line with its reason (no word "timeout" in it) and answers 500 at that instant. /health answers
at once. Usage: locked_app.py PORT"""
import logging
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
log = logging.getLogger("orders")
# Held for ever by a job that never finishes: every call waits out the library's own 2 s limit.
held = threading.Lock()
held.acquire()


class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def answer(self, status, body):
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path.startswith("/health"):
            return self.answer(200, b"ok")
        if held.acquire(timeout=2):
            held.release()
            return self.answer(200, b"done")
        log.error("could not reserve the stock row for order 42, giving up")
        self.answer(500, b"internal error")

    def log_message(self, *a):
        pass


ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
