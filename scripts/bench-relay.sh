#!/usr/bin/env bash
# Benchmark: what does `witness wrap`'s stdio relay add to an MCP round trip? An MCP client (the
# official Rust SDK's, examples/mcp_rs_client.rs; and the Python SDK's, examples/py/mcp_client.py,
# when `mcp` is installed) launches the example server (examples/mcp_server.rs) and calls its `echo`
# tool, which answers at once, CALLS times in a row, timing each call: directly, through
# `witness wrap --stdin inherit` (the control: supervised, the pipes handed over) and through
# `witness wrap` (relayed and journalled). R rounds in turns, the order rotated each round, so that
# machine noise weighs on all three alike. Prints rows of docs/benchmarks.md's table: the median
# round trip of each path (each round's figure in brackets), the µs added and the ratio. Issue 19's
# goal: at most 50 µs added at the median per call.
# Usage: scripts/bench-relay.sh [ROUNDS] [CALLS]   (default 5 rounds of 2000 calls)
# The same section runs in scripts/bench.sh's full table (scripts/bench.py, section `relay`).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
calls=${2:-2000}
echo "bench: building witness and the examples (release)" >&2
cargo build --release --bins
exec python3 scripts/bench.py --only relay --rounds "$rounds" --calls "$calls"
