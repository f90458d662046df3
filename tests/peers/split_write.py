"""Python's standard http.server with keep-alive (protocol_version "HTTP/1.1", as servers built on it
set): BaseHTTPRequestHandler buffers the status line and headers until end_headers() and writes
them, then the handler writes the body: two small writes on a socket without TCP_NODELAY. One
thread per connection. (With the default HTTP/1.0 every request has a new connection, whose first
segments the client ACKs at once: no delayed ACK to wait for, no 40 ms.)

usage: split_write.py PORT [split | chunks N GAP_S | one]
  split         headers, then the body (the standard handler's two writes)   [default]
  chunks N GAP  headers, then a chunked body of N chunks GAP_S seconds apart (a slow stream)
  one           headers and body in one write, TCP_NODELAY set (a healthy server)
"""
import socket
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

port = int(sys.argv[1])
mode = sys.argv[2] if len(sys.argv) > 2 else "split"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def setup(self):
        super().setup()
        if mode == "one":
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, *args):
        pass

    def answer(self):
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        body = b"ok"
        if mode == "chunks":
            n, gap = int(sys.argv[3]), float(sys.argv[4])
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for _ in range(n):
                time.sleep(gap)
                self.wfile.write(b"2\r\nok\r\n")
            self.wfile.write(b"0\r\n\r\n")
            return
        if mode == "one":
            head = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n"
            self.wfile.write(head + body)
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = answer
    do_POST = answer


ThreadingHTTPServer.allow_reuse_address = True
# A healthy backlog: the standard 5 would overflow under a burst of new connections on its own.
ThreadingHTTPServer.request_queue_size = 128
ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
