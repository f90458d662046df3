"""The official MCP Python SDK's stdio client for a restart: initializes once, lists the tools, then
calls TOOL N times one after another, never initializing again, and says what each call got.

usage: sdk_restart_client.py N TOOL CMD… (CMD: the server, or `witness wrap … -- SERVER`).

Prints `init ok`, then per call `call I ok TEXT SECS` or `call I error TEXT SECS`, and `ended: WHY`
when the session broke (the stream closed, the client's own 20 s limit), else `closed by client`.
"""
import sys
import time

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


def say(s):
    print(s, flush=True)


async def main():
    n, tool = int(sys.argv[1]), sys.argv[2]
    cmd = sys.argv[3:]
    params = StdioServerParameters(command=cmd[0], args=cmd[1:])
    try:
        with anyio.fail_after(60):
            async with stdio_client(params) as (r, w):
                async with ClientSession(r, w) as s:
                    await s.initialize()
                    say("init ok")
                    await s.list_tools()
                    for i in range(n):
                        t = time.monotonic()
                        try:
                            with anyio.fail_after(20):
                                res = await s.call_tool(tool, {})
                            text = " ".join(c.text for c in res.content if hasattr(c, "text"))
                            kind = "error" if res.is_error else "ok"
                            say(f"call {i} {kind} {text!r} {time.monotonic() - t:.3f}")
                        except TimeoutError:
                            say(f"call {i} error 'no answer within 20 s' {time.monotonic() - t:.3f}")
                        except Exception as e:  # an McpError: the JSON-RPC error the client got
                            say(f"call {i} error {str(e)!r} {time.monotonic() - t:.3f}")
                            if "closed" in str(e).lower():
                                say(f"ended: {e}")
                                return
        say("closed by client")
    except BaseException as e:  # the stream's end surfaces as an exception group
        say(f"ended: {type(e).__name__}: {e!r}"[:300])


anyio.run(main)
