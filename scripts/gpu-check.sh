#!/usr/bin/env bash
# gpu-check.sh: the quick end-to-end check of witness's GPU sampling on a machine with an NVIDIA GPU.
# Builds witness (release), runs `witness gpu`, then a 20-second `witness load --gpu on` against the
# example server, and prints the report's gpu section. Takes about a minute after the build.
#
# Usage: scripts/gpu-check.sh            (from anywhere inside the repository)
# Exit status: witness's own (3 from `witness gpu` means no NVIDIA driver here: nothing to check).
set -euo pipefail

cd "$(dirname "$0")/.."
out=$(mktemp -d "${TMPDIR:-/tmp}/witness-gpu-check.XXXXXX")
report="$out/report.json"

echo "== building witness and the example server (release)"
cargo build --release --quiet --bin witness --bin toy_server
witness=target/release/witness
server=target/release/toy_server

echo "== witness gpu"
status=0
"$witness" gpu || status=$?
if [ "$status" -ne 0 ]; then
    echo "gpu-check: witness gpu exited $status; no GPU to check here." >&2
    exit "$status"
fi

# A free loopback port, chosen by the kernel.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')

echo "== witness load --gpu on (20 s: levels 1 and 4, 10 s each) against $server on port $port"
status=0
timeout 180 "$witness" load --url "http://127.0.0.1:$port/call" --duration 10s --levels 1,4 \
    --gpu on --report "$report" --journal "$out/journal.jsonl" \
    -- "$server" --port "$port" || status=$?
echo "== load exited $status (journal: $out/journal.jsonl)"

if [ ! -s "$report" ]; then
    echo "gpu-check: no report was written at $report" >&2
    exit 1
fi
echo "== the report's gpu section"
python3 - "$report" <<'PY'
import json, sys
print(json.dumps(json.load(open(sys.argv[1])).get("gpu"), indent=2))
PY
exit "$status"
