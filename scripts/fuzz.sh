#!/usr/bin/env bash
# Bounded fuzzing of the journal reader (with analysis and every view), the soak plan parser and the
# server log-line reader (examples/fuzz.rs). Not part of CI: run it by hand, for as long as you like.
#
#   scripts/fuzz.sh [SECONDS] [SEED]      # default 120 s; crashes land in target/fuzz/
#
# Seeds: the example plans, and journals made here by real runs (wrap, a load ladder, a short soak)
# against the example server. A crash is an input file plus its panic message; turn each into a
# regression test (tests/badinput.rs, or a unit test beside the code) before fixing it.
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-120}"
seed="${2:-$RANDOM}"
cargo build --quiet --bin witness --bin toy_server --example fuzz
w=target/debug/witness
toy=target/debug/toy_server
seeds=target/fuzz/seeds
mkdir -p "$seeds"
port=$((20000 + RANDOM % 20000))
"$w" wrap --gpu off --journal "$seeds/wrap.jsonl" --watch 'lease=lease lost' \
  -- sh -c 'echo "lease lost after 90s"; echo "[oi] process watchdog: force-exiting after 2s (exit 124)"; exit 3' \
  >/dev/null 2>&1 || true
"$w" load --gpu off --url "http://127.0.0.1:$port/call" --levels 1,4 --rounds 3 --settle 100ms \
  --timeout 1s --journal "$seeds/load.jsonl" -- "$toy" --port "$port" --call sleep:50ms \
  >/dev/null 2>&1 || true
port=$((port + 1))
"$w" soak --gpu off --plan examples/plans/quick.toml --duration 3s --base-url "http://127.0.0.1:$port" \
  --journal "$seeds/soak.jsonl" -- "$toy" --port "$port" --leak 64k >/dev/null 2>&1 || true
exec target/debug/examples/fuzz --seconds "$secs" --seed "$seed" --out target/fuzz \
  "$seeds"/*.jsonl examples/plans/*.toml
