#!/usr/bin/env bash
# Benchmark: witness's load driver against wrk, side by side in one run, on the same server (the
# bundled toy_server, fast /call) and the same connection count. witness journals one outcome per
# request as it goes; wrk records nothing per request. Prints requests/s for both and the ratio.
# Usage: scripts/bench-load.sh [CONNECTIONS] [SECONDS] [ROUNDS]   (defaults 64 5 2)
# Needs wrk (Debian: apt-get install wrk).
set -euo pipefail
cd "$(dirname "$0")/.."
conns=${1:-64}; secs=${2:-5}; rounds=${3:-2}
command -v wrk >/dev/null || { echo "bench-load: wrk is not installed (apt-get install wrk)" >&2; exit 2; }
cargo build --release --quiet
tmp=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
target/release/toy_server --port "$port" >/dev/null 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; rm -rf "$tmp"' EXIT
for _ in $(seq 50); do (exec 3<>/dev/tcp/127.0.0.1/"$port") 2>/dev/null && break; sleep 0.1; done
url="http://127.0.0.1:$port/call"

for r in $(seq "$rounds"); do
  wrk_rps=$(wrk -t2 -c"$conns" -d"${secs}s" "$url" | awk '/Requests\/sec/ {print $2}')
  target/release/witness load --url "$url" --method GET --body '' --levels "$conns" \
    --duration "${secs}s" --settle 0s --report "$tmp/r$r.json" --journal "$tmp/j$r.jsonl" >/dev/null 2>&1 || true
  w_rps=$(python3 - "$tmp/r$r.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
l = r["levels"][0]
n = sum(l["counts"].values())
# The level's requests over the time they took: first start to last end, from the journal.
starts, ends = [], []
for line in open(sys.argv[1].replace("/r", "/j").replace(".json", ".jsonl")):
    e = json.loads(line)
    if e.get("k") == "rq":  # the compact request (src/journal/codec.rs): t_s is s + d (ns) + e (us)
        s = e["s"]
        t = e["t"] if "t" in e else (round(s * 1e6) + (e["d"] + 500) // 1000 + e.get("e", 0)) / 1e6
        starts.append(s); ends.append(t)
    elif e.get("kind") == "request":  # journals written before it
        starts.append(e["start_s"]); ends.append(e["t_s"])
print(f"{n / (max(ends) - min(starts)):.0f}")
PY
)
  echo "round $r: wrk ${wrk_rps} req/s   witness ${w_rps} req/s   ratio witness/wrk $(python3 -c "print(f'{$w_rps/$wrk_rps:.2f}')")"
done
