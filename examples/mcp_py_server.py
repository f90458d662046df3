"""An MCP server on the official Python SDK (PyPI `mcp` 2.x, MCPServer — FastMCP's new name), so
witness is checked against an implementation nobody here wrote.

    python3 examples/mcp_py_server.py stdio
    python3 examples/mcp_py_server.py http PORT [--stateless] [--json]

Tools: `sleep` (ms, default 100: its own time, no lock, so concurrent calls overlap), `fail`
(isError), `hang` (never answers; a notifications/cancelled for it is logged on stderr).
"""

import asyncio
import sys

from mcp.server.mcpserver import MCPServer

app = MCPServer("witness-py-example")


@app.tool()
async def sleep(ms: int = 100) -> str:
    """Sleeps ms milliseconds without any lock."""
    await asyncio.sleep(ms / 1000)
    return f"slept {ms} ms"


@app.tool()
async def fail() -> str:
    """Answers a tool error (isError: true)."""
    raise RuntimeError("search backend unavailable")


@app.tool()
async def hang() -> str:
    """Never answers until cancelled."""
    try:
        await asyncio.sleep(10**6)
    except asyncio.CancelledError:
        print("mcp_py_server: hang cancelled", file=sys.stderr, flush=True)
        raise
    return "never"


def main() -> None:
    args = sys.argv[1:]
    if not args or args[0] not in ("stdio", "http"):
        print("usage: mcp_py_server.py stdio | http PORT [--stateless] [--json]", file=sys.stderr)
        sys.exit(2)
    if args[0] == "stdio":
        app.run("stdio")
        return
    port = int(args[1])
    print(f"mcp_py_server: http://127.0.0.1:{port}/mcp", file=sys.stderr, flush=True)
    app.run(
        "streamable-http",
        host="127.0.0.1",
        port=port,
        stateless_http="--stateless" in args,
        json_response="--json" in args,
    )


if __name__ == "__main__":
    main()
