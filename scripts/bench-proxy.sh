#!/usr/bin/env bash
# Benchmark: the cost of `witness wrap --proxy` (issue 19), in one run, in turns.
#
#   latency   one kept-alive connection, sequential GETs to toy_server's fast /call, timed by
#             `witness load --levels 1` straight at the server and through the proxy, TURNS turns
#             each, alternating: p50/p99 of each, and the proxy's added latency (p50 difference,
#             goal ≤ 0.1 ms) and ratio. The client is the same on both sides, so the difference is
#             the proxy's: two more loopback hops, hyper's parsing both ways, one journal record.
#   bodies    1 GiB through the proxy each way at once (curl uploading to toy_server's /echo, which
#             sends each piece back as it reads it), and a 1 GiB download (`--call big:1g`): the
#             wall time direct and through the proxy, and witness's peak RSS (VmHWM) after both.
#
# Usage: scripts/bench-proxy.sh [TURNS] [REQUESTS_PER_TURN] [BODY]   (defaults 5 5000 1g)
# Needs curl and python3; builds witness in release.
set -euo pipefail
cd "$(dirname "$0")/.."
turns=${1:-5}; per=${2:-5000}; body=${3:-1g}
command -v curl >/dev/null || { echo "bench-proxy: curl is not installed" >&2; exit 2; }
echo "bench-proxy: building witness (release)" >&2
cargo build --release --bins --quiet
exec python3 - "$turns" "$per" "$body" <<'PY'
import json, os, shutil, socket, statistics, subprocess, sys, tempfile, time

turns, per, body = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
W, TOY = "target/release/witness", "target/release/toy_server"
TMP = tempfile.mkdtemp(prefix="witness-bench-proxy-")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def wait_port(port, secs=15):
    end = time.time() + secs
    while time.time() < end:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    sys.exit(f"bench-proxy: nothing listens on {port}")


def wait_answer(port, path="/health", secs=15):
    end = time.time() + secs
    while time.time() < end:
        r = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}",
                            f"http://127.0.0.1:{port}{path}"], capture_output=True, text=True)
        if r.stdout == "200":
            return
        time.sleep(0.05)
    sys.exit(f"bench-proxy: no 200 from {port}{path}")


def wrapped(call):
    """A toy_server under `witness wrap --proxy`; returns (wrap process, LISTEN port, UPSTREAM)."""
    listen, up = free_port(), free_port()
    p = subprocess.Popen([W, "wrap", "--gpu", "off", "--journal", os.path.join(TMP, f"wrap-{listen}.jsonl"),
                          "--proxy", f"127.0.0.1:{listen}=127.0.0.1:{up}", "--",
                          TOY, "--port", str(up), "--call", call],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(up)
    wait_answer(listen)
    return p, listen, up


def stop(p):
    p.terminate()
    p.wait(timeout=30)


def hwm_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def p50_p99(port, tag):
    rep = os.path.join(TMP, f"{tag}.json")
    subprocess.run([W, "load", "--url", f"http://127.0.0.1:{port}/call", "--method", "GET", "--body", "",
                    "--levels", "1", "--rounds", str(per), "--settle", "0s", "--gpu", "off",
                    "--journal", os.path.join(TMP, f"{tag}.jsonl"), "--report", rep],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    lat = json.load(open(rep))["levels"][0]["latency"]
    return lat["p50"] * 1e3, lat["p99"] * 1e3


rows = []
p, listen, up = wrapped("fast")
try:
    d50, d99, x50, x99 = [], [], [], []
    for t in range(turns):
        a = p50_p99(up, f"direct{t}")
        b = p50_p99(listen, f"proxy{t}")
        d50.append(a[0]); d99.append(a[1]); x50.append(b[0]); x99.append(b[1])
    rss_latency = hwm_mib(p.pid)
finally:
    stop(p)
md, mx = statistics.median(d50), statistics.median(x50)
sec = f"latency (toy_server fast /call, 1 kept-alive conn, {per} requests × {turns} turns in turns)"
fmt = lambda xs: ", ".join(f"{x:.3f}" for x in xs)
rows.append((sec, "direct p50 (ms), per turn", fmt(d50), "1.00"))
rows.append((sec, "through the proxy p50 (ms), per turn", fmt(x50),
             f"{mx / md:.2f} × direct, +{mx - md:.3f} ms (goal ≤ 0.1 ms)"))
rows.append((sec, "p99 direct / proxy (ms, medians)", f"{statistics.median(d99):.3f} / {statistics.median(x99):.3f}",
             f"+{statistics.median(x99) - statistics.median(d99):.3f} ms"))
rows.append((sec, "witness peak RSS after the latency turns", f"{rss_latency:.0f} MiB", ""))


def curl_time(args):
    t0 = time.perf_counter()
    r = subprocess.run(["curl", "-s", "-f", "-o", "/dev/null", "-w", "%{size_download} %{size_upload}"] + args,
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"bench-proxy: curl {' '.join(args)} failed ({r.returncode}): {r.stderr}")
    return time.perf_counter() - t0, r.stdout


sec = f"bodies ({body} each way, toy_server /echo; {body} download)"
p, listen, up = wrapped(f"big:{body}")
try:
    size = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[body[-1]] * int(body[:-1])
    src = os.path.join(TMP, "body")
    with open(src, "wb") as f:
        f.truncate(size)  # sparse: reading it costs no disk
    for via, port in (("direct", up), ("proxy", listen)):
        t_up, sizes = curl_time(["-T", src, "-H", "Content-Type: application/octet-stream",
                                 f"http://127.0.0.1:{port}/echo"])
        got_down, got_up = (int(float(x)) for x in sizes.split())
        assert got_down == size and got_up == size, (via, sizes)
        t_down, sizes = curl_time([f"http://127.0.0.1:{port}/call"])
        assert int(float(sizes.split()[0])) == size, (via, sizes)
        rows.append((sec, f"{via}: echo both ways / download", f"{t_up:.2f} s / {t_down:.2f} s",
                     f"{size / t_up / 2**20:.0f} / {size / t_down / 2**20:.0f} MiB/s"))
    rows.append((sec, "witness peak RSS (VmHWM) after both", f"{hwm_mib(p.pid):.0f} MiB",
                 "bounded: far below one body"))
finally:
    stop(p)
    shutil.rmtree(TMP, ignore_errors=True)

print(f"\n{time.strftime('%Y-%m-%d')}: {os.cpu_count()} cores\n")
print("| section | what | figure | ratio |")
print("|---|---|---|---|")
last = None
for s, what, fig, ratio in rows:
    print(f"| {s if s != last else ''} | {what} | {fig} | {ratio} |")
    last = s
print("\n| goal | this run | held |\n|---|---|---|")
print(f"| the proxy adds ≤ 0.1 ms per request at the median | +{mx - md:.3f} ms | {'yes' if mx - md <= 0.1 else '**no**'} |")
PY
