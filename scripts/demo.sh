#!/usr/bin/env bash
# The main job against the bundled example server: the seed's story in miniature. A server that
# serialises /call on a lock (1 s each) and is killed by a 6 s startup watchdog, restarted by witness.
# witness reports level 1 PASS and levels 4 and 8 FAIL *because the server restarted*, with the
# watchdog line, exit 124 and the round-timer suspicion — not "4 concurrent = 6 s of latency".
set -uo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet
PORT=${PORT:-18080}
exec target/release/witness load --url "http://127.0.0.1:$PORT/call" \
  --restart always --backoff 200ms --report "${REPORT:-witness-report.json}" "$@" \
  -- target/release/toy_server --port "$PORT" --call lock:1s --watchdog 6s
