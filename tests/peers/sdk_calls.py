"""The official MCP Python SDK's stdio client against any server: lists its tools, then calls TOOL
with ARGS (a JSON object) N times, one after another.

usage: sdk_calls.py N TOOL ARGS CMD… (CMD: the server, or `witness wrap -- SERVER`). Prints `tools: […]`
and one line per call: `call I is_error=B`."""
import json
import os
import sys
import time

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

async def main():
    n, tool, args = int(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3])
    cmd = sys.argv[4:]
    params = StdioServerParameters(command=cmd[0], args=cmd[1:], env=dict(os.environ))
    async with stdio_client(params) as (r, w):
        async with ClientSession(r, w) as s:
            await s.initialize()
            tools = await s.list_tools()
            print("tools:", [t.name for t in tools.tools])
            for i in range(n):
                t = time.monotonic()
                res = await s.call_tool(tool, args)
                print(f"call {i} is_error={res.is_error} {time.monotonic() - t:.4f}s", flush=True)
anyio.run(main)
