"""A small HTTP server that logs the way servers written since 2020 do: one JSON object per line
(Go's zap, as a reverse proxy logs) or logfmt, on stderr. For tests/structured_logs.rs.

    structured_log_server.py --format json|logfmt --port N [--give-up-after SECS]

- At start it logs an info line "listening" whose fields name a read timeout (a field, not news).
- `GET /` answers 200 `ok`.
- `--give-up-after SECS`: after SECS it logs an error "net/http: timeout awaiting response
  headers" with `status=504` and a duration field of SECS, and exits 1 (an upstream timer that ends
  the process).
- On SIGTERM it logs the info line "shutting down apps, then terminating" with a `signal` field,
  and exits 0.
"""

import argparse
import http.server
import json
import os
import signal
import sys
import threading
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--format", choices=["json", "logfmt"], required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--give-up-after", type=float)
    args = ap.parse_args()

    def log(level, msg, **fields):
        if args.format == "json":
            line = json.dumps(
                {"level": level, "ts": time.time(), "logger": "http.log", "msg": msg, **fields}
            )
        else:
            parts = [f"ts={time.time():.6f}", f"level={level}", "logger=http.log"]
            for k, v in [("msg", msg), *fields.items()]:
                if isinstance(v, str) and (" " in v or '"' in v or "=" in v):
                    v = '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
                parts.append(f"{k}={v}")
            line = " ".join(parts)
        sys.stderr.write(line + "\n")
        sys.stderr.flush()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = b"ok"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", args.port), Handler)

    def on_term(signum, frame):
        log("info", "shutting down apps, then terminating", signal="SIGTERM")
        os._exit(0)

    signal.signal(signal.SIGTERM, on_term)

    if args.give_up_after is not None:
        secs = args.give_up_after

        def give_up():
            time.sleep(secs)
            duration = secs if args.format == "json" else f"{secs}s"
            log(
                "error",
                "net/http: timeout awaiting response headers",
                request={"method": "GET", "uri": "/upstream"} if args.format == "json" else "GET /upstream",
                duration=duration,
                status=504,
            )
            os._exit(1)

        threading.Thread(target=give_up, daemon=True).start()

    log("info", "listening", addr=f"127.0.0.1:{args.port}", read_timeout="30s")
    server.serve_forever(poll_interval=0.1)


if __name__ == "__main__":
    main()
