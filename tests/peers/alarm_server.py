"""An HTTP server that starts slowly (~0.8 s of set-up, as a heavy import), then listens and arms
signal.alarm(5) as its watchdog: it dies by SIGALRM 5 s after it began listening, not 5 s after it
started. Usage: alarm_server.py PORT"""
import signal
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

time.sleep(0.8)


class H(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *a):
        pass


server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H)
signal.alarm(5)
server.serve_forever()
