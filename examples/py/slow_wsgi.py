"""A WSGI app for gunicorn in the tests: /health answers at once, anything else sleeps SLOW_S seconds
(default 30) before answering, so a worker timeout shorter than that kills the worker mid-request."""
import os
import time

SLOW_S = float(os.environ.get("SLOW_S", "30"))


def app(environ, start_response):
    if environ.get("PATH_INFO") == "/health":
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"ok\n"]
    time.sleep(SLOW_S)
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"slow\n"]
