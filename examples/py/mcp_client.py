"""The official MCP Python SDK's client, launching a stdio server through `witness wrap`.

usage: mcp_client.py CALLS WITNESS [WRAP ARGS…] -- SERVER…
Initialises a session, calls `echo` CALLS times (TOOL=slow or TOOL=fallback: that tool, each call
timed), then
(with WAIT_END=1) keeps calling until the connection ends. Prints one line per step on stdout:
`init ok`, `call N ok` (`call N ok 1.002s` for `slow`), `ended: …`. With TIMINGS=1 it also prints
`median_us N` before `closed by client`: the median round trip of the echo calls in microseconds,
timed here around each call (scripts/bench-relay.sh reads it)."""
import os
import statistics
import sys
import time

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
                round_trips = []
                while n < calls or os.environ.get("WAIT_END") == "1":
                    n += 1
                    tool = os.environ.get("TOOL")
                    if tool in ("slow", "fallback"):
                        args = {"seconds": 1.0} if tool == "slow" else {}
                        t = time.monotonic()
                        with anyio.fail_after(20):
                            await session.call_tool(tool, args)
                        print(f"call {n} ok {time.monotonic() - t:.3f}s", flush=True)
                        continue
                    t0 = time.perf_counter()
                    with anyio.fail_after(20):
                        r = await session.call_tool("echo", {"text": f"hi {n}"})
                    round_trips.append(time.perf_counter() - t0)
                    text = r.content[0].text if r.content else ""
                    assert text == f"hi {n}", text
                    print(f"call {n} ok", flush=True)
                    if n >= calls:
                        await anyio.sleep(0.2)
                    if n > max(calls, 500):  # bounds the WAIT_END loop, never the calls asked for
                        break
                if os.environ.get("TIMINGS") == "1":
                    print(f"median_us {round(statistics.median_low(round_trips) * 1e6)}", flush=True)
    except BaseException as e:  # the connection ending is what the watchdog case waits for
        print(f"ended: {type(e).__name__}: {e}", flush=True)
        return
    print("closed by client", flush=True)


anyio.run(main)
