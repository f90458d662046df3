#!/usr/bin/env bash
# Writes the figures the docs quote, measured now, between their markers:
#   <!-- figures:NAME -->…<!-- /figures -->
# so no size or count in the docs is typed by hand. Run it after a change that moves them:
#   scripts/figures.sh            (builds witness in release first)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --bin witness
bin=target/release/witness
bytes=$(stat -c %s "$bin")
mib=$(awk -v b="$bytes" 'BEGIN { printf "%.1f", b / 1048576 }')
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
size="The release binary is $mib MiB ($(printf "%'d" "$bytes" 2>/dev/null || echo "$bytes") bytes, at commit $commit, built by \`scripts/figures.sh\` on $(uname -m))"
# One marker, one figure; a file without the marker is left alone.
write() {
  local name=$1 text=$2 file
  for file in README.md docs/*.md; do
    grep -q "<!-- figures:$name -->" "$file" || continue
    python3 - "$file" "$name" "$text" <<'PY'
import re, sys
path, name, text = sys.argv[1:4]
s = open(path).read()
pat = re.compile(r"(<!-- figures:%s -->).*?(<!-- /figures -->)" % re.escape(name), re.S)
s = pat.sub(lambda m: m.group(1) + text + m.group(2), s)
open(path, "w").write(s)
PY
    echo "figures: $name in $file: $text"
  done
}
write binary-size "$size"
