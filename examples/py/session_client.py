"""A session from the official MCP Python SDK client over stdio, with pauses, against lock_server.py
(through `witness wrap --record`, or `witness replay`'s reference, or the server alone).

usage: session_client.py [CALLS] -- CMD…    (CMD launches the server, e.g. `witness wrap --record F --
python3 lock_server.py`)
Initialises, lists the tools, then makes CALLS calls (default 20), PAUSE_MS apart (default 100):
even calls `work(WORK_MS)` (default 50), odd ones `echo("hello N")`. Prints one line per step, the same
whatever sits between it and the server: `init lock-server`, `tools echo,work`, `call N work: worked 50 ms`,
`call N echo: hello N`, then `done N`."""
import os
import sys

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


async def main() -> None:
    args = sys.argv[1:]
    calls = 20
    if args and args[0] != "--":
        calls = int(args.pop(0))
    if args and args[0] == "--":
        args.pop(0)
    pause = float(os.environ.get("PAUSE_MS", "100")) / 1000
    work_ms = int(os.environ.get("WORK_MS", "50"))
    params = StdioServerParameters(command=args[0], args=args[1:], env=dict(os.environ))
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            with anyio.fail_after(30):
                init = await session.initialize()
            print(f"init {init.server_info.name}", flush=True)
            with anyio.fail_after(30):
                tools = await session.list_tools()
            print("tools " + ",".join(sorted(t.name for t in tools.tools)), flush=True)
            for n in range(1, calls + 1):
                await anyio.sleep(pause)
                if n % 2 == 0:
                    name, arguments = "work", {"ms": work_ms}
                else:
                    name, arguments = "echo", {"text": f"hello {n}"}
                with anyio.fail_after(30):
                    r = await session.call_tool(name, arguments)
                text = r.content[0].text if r.content else ""
                flag = " (tool error)" if r.is_error else ""
                print(f"call {n} {name}: {text}{flag}", flush=True)
            print(f"done {calls}", flush=True)


anyio.run(main)
