#!/usr/bin/env bash
# The main job against the bundled example server: the 85-second story in miniature. A server that
# serialises /call on a lock (1 s each) and is killed by a 6 s startup watchdog, restarted by witness.
# witness reports level 1 PASS and levels 4 and 8 FAIL *because the server restarted*, with the
# watchdog line, exit 124 and the round-timer suspicion — not "4 concurrent = 6 s of latency".
#
# Exits 1 by design: the verdict is FAIL. PORT (default 18080) and REPORT (default
# witness-report.json) are honoured; the HTML timeline is written beside the report (.html).
# Extra arguments go to `witness load`.
set -uo pipefail
cd "$(dirname "$0")/.."
PORT=${PORT:-18080}
REPORT=${REPORT:-witness-report.json}
HTML="${REPORT%.json}.html"
echo "demo: building witness and the example server (release; the first build takes a few minutes)" >&2
cargo build --release --bin witness --bin toy_server || exit 2
echo "demo: witness load against toy_server on 127.0.0.1:$PORT (expected verdict: FAIL, exit 1)" >&2
target/release/witness load --url "http://127.0.0.1:$PORT/call" \
  --rounds 1 --restart always --backoff 200ms --report "$REPORT" --html "$HTML" "$@" \
  -- target/release/toy_server --port "$PORT" --call lock:1s --watchdog 6s
code=$?
echo "demo: JSON report: $REPORT" >&2
echo "demo: HTML timeline: $HTML" >&2
echo "demo: witness exited $code (1 = a level failed: the verdict this demo is built to show)" >&2
exit $code
