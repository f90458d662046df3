"""A stdio MCP server (the official SDK v2 MCPServer, once FastMCP) for the tests: one tool, `echo`.

With WATCHDOG_S set, a startup watchdog arms a timer WATCHDOG_ARM_S seconds after the process
starts (default 0) and, WATCHDOG_S seconds later, logs a line naming it and exits 124 — the seed's
timer that starts with the process, in an MCP server a client launched."""
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
