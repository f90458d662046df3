#!/usr/bin/env bash
# Benchmark: does witness slow a child that floods its output? The child (examples/spew.rs) writes one
# 10 MB line with no break, then 200 MB of ordinary 100-byte lines, as fast as it can. We time it
# writing straight to /dev/null, then under `witness wrap` (which reads, matches and passes every
# byte through to /dev/null), and report the ratio and witness's peak memory.
# Usage: scripts/bench-pipe.sh [RUNS]   (default 3; prints the median of each)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-3}
cargo build --release --quiet
spew=target/release/spew
w=target/release/witness
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

for i in $(seq "$runs"); do
  /usr/bin/time -f "%e %M" -o "$tmp/direct.$i" "$spew" >/dev/null
  /usr/bin/time -f "%e %M" -o "$tmp/cat.$i" sh -c "\"$spew\" | cat >/dev/null"
  /usr/bin/time -f "%e %M" -o "$tmp/wrapped.$i" "$w" wrap --journal "$tmp/j.$i.jsonl" -- "$spew" >/dev/null 2>"$tmp/err.$i"
done
direct=$(cat "$tmp"/direct.* | awk '{print $1}' | median)
wrapped=$(cat "$tmp"/wrapped.* | awk '{print $1}' | median)
piped=$(cat "$tmp"/cat.* | awk '{print $1}' | median)
rss_kb=$(cat "$tmp"/wrapped.* | awk '{print $2}' | sort -n | tail -1)
echo "spew alone:           ${direct}s (median of $runs)"
echo "spew | cat:           ${piped}s (median of $runs; any pipe reader's floor)"
echo "spew under witness:   ${wrapped}s (median of $runs)"
awk -v d="$direct" -v w="$wrapped" -v p="$piped" 'BEGIN { if (d > 0 && p > 0) printf "ratio wrapped/direct: %.2fx   wrapped/cat: %.2fx\n", w / d, w / p }'
echo "witness peak RSS:     $((rss_kb / 1024)) MiB (includes the child: /usr/bin/time reports the largest of the tree's waited processes)"
