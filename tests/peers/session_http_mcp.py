"""An MCP server over streamable HTTP on the official Python SDK (PyPI `mcp` 2.x, MCPServer run by
uvicorn through `run("streamable-http")`), with sessions (each `initialize` answer carries an
`Mcp-Session-Id`), whose watchdog may end the first process it runs as.

usage: session_http_mcp.py PORT [--watchdog SECS MARKER]

  --watchdog SECS MARKER  if the file MARKER does not exist: create it, and SECS seconds after the
                          first `echo` was answered end the process with os._exit(124), as a
                          watchdog does (armed by a call, not by the start: a client slow to start
                          on a busy machine still gets its first call answered). A process started
                          when MARKER exists (a restart) has no watchdog.

Tools: `echo` (answers its text), `sleep` (ms).
"""
import asyncio
import os
import sys
import threading
import time

from mcp.server.mcpserver import MCPServer

app = MCPServer("witness-session-http")
# Set once the first `echo` is answered: the watchdog's timer starts then.
called = threading.Event()


@app.tool()
async def echo(text: str = "") -> str:
    """Answers its text."""
    called.set()
    return f"echo {text}"


@app.tool()
async def sleep(ms: int = 100) -> str:
    """Sleeps ms milliseconds."""
    await asyncio.sleep(ms / 1000)
    return f"slept {ms} ms"


def main() -> None:
    args = sys.argv[1:]
    port = int(args[0])
    if "--watchdog" in args:
        i = args.index("--watchdog")
        secs, marker = float(args[i + 1]), args[i + 2]
        if not os.path.exists(marker):
            open(marker, "w").close()

            def fire():
                called.wait()
                time.sleep(secs)
                os._exit(124)

            threading.Thread(target=fire, daemon=True).start()
    print(f"session_http_mcp: pid {os.getpid()} on http://127.0.0.1:{port}/mcp", file=sys.stderr, flush=True)
    app.run("streamable-http", host="127.0.0.1", port=port)


if __name__ == "__main__":
    main()
