"""An MCP server on the official Python SDK (MCPServer, FastMCP's new name) over stdio whose first
process has a watchdog: 6 s after it starts (or SECS) it ends with os._exit(124), silently, as a
watchdog does. A restarted process (the marker file exists) has none, so it serves on.

usage: watchdog_sdk_server.py MARKER [SECS]

Tools: `nap` sleeps 30 s in the watchdog's process (a call the watchdog cuts) and answers at once in
a restarted one; `pid` answers the process id (which process served a call).
"""

import asyncio
import os
import sys
import threading
import time

from mcp.server.mcpserver import MCPServer

app = MCPServer("witness-watchdog-example")
marker = sys.argv[1]
secs = float(sys.argv[2]) if len(sys.argv) > 2 else 6.0
armed = not os.path.exists(marker)


@app.tool()
async def nap() -> str:
    """Sleeps 30 s while the watchdog is armed, else answers at once."""
    if armed:
        await asyncio.sleep(30)
        return "woke after 30 s"
    return f"awake in pid {os.getpid()}"


@app.tool()
async def pid() -> str:
    """The serving process's id."""
    return str(os.getpid())


def watchdog():
    time.sleep(secs)
    os._exit(124)


if armed:
    open(marker, "w").close()
    threading.Thread(target=watchdog, daemon=True).start()
app.run("stdio")
