"""The official MCP Python SDK's streamable HTTP client, as a host uses it across a server restart:
initializes, calls `echo`, waits until the file GO exists (the test makes it once the server has
restarted), calls `echo` again on the same session, and when that call fails because the session is
gone (HTTP 404: the SDK answers it as an error), opens a new session (initialize again, as a host
does on 404) and calls `echo` once more.

usage: session_http_client.py URL GO

Prints one line per step: `call 1 ok: …`, `call 2 error: CODE MESSAGE` (or `call 2 ok: …`),
`reinitialized`, `call 3 ok: …`."""
import os
import sys
import time

import anyio
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client


def text(res):
    return " ".join(getattr(c, "text", "") for c in res.content)


async def session_call(url, label):
    async with streamable_http_client(url) as streams:
        r, w = streams[0], streams[1]
        async with ClientSession(r, w) as s:
            await s.initialize()
            res = await s.call_tool("echo", {"text": label})
            print(f"{label} ok: {text(res)} is_error={res.is_error}", flush=True)


async def main():
    url, go = sys.argv[1], sys.argv[2]
    gone = False
    async with streamable_http_client(url) as streams:
        r, w = streams[0], streams[1]
        async with ClientSession(r, w) as s:
            await s.initialize()
            res = await s.call_tool("echo", {"text": "call 1"})
            print(f"call 1 ok: {text(res)} is_error={res.is_error}", flush=True)
            limit = time.monotonic() + 60
            while not os.path.exists(go) and time.monotonic() < limit:
                await anyio.sleep(0.1)
            try:
                res = await s.call_tool("echo", {"text": "call 2"})
                print(f"call 2 ok: {text(res)} is_error={res.is_error}", flush=True)
            except Exception as e:  # the SDK's McpError for the 404
                err = getattr(e, "error", None)
                code = getattr(err, "code", "?")
                msg = getattr(err, "message", str(e))
                print(f"call 2 error: {code} {msg}", flush=True)
                gone = True
    if gone:
        print("reinitialized", flush=True)
        await session_call(url, "call 3")


anyio.run(main)
