#!/usr/bin/env bash
# Benchmark: what TLS and HTTP/2 cost witness's load driver, against nginx `return 200` on loopback,
# beside oha where it is installed (the same URL, connections and seconds, taken in turns).
#
#   rows      HTTP/1.1, HTTPS (HTTP/1.1 over TLS), HTTP/2 over TLS (C streams on 1 connection),
#             h2c (C streams on 1 connection)
#   columns   requests/s; witness's CPU per request (user + system µs, from getrusage of the child);
#             for TLS rows the handshake: the connect floor's median and the level's p50 (ms)
#
# (Not exec: the EXIT trap must stop nginx.)
# Usage: scripts/bench-tls.sh [CONNECTIONS] [SECONDS]   (defaults 32 5)
# Needs nginx (Debian's nginx-light) and openssl; oha is used when it is on the PATH.
# WITNESS_BENCH_NO_BUILD=1 uses the release binary already built (in $CARGO_TARGET_DIR or target/).
set -euo pipefail
cd "$(dirname "$0")/.."
conns=${1:-32}; secs=${2:-5}
[ -x /usr/sbin/nginx ] || command -v nginx >/dev/null || { echo "bench-tls: nginx is not installed" >&2; exit 2; }
command -v openssl >/dev/null || { echo "bench-tls: openssl is not installed" >&2; exit 2; }
[ -n "${WITNESS_BENCH_NO_BUILD:-}" ] || cargo build --release --quiet --bin witness
export WITNESS_BIN="${CARGO_TARGET_DIR:-target}/release/witness"
tmp=$(mktemp -d)
free() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
p1=$(free); p2=$(free); p3=$(free)
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$tmp/k.pem" -out "$tmp/c.pem" \
  -days 2 -subj "/CN=witness bench" -addext "subjectAltName=IP:127.0.0.1" \
  -addext "basicConstraints=critical,CA:FALSE" 2>/dev/null
cat > "$tmp/nginx.conf" <<EOF
daemon off;
worker_processes 1;
pid $tmp/nginx.pid;
error_log stderr warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $tmp/body; proxy_temp_path $tmp/proxy; fastcgi_temp_path $tmp/fastcgi;
  uwsgi_temp_path $tmp/uwsgi; scgi_temp_path $tmp/scgi;
  keepalive_requests 1000000;
  server { listen 127.0.0.1:$p1; location / { return 200 "ok\n"; } }
  server { listen 127.0.0.1:$p2 ssl http2; ssl_certificate $tmp/c.pem; ssl_certificate_key $tmp/k.pem;
           location / { return 200 "ok\n"; } }
  server { listen 127.0.0.1:$p3 http2; location / { return 200 "ok\n"; } }
}
EOF
nginx_bin=$(command -v nginx || echo /usr/sbin/nginx)
"$nginx_bin" -e stderr -c "$tmp/nginx.conf" 2>"$tmp/nginx.err" &
server=$!
trap 'kill $server 2>/dev/null; rm -rf "$tmp"' EXIT
for p in $p1 $p2 $p3; do
  for _ in $(seq 50); do (exec 3<>/dev/tcp/127.0.0.1/"$p") 2>/dev/null && break; sleep 0.1; done
done
python3 - "$tmp" "$conns" "$secs" "$p1" "$p2" "$p3" <<'PY'
import json, os, resource, shutil, subprocess, sys
tmp, conns, secs, p1, p2, p3 = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), *sys.argv[4:]
rows = [
    ("HTTP/1.1", f"http://127.0.0.1:{p1}/", [], []),
    ("HTTPS (HTTP/1.1, TLS)", f"https://127.0.0.1:{p2}/", ["--cacert", f"{tmp}/c.pem"], ["--insecure"]),
    ("HTTP/2 over TLS, 1 conn", f"https://127.0.0.1:{p2}/", ["--cacert", f"{tmp}/c.pem", "--http2"], ["--insecure", "--http2", "-p", "1"]),
    ("h2c, 1 conn", f"http://127.0.0.1:{p3}/", ["--http2"], ["--http2", "-p", "1"]),
]
oha = shutil.which("oha")

def child_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime

print(f"{conns} concurrent, {secs} s each, nginx return 200 on loopback")
print(f"{'protocol':26} {'witness req/s':>14} {'CPU µs/req':>11} {'floor hs ms':>12} {'hs p50 ms':>10} {'oha req/s':>10} {'oha CPU µs/req':>15}")
for name, url, wargs, oargs in rows:
    j, r = f"{tmp}/j.jsonl", f"{tmp}/r.json"
    before = child_cpu()
    subprocess.run([os.environ["WITNESS_BIN"], "load", "--url", url, "--levels", str(conns),
                    "--duration", f"{secs}s", "--settle", "0s", "--journal", j, "--report", r, *wargs],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    cpu = child_cpu() - before
    rep = json.load(open(r))
    lvl = rep["levels"][0]
    n = sum(lvl["counts"].values())
    ok = lvl["counts"]["ok"]
    floor = (rep.get("connect_floor") or {}).get("handshake_ms")
    hs = ((lvl.get("phases") or {}).get("handshake") or {}).get("p50")
    w_rps = ok / secs
    o_rps = o_cpu = "-"
    if oha:
        before = child_cpu()
        out = subprocess.run([oha, "-z", f"{secs}s", "-c", str(conns), "--no-tui", "-j", *oargs, url],
                             capture_output=True, text=True)
        ocpu = child_cpu() - before
        try:
            s = json.loads(out.stdout)["summary"]
            total = s["requestsPerSec"] * secs
            o_rps = f"{s['requestsPerSec']:.0f}"
            o_cpu = f"{ocpu / max(total, 1) * 1e6:.1f}"
        except Exception:
            o_rps = "failed"
    f = lambda v, k: "-" if v is None else f"{v * k:.2f}"
    print(f"{name:26} {w_rps:14.0f} {cpu / max(n, 1) * 1e6:11.1f} {f(floor, 1):>12} {f(hs, 1000):>10} {o_rps:>10} {o_cpu:>15}")
if not oha:
    print("(oha is not installed: `cargo install oha --locked` adds its columns)")
PY
