#!/usr/bin/env bash
# All of witness's performance claims in one run, side by side with its peers, printed as one table
# of figures and ratios (ratios are the claim: absolute figures depend on the machine).
#
#   throughput   nginx `return 200` on loopback, C connections, S seconds, R rounds taken in turns:
#                wrk, oha, witness load (every request journalled; its raw HTTP/1.1 path and, with
#                WITNESS_HTTP1=hyper, hyper's), each client's CPU per request from its own accounting
#                (wait4's rusage; witness's while its level sent, journalled by itself); then the
#                same client-bound: the client on core 0, one nginx worker on core 1
#   memory       witness load's and witness report's peak RSS at two request counts; journal bytes
#                per request
#   latency      toy_server with a fixed 20 ms delay: p50/p99 from wrk, oha and witness
#   wrapping     a child writing 1 GiB of log lines: alone, through cat, under witness wrap
#   start-up     witness wrap -- true beside tini -- true and plain true; load's time to first request
#   relay        an MCP client's round trip to mcp_server's `echo`: direct, through
#                `witness wrap --stdin inherit`, through `witness wrap` (scripts/bench-relay.sh alone)
#
# Usage: scripts/bench.sh [--quick]   (--quick: shorter runs, for checking the script itself)
# Installs what it needs: wrk, nginx-light and tini from Debian, oha with `cargo install`.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v wrk >/dev/null || need_apt+=(wrk)
command -v nginx >/dev/null || need_apt+=(nginx-light)
command -v tini >/dev/null || need_apt+=(tini)
[ -x /usr/bin/time ] || need_apt+=(time)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "bench: installing ${need_apt[*]} (Debian)" >&2
  if [ "$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq "${need_apt[@]}" >/dev/null
  else sudo apt-get update -qq && sudo apt-get install -y -qq "${need_apt[@]}" >/dev/null; fi
fi
export PATH="$HOME/.cargo/bin:$PATH"
if ! command -v oha >/dev/null; then
  # On the current stable toolchain, whatever this project's minimum is: oha follows stable.
  echo "bench: installing oha (cargo +stable install oha --locked; a few minutes)" >&2
  if command -v rustup >/dev/null; then
    rustup toolchain install stable --profile minimal >/dev/null
    cargo +stable install oha --locked --quiet
  else
    cargo install oha --locked --quiet
  fi
fi
echo "bench: building witness (release)" >&2
cargo build --release --bins
exec python3 scripts/bench.py "$@"
