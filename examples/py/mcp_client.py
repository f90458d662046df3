"""The official MCP Python SDK's client, launching a stdio server through `witness wrap`.

usage: mcp_client.py CALLS WITNESS [WRAP ARGS…] -- SERVER…
Initialises a session, calls `echo` CALLS times, then (with WAIT_END=1) keeps calling until the
connection ends. Prints one line per step on stdout: `init ok`, `call N ok`, `ended: …`."""
import os
import sys

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


async def main() -> None:
    calls = int(sys.argv[1])
    cmd = sys.argv[2:]
    params = StdioServerParameters(command=cmd[0], args=cmd[1:], env=dict(os.environ))
    try:
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                print("init ok", flush=True)
                n = 0
                while n < calls or os.environ.get("WAIT_END") == "1":
                    n += 1
                    with anyio.fail_after(20):
                        r = await session.call_tool("echo", {"text": f"hi {n}"})
                    text = r.content[0].text if r.content else ""
                    assert text == f"hi {n}", text
                    print(f"call {n} ok", flush=True)
                    if n >= calls:
                        await anyio.sleep(0.2)
                    if n > 500:
                        break
    except BaseException as e:  # the connection ending is what the watchdog case waits for
        print(f"ended: {type(e).__name__}: {e}", flush=True)
        return
    print("closed by client", flush=True)


anyio.run(main)
