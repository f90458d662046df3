#!/usr/bin/env python3
"""witness's benchmarks, side by side with wrk, oha and tini in one run; see scripts/bench.sh.

Prints one Markdown table of figures and ratios. Every load targets 127.0.0.1 only and is bounded in
time. Run through scripts/bench.sh, which installs the peers and builds witness first.
"""
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

QUICK = "--quick" in sys.argv


def flag(name, default):
    """The value after `name` on the command line (scripts/bench-relay.sh passes them), else default."""
    if name in sys.argv[1:-1]:
        return sys.argv[sys.argv.index(name) + 1]
    return default


ONLY = [s for s in flag("--only", "").split(",") if s]
CONNS = 64
SECS = 2 if QUICK else 5
ROUNDS = 1 if QUICK else 3
TMP = tempfile.mkdtemp(prefix="witness-bench-")
# witness as `cargo install --path .` (the README's install) leaves it: a copy. The linker's own
# output file, just written, starts about 0.2 ms slower than the same bytes copied (the page cache
# holds it differently), which is no property of witness.
W = os.path.join(TMP, "witness")
shutil.copy2("target/release/witness", W)
# A user's shell has no RUST_BACKTRACE; where it is set (this sandbox sets it), every error witness
# makes, a "no GPU" among them, walks the stack.
os.environ.pop("RUST_BACKTRACE", None)
os.environ.pop("RUST_LIB_BACKTRACE", None)
TOY = os.path.abspath("target/release/toy_server")
SPEW = os.path.abspath("target/release/spew")
MCP_SERVER = os.path.abspath("target/release/mcp_server")
MCP_RS_CLIENT = os.path.abspath("target/release/mcp_rs_client")
PY_CLIENT = os.path.abspath("examples/py/mcp_client.py")
rows = []  # (section, what, figure, ratio)
goals = []  # (goal, figure, held: True/False)


def goal(what, figure, held):
    """A stated goal (issue 33's cost goals), what this run measured against it, and whether it held."""
    goals.append((what, figure, held))


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def wait_port(port, secs=10):
    deadline = time.time() + secs
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    sys.exit(f"bench: nothing listens on 127.0.0.1:{port}")


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def timed_rss(cmd, **kw):
    """(wall seconds, peak RSS in MiB) of one command, from GNU time."""
    out = os.path.join(TMP, "time.out")
    t0 = time.perf_counter()
    subprocess.run(["/usr/bin/time", "-f", "%M", "-o", out] + cmd, capture_output=True, **kw)
    wall = time.perf_counter() - t0
    with open(out) as f:
        kb = int(f.read().strip().splitlines()[-1])
    return wall, kb / 1024


def nginx(port, workers="auto", pin=None):
    conf = os.path.join(TMP, f"nginx-{port}.conf")
    with open(conf, "w") as f:
        f.write(
            f"""daemon off; worker_processes {workers}; pid {TMP}/nginx-{port}.pid; error_log {TMP}/nginx-{port}.err;
events {{ worker_connections 4096; }}
http {{ access_log off; client_body_temp_path {TMP}; proxy_temp_path {TMP};
  fastcgi_temp_path {TMP}; uwsgi_temp_path {TMP}; scgi_temp_path {TMP};
  server {{ listen 127.0.0.1:{port}; location / {{ return 200 "ok"; }} }} }}
"""
        )
    p = subprocess.Popen(pinned(pin) + ["nginx", "-c", conf, "-p", TMP], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(port)
    return p


def measured(cmd, env=None):
    """(stdout, CPU seconds) of one client run: user + system time from the kernel's own accounting
    of that process (wait4's rusage: all its threads, none of anything else on the machine)."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    out = p.stdout.read()
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    return out, ru.ru_utime + ru.ru_stime


def wrk(url, conns, secs, threads=2, pin=None):
    out, cpu = measured(pinned(pin) + ["wrk", f"-t{threads}", f"-c{conns}", f"-d{secs}s", "--latency", url])
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    n = int(re.search(r"(\d+) requests in", out).group(1))

    def pct(p):
        m = re.search(rf"^\s+{p}%\s+([\d.]+)(us|ms|s)\s*$", out, re.M)
        v, u = float(m.group(1)), m.group(2)
        return v * {"us": 1e-3, "ms": 1.0, "s": 1e3}[u]

    return {"rps": rps, "p50_ms": pct(50), "p99_ms": pct(99), "cpu_us": cpu / max(n, 1) * 1e6, "n": n}


def pinned(cpu):
    """`taskset -c CPU` before a command, or nothing."""
    return [] if cpu is None else ["taskset", "-c", str(cpu)]


NAN = float("nan")


def oha(url, conns, secs, pin=None):
    if not shutil.which("oha"):
        return {"rps": NAN, "p50_ms": NAN, "p99_ms": NAN, "cpu_us": NAN, "n": 0}
    out, cpu = measured(pinned(pin) + ["oha", "-z", f"{secs}s", "-c", str(conns), "--no-tui",
                                       "--output-format", "json", url])
    if not out.strip():  # older oha: -j
        out, cpu = measured(pinned(pin) + ["oha", "-z", f"{secs}s", "-c", str(conns), "--no-tui", "-j", url])
    j = json.loads(out)
    n = sum(j.get("statusCodeDistribution", {}).values()) + sum(j.get("errorDistribution", {}).values())
    pct = j.get("latencyPercentiles", {})
    return {"rps": j["summary"]["requestsPerSec"], "p50_ms": pct.get("p50", 0) * 1e3,
            "p99_ms": pct.get("p99", 0) * 1e3, "cpu_us": cpu / max(n, 1) * 1e6, "n": n}


def request_span(e):
    """(start_s, t_s) of a journal record if it is a request, in either form, else None.

    Requests are written compactly (src/journal/codec.rs): `s` is the start, `d` the duration in
    ns, and the end `t_s` is s + d to the nearest µs plus `e` µs, unless the line says `t`. Journals
    from before the compact form say `"kind":"request"` with long names.
    """
    if e.get("k") == "rq":
        s = e["s"]
        if "t" in e:
            return s, e["t"]
        return s, (round(s * 1e6) + (e["d"] + 500) // 1000 + e.get("e", 0)) / 1e6
    if e.get("kind") == "request":
        return e["start_s"], e["t_s"]
    return None


def witness_load(url, conns, secs, tag, rss=False, rounds=None, pin=None, env=None):
    journal = os.path.join(TMP, f"{tag}.jsonl")
    report = os.path.join(TMP, f"{tag}.json")
    budget = ["--rounds", str(rounds)] if rounds else ["--duration", f"{secs}s"]
    cmd = [W, "load", "--url", url, "--method", "GET", "--body", "", "--levels", str(conns),
           *budget, "--settle", "0s", "--gpu", "off",
           "--journal", journal, "--report", report]
    cpu = None
    if rss:
        _, peak = timed_rss(cmd)
    else:
        _, cpu = measured(pinned(pin) + cmd, env=env)
        peak = None
    n, first_start, last_end = 0, None, 0.0
    with open(journal) as f:
        next(f)
        for line in f:
            span = request_span(json.loads(line))
            if span:
                n += 1
                s, t = span
                first_start = s if first_start is None else min(first_start, s)
                last_end = max(last_end, t)
    level = json.load(open(report))["levels"][0]
    lat = level["latency"] or {}
    return {
        "rps": n / (last_end - first_start),
        "n": n,
        "p50_ms": lat.get("p50", 0) * 1e3,
        "p99_ms": lat.get("p99", 0) * 1e3,
        "first_s": first_start,
        "journal": journal,
        "bytes_per_req": os.path.getsize(journal) / max(n, 1),
        "peak_mib": peak,
        # witness's whole process, its start-up, probes and end-of-run report included.
        "cpu_us_whole": cpu / max(n, 1) * 1e6 if cpu is not None else NAN,
        # While the level sent (witness's own accounting, journalled at the level's end): the
        # client's cost, as wrk's and oha's whole runs are.
        "cpu_us": (level.get("witness_cpu_s") or NAN) / max(n, 1) * 1e6,
    }


HYPER = dict(os.environ, WITNESS_HTTP1="hyper")


def throughput():
    """Two sections: the machine shared as a user runs it (nginx's workers and the client on both
    cores: the server is the bottleneck, so what separates the clients is the CPU each request costs
    them), and client-bound (the client alone on core 0 with one thread where it has the choice,
    nginx's single worker alone on core 1: req/s is the client's own limit)."""
    cases = [
        ("shared", f"nginx return 200, both cores shared, {CONNS} conns, {SECS} s, {ROUNDS} rounds in turns", None, "auto", 2),
        ("bound", f"client-bound: client on core 0, one nginx worker on core 1, {CONNS} conns, {SECS} s, {ROUNDS} rounds", 0, "1", 1),
    ]
    if os.cpu_count() < 2:
        cases = cases[:1]
    for key, sec, pin, workers, wrk_threads in cases:
        port = free_port()
        p = nginx(port, workers=workers, pin=None if pin is None else 1)
        url = f"http://127.0.0.1:{port}/"
        runs = {k: [] for k in ("wrk", "oha", "witness", "witness (hyper)")}
        try:
            for r in range(ROUNDS):
                runs["wrk"].append(wrk(url, CONNS, SECS, threads=wrk_threads, pin=pin))
                runs["oha"].append(oha(url, CONNS, SECS, pin=pin))
                runs["witness"].append(witness_load(url, CONNS, SECS, f"tp{key}{r}", pin=pin))
                runs["witness (hyper)"].append(witness_load(url, CONNS, SECS, f"tph{key}{r}", pin=pin, env=HYPER))
        finally:
            p.terminate()
            p.wait()
        med = {k: {f: statistics.median(x[f] for x in v) for f in ("rps", "cpu_us")} for k, v in runs.items()}
        w = med["wrk"]
        for k in runs:
            m = med[k]
            label = {"wrk": "wrk", "oha": "oha",
                     "witness": "witness load (journal on)",
                     "witness (hyper)": "witness load, WITNESS_HTTP1=hyper (journal on)"}[k]
            each = ", ".join(f"{x['cpu_us']:.1f}" for x in runs[k])
            rows.append((sec, f"{label}: µs CPU / request", f"{m['cpu_us']:.2f} ({each})",
                         f"{m['cpu_us'] / w['cpu_us']:.2f} × wrk" + (
                             f", {m['cpu_us'] / med['oha']['cpu_us']:.2f} × oha" if k.startswith("witness") else "")))
            rows.append((sec, f"{label}: req/s", f"{m['rps'] / 1000:.1f} k", f"{m['rps'] / w['rps']:.2f} × wrk"))
            if k == "witness":
                whole = statistics.median(x["cpu_us_whole"] for x in runs[k])
                rows.append((sec, "witness load, whole process (start-up, probes, end-of-run report): µs CPU / request",
                             f"{whole:.2f}", f"{whole / w['cpu_us']:.2f} × wrk"))
                if key == "shared":
                    goal("whole-process CPU per request ≤ 1.1 × wrk's (every request journalled; nginx shares the cores)",
                         f"{whole / w['cpu_us']:.2f} × wrk", whole / w["cpu_us"] <= 1.1)


SOAK_PLAN = """interval = "1s"
timeout = "5s"
[target]
base_url = "http://127.0.0.1:{port}"
[kinds.get]
method = "GET"
path = "/"
[[drivers]]
count = 32
cycle = ["burst"]
burst = {{ requests = 1000, gap = "1ms" }}
"""


def memory():
    port = free_port()
    p = nginx(port)
    url = f"http://127.0.0.1:{port}/"
    sec = "memory (peak RSS)"
    growth = []
    try:
        # load: a fixed request count per run (rounds per connection), small and 10-50× larger.
        runs = []
        for n in ([100_000, 1_000_000] if QUICK else [100_000, 5_000_000]):
            r = witness_load(url, CONNS, 0, f"mem{n}", rss=True, rounds=n // CONNS)
            _, rep = timed_rss([W, "report", r["journal"], "--format", "json", "-o", os.path.join(TMP, "rep.json")])
            os.remove(r["journal"])
            runs.append((r["n"], r["peak_mib"], rep))
            rows.append((sec, f"witness load, {r['n'] / 1000:.0f} k requests", f"{r['peak_mib']:.0f} MiB", ""))
            rows.append((sec, "witness report on that journal", f"{rep:.0f} MiB", ""))
            rows.append((sec, "journal size", f"{r['bytes_per_req']:.0f} B/request", "goal ≤ 100"))
        (n1, l1, r1), (n2, l2, r2) = runs
        growth.append(f"load {l2 / l1:.2f}×, report {r2 / r1:.2f}× for {n2 / n1:.0f}× the requests")
        # soak: the same plan for a short and a long duration.
        plan = os.path.join(TMP, "plan.toml")
        open(plan, "w").write(SOAK_PLAN.format(port=port))
        soaks = []
        for secs in ([2, 8] if QUICK else [5, 40]):
            journal = os.path.join(TMP, f"soak{secs}.jsonl")
            report = os.path.join(TMP, f"soak{secs}.json")
            _, peak = timed_rss([W, "soak", "--plan", plan, "--duration", f"{secs}s", "--gpu", "off",
                                 "--seed", "1", "--journal", journal, "--report", report])
            _, rep = timed_rss([W, "report", journal, "--format", "json", "-o", os.path.join(TMP, "rep.json")])
            n = json.load(open(report))["totals"]["requests"]
            os.remove(journal)
            soaks.append((n, peak, rep))
            rows.append((sec, f"witness soak, {n / 1000:.0f} k requests", f"{peak:.0f} MiB", ""))
            rows.append((sec, "witness report on that journal", f"{rep:.0f} MiB", ""))
        (n1, s1, q1), (n2, s2, q2) = soaks
        growth.append(f"soak {s2 / s1:.2f}×, report {q2 / q1:.2f}× for {n2 / n1:.0f}× the requests")
        rows.append((sec, "peak RSS, larger run ÷ smaller run", "; ".join(growth), "goal: flat (±10 %), ≤ 50 MB"))
        peak = runs[1][1] * 1.048576  # MiB → MB
        goal(f"witness load's peak RSS flat and ≤ 25 MB at {runs[1][0] / 1e6:.1f} M requests",
             f"{peak:.0f} MB ({runs[1][1] / runs[0][1]:.2f} × the {runs[0][0] / 1000:.0f} k run's)",
             peak <= 25 and runs[1][1] <= runs[0][1] * 1.1)
    finally:
        p.terminate()
        p.wait()


def latency():
    port = free_port()
    srv = subprocess.Popen([TOY, "--port", str(port), "--call", "sleep:20ms"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(port)
    url = f"http://127.0.0.1:{port}/call"
    sec = "latency (toy_server, fixed 20 ms, 8 conns)"
    try:
        w = wrk(url, 8, SECS)
        o = oha(url, 8, SECS)
        x = witness_load(url, 8, SECS, "lat")
    finally:
        srv.terminate()
        srv.wait()
    rows.append((sec, "wrk p50 / p99", f"{w['p50_ms']:.2f} / {w['p99_ms']:.2f} ms", f"overhead {w['p50_ms'] - 20:.2f} ms"))
    rows.append((sec, "oha p50 / p99", f"{o['p50_ms']:.2f} / {o['p99_ms']:.2f} ms", f"overhead {o['p50_ms'] - 20:.2f} ms"))
    rows.append((sec, "witness p50 / p99", f"{x['p50_ms']:.2f} / {x['p99_ms']:.2f} ms",
                 f"overhead {x['p50_ms'] - 20:.2f} ms ({x['p50_ms'] - w['p50_ms']:+.2f} ms vs wrk, goal within 0.05)"))


def wrapping():
    size = "256m" if QUICK else "1g"
    label = "256 MiB" if QUICK else "1 GiB"
    spew = [SPEW, "--long-line", "0", "--lines", size]
    runs = 1 if QUICK else 3
    # The child's output goes to /dev/null in each: spew's own stdout, cat's stdout (the pipe is
    # read and its bytes written on), witness's stdout (likewise). Taken in turns, round by round,
    # so that a busy machine weighs on the three alike.
    cmds = [
        ("alone", spew, False),
        ("cat", " ".join(spew) + " | cat", True),
        ("wrap", [W, "wrap", "--watch", "boom=ERROR|FATAL", "--journal",
                  os.path.join(TMP, "wrap.jsonl"), "--"] + spew, False),
    ]
    ts = {k: [] for k, _, _ in cmds}
    for _ in range(runs):
        for k, cmd, shell in cmds:
            t0 = time.perf_counter()
            subprocess.run(cmd, shell=shell, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            ts[k].append(time.perf_counter() - t0)
    alone, cat, wrapped = (statistics.median(ts[k]) for k in ("alone", "cat", "wrap"))
    sec = f"wrapping (a child writing {label} of 100-byte lines, watch patterns on; median of {runs} in turns)"
    rows.append((sec, "spew > /dev/null", f"{alone:.2f} s", "1.00"))
    rows.append((sec, "spew \\| cat > /dev/null", f"{cat:.2f} s", f"{cat / alone:.2f} × alone"))
    rows.append((sec, "witness wrap -- spew > /dev/null", f"{wrapped:.2f} s",
                 f"{wrapped / cat:.2f} × cat (goal ≤ 0.5), {wrapped / alone:.2f} × alone"))


def startup():
    n = 10 if QUICK else 30
    true = shutil.which("true")
    cmds = {
        "true": [true],
        "tini": ["tini", "-s", "--", true],
        "wrap": [W, "wrap", "--journal", os.path.join(TMP, "s.jsonl"), "--", true],
    }
    # In turns (true, tini, wrap, true, …), as the issue measured: each run's start is timed on
    # the same machine state, and what one run leaves the kernel to finish (a cgroup's removal, a
    # process's exit) is not charged to the next run of the same command only.
    ts = {k: [] for k in cmds}
    for _ in range(n):
        for k, cmd in cmds.items():
            t0 = time.perf_counter()
            subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            ts[k].append(time.perf_counter() - t0)
    plain, tini, wrap = (statistics.median(ts[k]) * 1e3 for k in ("true", "tini", "wrap"))
    sec = f"start-up (median of {n}, in turns)"
    rows.append((sec, "true", f"{plain:.1f} ms", ""))
    rows.append((sec, "tini -s -- true", f"{tini:.1f} ms", f"{tini / plain:.1f} × true"))
    rows.append((sec, "witness wrap -- true", f"{wrap:.1f} ms", f"{wrap / tini:.1f} × tini"))
    goal("witness wrap -- true ≤ 3 × tini -s -- true", f"{wrap / tini:.1f} × tini ({wrap:.1f} ms, {tini:.1f} ms)", wrap / tini <= 3)
    port = free_port()
    p = nginx(port)
    try:
        r = witness_load(f"http://127.0.0.1:{port}/", 1, 1, "first")
    finally:
        p.terminate()
        p.wait()
    rows.append((sec, "witness load: start to first request", f"{r['first_s'] * 1e3:.0f} ms",
                 "connect floor + health probe included"))


def median_us(cmd, env=None):
    """The `median_us` line of one MCP client session (examples/mcp_rs_client.rs, or the Python
    SDK's examples/py/mcp_client.py with TIMINGS=1); a session that did not go as asked ends the
    benchmark, since its figure would not be a round trip."""
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    m = re.search(r"^median_us (\d+)$", res.stdout, re.M)
    if res.returncode != 0 or not m:
        sys.exit(f"bench: {' '.join(cmd)} failed (exit {res.returncode}):\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}")
    return int(m.group(1))


def relay():
    """What `witness wrap`'s stdio relay adds to an MCP round trip (issue 19's goal: at most 50 µs at
    the median per call). A client launches the example server directly, then through
    `witness wrap --stdin inherit` (the child keeps the client's pipes: supervision only, the control)
    and through `witness wrap` (relayed: every byte both ways passes through witness and is read
    for its JSON-RPC); each session makes CALLS sequential `echo` calls, answered at once. Taken in
    turns, the order rotated each round, so that a busy machine weighs on all alike; the figure is
    the median over rounds of each session's median."""
    rounds = int(flag("--rounds", 1 if QUICK else 5))
    calls = int(flag("--calls", 200 if QUICK else 2000))
    journal = os.path.join(TMP, "relay.jsonl")
    paths = [
        ("direct", []),
        ("inherit", [W, "wrap", "--stdin", "inherit", "--journal", journal, "--"]),
        ("relay", [W, "wrap", "--journal", journal, "--"]),
    ]
    clients = [("rmcp (Rust SDK)", lambda via: median_us([MCP_RS_CLIENT, "--calls", str(calls), "--"] + via + [MCP_SERVER]))]
    py_ok = run(["python3", "-c", "import mcp.client.stdio"]).returncode == 0
    if py_ok:
        env = dict(os.environ, TIMINGS="1")
        py_calls = max(calls // 4, 1)  # the Python client is slower per call; a quarter keeps the runs alike in length
        clients.append((f"mcp (Python SDK), {py_calls} calls",
                        lambda via: median_us(["python3", PY_CLIENT, str(py_calls)] + via + [MCP_SERVER], env)))
    elif os.environ.get("CI") == "true":
        sys.exit("bench: the MCP Python SDK is missing on CI (`python3 -c 'import mcp.client.stdio'` failed)")
    else:
        print("bench: SKIPPED the Python SDK client: `python3 -c 'import mcp.client.stdio'` failed", file=sys.stderr)
    sec = f"relay (mcp_server echo, {calls} sequential calls a session; median of {rounds} rounds in turns)"
    for name, session in clients:
        us = {k: [] for k, _ in paths}
        for r in range(rounds):
            for k, via in paths[r % len(paths):] + paths[:r % len(paths)]:
                us[k].append(session(via))
        d, i, w = (statistics.median(us[k]) for k in ("direct", "inherit", "relay"))
        each = lambda k: ", ".join(str(x) for x in us[k])
        rows.append((sec, f"{name}: direct, µs per call", f"{d:.0f} ({each('direct')})", "1.00"))
        rows.append((sec, f"{name}: witness wrap --stdin inherit", f"{i:.0f} ({each('inherit')})",
                     f"{i - d:+.0f} µs, {i / d:.2f} × direct"))
        rows.append((sec, f"{name}: witness wrap (relayed)", f"{w:.0f} ({each('relay')})",
                     f"{w - d:+.0f} µs, {w / d:.2f} × direct (goal ≤ +50 µs)"))
        goal(f"the relay adds ≤ 50 µs per call at the median ({name})", f"{w - d:+.0f} µs", w - d <= 50)


def main():
    steps = (throughput, latency, memory, wrapping, startup, relay)
    unknown = [s for s in ONLY if s not in {f.__name__ for f in steps}]
    if unknown:
        sys.exit(f"bench: --only {','.join(unknown)}: no such section (sections: {', '.join(f.__name__ for f in steps)})")
    for step in steps:
        if ONLY and step.__name__ not in ONLY:
            continue
        print(f"bench: {step.__name__} …", file=sys.stderr, flush=True)
        step()
    host = socket.gethostname()
    cpu = ""
    try:
        cpu = re.search(r"model name\s*:\s*(.*)", open("/proc/cpuinfo").read()).group(1)
    except Exception:
        pass
    print(f"\n{time.strftime('%Y-%m-%d')} on {host}: {os.cpu_count()} cores, {cpu}\n")
    print("| section | what | figure | ratio |")
    print("|---|---|---|---|")
    last = None
    for sec, what, fig, ratio in rows:
        print(f"| {sec if sec != last else ''} | {what} | {fig} | {ratio} |")
        last = sec
    if goals:
        print("\n| goal | this run | held |")
        print("|---|---|---|")
        for what, fig, held in goals:
            print(f"| {what} | {fig} | {'yes' if held else '**no**'} |")
        print("\nThe proxy's goal (≤ +0.1 ms per request at the median) is scripts/bench-proxy.sh's.")
    shutil.rmtree(TMP, ignore_errors=True)


if __name__ == "__main__":
    main()
