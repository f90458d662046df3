#!/usr/bin/env bash
# Regenerates docs/timeline.png (the README's picture) from exactly what scripts/demo.sh runs: the
# demo writes its HTML timeline, headless Chromium takes the screenshot (1400 px wide, tall enough for
# the whole timeline under the verdict). Beside the picture it writes
# the lanes the picture shows (OUT.lanes, one lane id per line, read from the HTML it screenshotted):
# tests/html_structure.rs fails when the demo's HTML loses one of them.
# Usage: scripts/timeline-png.sh [OUT.png]   (PORT is passed on to the demo)
set -uo pipefail
cd "$(dirname "$0")/.."
out="${1:-docs/timeline.png}"
lanes="${out%.png}.lanes"
chromium=$(command -v chromium || command -v chromium-browser) || {
  echo "timeline-png: no chromium on PATH (apt-get install -y chromium)" >&2
  exit 2
}
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
REPORT="$dir/witness-report.json" scripts/demo.sh
code=$?
if [ "$code" -ne 1 ]; then
  echo "timeline-png: the demo exited $code, not its expected 1 (FAIL); no picture made" >&2
  exit 1
fi
"$chromium" --headless --disable-gpu --no-sandbox --hide-scrollbars \
  --user-data-dir="$dir/profile" --virtual-time-budget=2000 \
  --window-size=1400,1400 --screenshot="$dir/timeline.png" "file://$dir/witness-report.html" \
  2>"$dir/chromium.log" || { cat "$dir/chromium.log" >&2; exit 1; }
[ -s "$dir/timeline.png" ] || { echo "timeline-png: chromium wrote no screenshot" >&2; cat "$dir/chromium.log" >&2; exit 1; }
grep -o 'class="lane" data-lane="[^"]*"' "$dir/witness-report.html" | sed 's/.*data-lane="//; s/"$//' >"$dir/lanes"
[ -s "$dir/lanes" ] || { echo "timeline-png: the demo's HTML names no lanes" >&2; exit 1; }
cp "$dir/timeline.png" "$out"
cp "$dir/lanes" "$lanes"
echo "timeline-png: wrote $out and $lanes" >&2
