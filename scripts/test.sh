#!/usr/bin/env bash
# The project's test command (README.md): formatting, lints, and every test.
#   scripts/test.sh          the whole suite
#   scripts/test.sh --busy   the same with two CPU hogs running beside it, as a busy machine would
# Each phase says how long it took. Tests run under cargo-nextest (each test a process of its own,
# several at once: .config/nextest.toml) when it is installed, else under `cargo test`.
set -euo pipefail
cd "$(dirname "$0")/.."
busy=false
for a in "$@"; do
  case "$a" in
    --busy) busy=true ;;
    *) echo "scripts/test.sh: unknown option '$a' (it takes --busy)" >&2; exit 2 ;;
  esac
done
t0=$(date +%s)
phase_start=$t0
phase() { # name: the time of the phase that just ended
  local now; now=$(date +%s)
  echo "test.sh: $1 took $((now - phase_start)) s (total $((now - t0)) s)" >&2
  phase_start=$now
}
# What the tests run for real (Chromium, nginx, gunicorn, the MCP SDK, k6, Docker …): installed when
# run as root, and in any case a plain list of what is missing and which tests it leaves out.
# WITNESS_SETUP=0 skips it.
if [ "${WITNESS_SETUP:-1}" != 0 ]; then
  scripts/setup.sh
  phase "setup"
fi
cargo fmt --check
phase "cargo fmt --check"
cargo clippy --all-targets -- -D warnings
phase "cargo clippy"
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --all-targets --no-run
  phase "test build"
  hogs=()
  if $busy; then
    # Two busy loops, one per core of a 2-core machine, for as long as the tests run.
    for _ in 1 2; do (while :; do :; done) & hogs+=($!); done
    trap 'kill "${hogs[@]}" 2>/dev/null || true' EXIT
    echo "test.sh: --busy: CPU hogs ${hogs[*]} running beside the tests" >&2
  fi
  cargo nextest run --all-targets
  phase "tests (cargo nextest)"
else
  echo "test.sh: cargo-nextest is not installed (cargo install cargo-nextest); running cargo test" >&2
  hogs=()
  if $busy; then
    for _ in 1 2; do (while :; do :; done) & hogs+=($!); done
    trap 'kill "${hogs[@]}" 2>/dev/null || true' EXIT
  fi
  cargo test --all-targets
  phase "tests (cargo test)"
fi
