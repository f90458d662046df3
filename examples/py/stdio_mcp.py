"""A stdio MCP server (the official SDK v2 MCPServer, once FastMCP) for the tests: tools `echo`,
`slow` (answers after `seconds`, default 1) and `fallback` (every fourth call its backend hangs and
an `asyncio.wait_for` of FALLBACK_S seconds, default 2, answers it from a fallback, successfully).

With WATCHDOG_S set, a startup watchdog arms a timer WATCHDOG_ARM_S seconds after the process
starts (default 0) and, WATCHDOG_S seconds later, logs a line naming it and exits 124 — the 85-second story's
timer that starts with the process, in an MCP server a client launched."""
import asyncio
import os
import sys
import threading
import time

from mcp.server.mcpserver import MCPServer

mcp = MCPServer("witness-test")


@mcp.tool()
def echo(text: str) -> str:
    """Returns the text it was given."""
    return text


@mcp.tool()
def slow(seconds: float = 1.0) -> str:
    """Answers after `seconds`."""
    time.sleep(seconds)
    return f"slept {seconds:g}s"


_fallback_calls = 0


@mcp.tool()
async def fallback() -> str:
    """Asks a backend that hangs one call in four; a timeout answers those from a fallback."""
    global _fallback_calls
    _fallback_calls += 1
    hangs = _fallback_calls % 4 == 1

    async def backend() -> str:
        if hangs:
            await asyncio.sleep(3600)
        return "fresh"

    try:
        return await asyncio.wait_for(backend(), float(os.environ.get("FALLBACK_S", "2")))
    except asyncio.TimeoutError:
        return "cached (the backend timed out)"


def watchdog(arm_s: float, limit_s: float) -> None:
    time.sleep(arm_s)
    time.sleep(limit_s)
    sys.stderr.write(f"watchdog: no shutdown after {limit_s:g}s, force-exiting\n")
    sys.stderr.flush()
    os._exit(124)


if __name__ == "__main__":
    limit = os.environ.get("WATCHDOG_S")
    if limit:
        arm = float(os.environ.get("WATCHDOG_ARM_S", "0"))
        threading.Thread(target=watchdog, args=(arm, float(limit)), daemon=True).start()
    mcp.run(transport="stdio")
