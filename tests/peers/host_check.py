"""An HTTP/1.1 server that answers 200 only to a request whose Host header is the one it expects,
and 421 Misdirected Request to any other: a client that connects to an address must still name the
host it was given.

usage: host_check.py PORT EXPECTED_HOST
"""
import http.server
import sys

port, expected = int(sys.argv[1]), sys.argv[2]


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        ok = self.headers.get("Host") == expected
        body = b"ok\n" if ok else f"wrong Host: {self.headers.get('Host')}\n".encode()
        self.send_response(200 if ok else 421)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
