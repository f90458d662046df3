#!/usr/bin/env bash
# The project's test command (README.md): formatting, lints, and every test.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo fmt --check
cargo clippy --all-targets -- -D warnings
cargo test --all-targets
