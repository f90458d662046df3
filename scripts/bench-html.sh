#!/usr/bin/env bash
# Times `witness report --format html` (and trace) on a synthetic journal of N requests (default
# 100,000) in four levels with a watchdog exit, and prints seconds and file sizes.
# Usage: scripts/bench-html.sh [N]
set -euo pipefail
cd "$(dirname "$0")/.."
n="${1:-100000}"
cargo build --release --quiet --bin witness
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
journal="$dir/bench.jsonl"

awk -v n="$n" 'BEGIN {
  print "{\"kind\":\"header\",\"witness_version\":\"0.1.0\",\"command\":[\"witness\",\"load\"],\"started_at\":\"2026-01-01T00:00:00Z\",\"started_unix_s\":0.0,\"hostname\":\"bench\",\"pid\":1,\"mode\":\"load\"}"
  print "{\"t_s\":0.0,\"kind\":\"settings\",\"load\":{\"url\":\"http://127.0.0.1:1/call\",\"method\":\"POST\",\"levels\":[1,8,32,64],\"timeout_s\":30.0,\"connect_timeout_s\":5.0,\"settle_s\":1.0,\"factor\":1.5}}"
  print "{\"t_s\":0.01,\"kind\":\"spawn\",\"pid\":100,\"start_time\":1,\"command\":[\"srv\"],\"attempt\":0}"
  split("1 8 32 64", levels, " ")
  per = int(n / 4); t = 0.1; id = 0; dur = 0.02
  for (li = 1; li <= 4; li++) {
    c = levels[li]
    printf "{\"t_s\":%.6f,\"kind\":\"level_start\",\"index\":%d,\"concurrency\":%d,\"health\":{\"status\":200,\"duration_s\":0.001}}\n", t, li - 1, c
    start = t
    for (k = 0; k < per; k++) {
      w = k % c; s = start + int(k / c) * dur; e = s + dur
      if (li == 3 && k >= int(per / 2) && k < int(per / 2) + 3 * c)
        o = "\"outcome\":{\"kind\":\"error\",\"error\":\"closed_before_response\"}"
      else
        o = "\"status\":200,\"outcome\":{\"kind\":\"ok\"}"
      printf "{\"t_s\":%.6f,\"kind\":\"request\",\"id\":%d,\"group\":\"level%d\",\"worker\":%d,\"start_s\":%.6f,\"duration_s\":%.6f,%s}\n", e, id, li - 1, w, s, dur, o
      id++
      if (li == 3 && k == int(per / 2) + 3 * c) {
        printf "{\"t_s\":%.6f,\"kind\":\"exit\",\"pid\":100,\"code\":124,\"signal\":null,\"core_dumped\":false,\"age_s\":%.6f,\"status\":124,\"requested\":false,\"meaning\":\"exited 124: a timeout or watchdog fired\"}\n", e, e - 0.01
        printf "{\"t_s\":%.6f,\"kind\":\"spawn\",\"pid\":101,\"start_time\":2,\"command\":[\"srv\"],\"attempt\":1}\n", e + 0.1
      }
    }
    t = start + int(per / c) * dur + 0.5
    printf "{\"t_s\":%.6f,\"kind\":\"level_end\",\"index\":%d,\"concurrency\":%d,\"health\":{\"status\":200,\"duration_s\":0.001}}\n", t, li - 1, c
    t += 0.01
  }
  for (s = 0; s < t; s += 0.25)
    printf "{\"t_s\":%.3f,\"kind\":\"proc_sample\",\"pid\":100,\"rss_bytes\":%d,\"cpu_pct\":12.5,\"threads\":4,\"fds\":9,\"children\":0}\n", s, 10000000 + s * 1000
  printf "{\"t_s\":%.6f,\"kind\":\"end\",\"reason\":\"every level ran\",\"partial\":false}\n", t
}' > "$journal"

size() { stat -c %s "$1"; }
for fmt in html trace; do
  out="$dir/out.$fmt"
  start=$(date +%s.%N)
  target/release/witness report "$journal" --format "$fmt" -o "$out"
  end=$(date +%s.%N)
  printf '%s requests -> %-5s %6.2f s  %9d bytes  (journal %d bytes)\n' \
    "$n" "$fmt" "$(awk -v a="$start" -v b="$end" 'BEGIN { print b - a }')" "$(size "$out")" "$(size "$journal")"
done
