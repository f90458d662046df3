"""A small MCP server over stdio, in plain newline-delimited JSON-RPC (no SDK: it starts and exits in
milliseconds, so its exit lands where the test puts it), for the timers and causes tests.

usage: timer_mcp.py [--watchdog SECS]

  --watchdog SECS  after SECS, end the process silently with os._exit(124), as a watchdog does:
                   no log line, only the status that says a timer fired.

Tools:
  slow    sleeps 30 s, then answers ok (a call the watchdog cuts).
  spread  answers ok after 0.63, 1.37, 0.84, 1.71, 1.12 s, … in turn: a healthy spread of latencies.
  fail    answers at once with a tool error (isError: true).

On EOF from the client (it closed stdin) the server exits 0 at once.
"""
import json
import os
import sys
import threading
import time

SPREAD = [0.63, 1.37, 0.84, 1.71, 1.12, 0.77, 1.49]
TOOLS = [
    {"name": name, "description": name, "inputSchema": {"type": "object", "properties": {}}}
    for name in ("slow", "spread", "fail")
]
out_lock = threading.Lock()
spread_calls = 0


def send(msg):
    with out_lock:
        sys.stdout.write(json.dumps(msg) + "\n")
        sys.stdout.flush()


def text(s, error=False):
    return {"content": [{"type": "text", "text": s}], "isError": error}


def call(req_id, name):
    global spread_calls
    if name == "slow":
        time.sleep(30)
        send({"jsonrpc": "2.0", "id": req_id, "result": text("slow done")})
    elif name == "spread":
        d = SPREAD[spread_calls % len(SPREAD)]
        spread_calls += 1
        time.sleep(d)
        send({"jsonrpc": "2.0", "id": req_id, "result": text(f"took {d}")})
    elif name == "fail":
        send({"jsonrpc": "2.0", "id": req_id, "result": text("Invalid input: no such thing", True)})
    else:
        send({"jsonrpc": "2.0", "id": req_id, "error": {"code": -32602, "message": f"unknown tool {name}"}})


def main():
    args = sys.argv[1:]
    if args[:1] == ["--watchdog"]:
        secs = float(args[1])

        def watchdog():
            time.sleep(secs)
            os._exit(124)

        threading.Thread(target=watchdog, daemon=True).start()
    for line in sys.stdin:
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        method, req_id = msg.get("method"), msg.get("id")
        if req_id is None:
            continue  # a notification
        if method == "initialize":
            version = msg.get("params", {}).get("protocolVersion", "2025-06-18")
            send({
                "jsonrpc": "2.0",
                "id": req_id,
                "result": {
                    "protocolVersion": version,
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": "timer_mcp", "version": "1"},
                },
            })
        elif method == "tools/list":
            send({"jsonrpc": "2.0", "id": req_id, "result": {"tools": TOOLS}})
        elif method == "tools/call":
            name = msg.get("params", {}).get("name")
            threading.Thread(target=call, args=(req_id, name), daemon=True).start()
        elif method == "ping":
            send({"jsonrpc": "2.0", "id": req_id, "result": {}})
        else:
            send({"jsonrpc": "2.0", "id": req_id, "error": {"code": -32601, "message": method}})
    # The client closed stdin: the session is over.
    os._exit(0)


main()
