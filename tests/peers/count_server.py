"""An HTTP/1.1 keep-alive server that counts, for tests that check what reached the server rather
than what witness says it sent: the connections it accepted, those that carried a request (a
connect-time probe carries none), and the most requests it had in flight at once. Each answer is
one write with TCP_NODELAY (no Nagle wait in the figures).

usage: count_server.py PORT FILE [HOLD_S]
  every request is held HOLD_S seconds (default 0) and answered `ok`; FILE is rewritten at each
  accept and each request's end: "accepted N\nused U\nmost_at_once M\n"
"""
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

port, path = int(sys.argv[1]), sys.argv[2]
hold = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
lock = threading.Lock()
state = {"accepted": 0, "used": 0, "now": 0, "most": 0}


def save():
    with open(path + ".tmp", "w") as f:
        f.write(
            f"accepted {state['accepted']}\nused {state['used']}\n"
            f"most_at_once {state['most']}\n"
        )
    import os

    os.replace(path + ".tmp", path)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def setup(self):
        super().setup()
        self.used = False
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, *args):
        pass

    def do_GET(self):
        with lock:
            if not self.used:
                self.used = True
                state["used"] += 1
            state["now"] += 1
            state["most"] = max(state["most"], state["now"])
        time.sleep(hold)
        with lock:
            state["now"] -= 1
            save()
        self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")


class Server(ThreadingHTTPServer):
    allow_reuse_address = True
    daemon_threads = True

    def process_request(self, request, client_address):
        with lock:
            state["accepted"] += 1
            save()
        super().process_request(request, client_address)


Server(("127.0.0.1", port), Handler).serve_forever()
