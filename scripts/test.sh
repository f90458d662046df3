#!/usr/bin/env bash
# The project's test command (README.md): formatting, lints, and every test.
set -euo pipefail
cd "$(dirname "$0")/.."
# What the tests run for real (Chromium, nginx, gunicorn, the MCP SDK, k6, Docker …): installed when
# run as root, and in any case a plain list of what is missing and which tests it leaves out.
# WITNESS_SETUP=0 skips it.
if [ "${WITNESS_SETUP:-1}" != 0 ]; then
  scripts/setup.sh
fi
cargo fmt --check
cargo clippy --all-targets -- -D warnings
cargo test --all-targets
