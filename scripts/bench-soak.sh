#!/usr/bin/env bash
# Benchmark: does witness's *own* memory stay flat over a long soak? A fast toy_server is soaked at a
# steady rate (4 drivers in a steady phase, plus a reader and the per-interval checks and gauges)
# for MINUTES, while this script reads witness's VmRSS from /proc every few seconds. It prints the
# start (after a 30 s warm-up), end and peak RSS, the least-squares slope, the growth that slope
# would add over an hour, and the first-third vs last-third medians, during the workload only (the
# end-of-run read-back of the journal is a one-off, not a trend).
# Usage: scripts/bench-soak.sh [MINUTES] [REQUESTS_PER_S]   (default 10 minutes, 400/s)
# SAMPLE_EVERY=SECONDS (default 5) sets the RSS sampling period; RSS_OUT=FILE keeps the samples
# ("seconds KiB" per line).
set -euo pipefail
cd "$(dirname "$0")/.."
minutes=${1:-10}
rate=${2:-400}
every=${SAMPLE_EVERY:-5}
cargo build --release --quiet --bin witness --bin toy_server
w=target/release/witness
tmp=$(mktemp -d)
wpid=
cleanup() {
  if [ -n "$wpid" ]; then kill -INT "$wpid" 2>/dev/null || true; wait "$wpid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
port=$((20000 + RANDOM % 20000))
gap_ms=$(awk -v r="$rate" 'BEGIN { printf "%.3f", 4 * 1000 / r }')
cat >"$tmp/plan.toml" <<EOF
interval = "10s"
timeout = "5s"
[target]
base_url = "http://127.0.0.1:$port"
[kinds.call]
path = "/call"
body = '{"inputs": \${inputs}}'
vars.inputs = ['["a"]', '["a","b"]', '["a","b","c"]', '["a","b","c","d"]']
[[drivers]]
count = 4
cycle = ["steady"]
steady = { requests = 1000, gap = "${gap_ms}ms" }
[[readers]]
get = ["/stats"]
gap = "1s"
[[checks]]
name = "stats"
get = "/stats"
pointer = "/in_flight"
max = 100
[[gauges]]
name = "queued"
get = "/stats"
pointer = "/queued"
drain = true
EOF

echo "soaking toy_server on port $port at ~${rate} requests/s for ${minutes} min; sampling witness's RSS every ${every}s"
"$w" soak --plan "$tmp/plan.toml" --duration "${minutes}m" --gpu off --seed 1 \
  --journal "$tmp/j.jsonl" --report "$tmp/r.json" \
  -- target/release/toy_server --port "$port" 2>"$tmp/err" &
wpid=$!
start=$(date +%s.%N)
while kill -0 "$wpid" 2>/dev/null; do
  kb=$(awk '/^VmRSS:/ {print $2}' "/proc/$wpid/status" 2>/dev/null || true)
  [ -n "$kb" ] && echo "$(awk -v s="$start" -v n="$(date +%s.%N)" 'BEGIN {printf "%.1f", n - s}') $kb" >>"$tmp/rss"
  sleep "$every"
done
wait "$wpid" && rc=0 || rc=$?
wpid=
if [ -n "${RSS_OUT:-}" ]; then cp "$tmp/rss" "$RSS_OUT"; fi
grep -E "soak [0-9].*interval" "$tmp/err" | tail -1 | sed 's/^witness: /last progress line: /'
grep -E "^verdict:" "$tmp/err" || true
echo "witness exit status: $rc; journal $(du -h "$tmp/j.jsonl" | cut -f1)"
awk -v dur="$((minutes * 60))" -v warm=30 '
  function median(arr, m,   i, j, x) {
    for (i = 2; i <= m; i++) { x = arr[i]; for (j = i - 1; j >= 1 && arr[j] > x; j--) arr[j + 1] = arr[j]; arr[j + 1] = x }
    return arr[int((m + 1) / 2)]
  }
  $1 >= warm && $1 <= dur { n++; t[n] = $1; v[n] = $2; if ($2 > max) max = $2 }
  END {
    if (n < 6) { print "too few samples during the workload"; exit 1 }
    for (i = 1; i <= n; i++) { mt += t[i]; mv += v[i] }
    mt /= n; mv /= n
    for (i = 1; i <= n; i++) { num += (t[i] - mt) * (v[i] - mv); den += (t[i] - mt) ^ 2 }
    slope = den > 0 ? num / den : 0
    k = int(n / 3)
    for (i = 1; i <= k; i++) a[i] = v[i]
    for (i = 1; i <= k; i++) b[i] = v[n - k + i]
    first = median(a, k); last = median(b, k)
    printf "witness RSS during the workload (%d samples from t=%ds to t=%ds):\n", n, t[1], t[n]
    printf "  start %.1f MiB, end %.1f MiB, peak %.1f MiB\n", v[1] / 1024, v[n] / 1024, max / 1024
    printf "  first-third median %.1f MiB, last-third median %.1f MiB (%+.1f%%)\n", first / 1024, last / 1024, (last - first) / first * 100
    printf "  least-squares slope %+.1f KiB/min (%+.2f MiB per hour if it kept on)\n", slope * 60, slope * 3600 / 1024
  }' "$tmp/rss"

# The verdict comes from the classifier witness applies to servers (analyze/trend.rs): the samples
# become the process readings of a minimal soak journal, and `witness report` judges them.
{
  echo '{"kind":"header","witness_version":"0.1.0","command":["bench-soak"],"started_at":"1970-01-01T00:00:00Z","started_unix_s":0.0,"hostname":"bench","pid":1,"mode":"soak"}'
  echo "{\"t_s\":0.0,\"kind\":\"settings\",\"extra\":{\"soak\":{\"duration_planned_s\":$((minutes * 60)),\"interval_s\":10,\"seed\":1}}}"
  echo '{"t_s":30.0,"kind":"interval","index":0,"requests":0}'
  awk -v dur="$((minutes * 60))" '$1 >= 30 && $1 <= dur { printf "{\"t_s\":%s,\"kind\":\"proc_sample\",\"pid\":1,\"rss_bytes\":%d,\"cpu_pct\":0,\"threads\":1,\"fds\":1,\"children\":0}\n", $1, $2 * 1024 }' "$tmp/rss"
  echo "{\"t_s\":$((minutes * 60)).0,\"kind\":\"interval\",\"index\":1,\"requests\":0}"
  echo "{\"t_s\":$((minutes * 60)).0,\"kind\":\"end\",\"reason\":\"bench\",\"partial\":false}"
} >"$tmp/self.jsonl"
"$w" report "$tmp/self.jsonl" --format json -o "$tmp/self.json"
sed -n '/"memory_trend"/,/"slope_bytes_per_s"/p' "$tmp/self.json" | grep -E '^      "(class|detail)"' \
  | sed -e 's/^ *"class": "\(.*\)",$/  witness'"'"'s trend classifier: \1/' -e 's/^ *"detail": "\(.*\)",$/    (\1)/'
