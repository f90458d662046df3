//! HTTPS and HTTP/2 against real TLS servers: Debian's nginx and uvicorn (PyPI) with certificates
//! each test makes with `openssl`: a development CA and a leaf it signed, a self-signed leaf, an
//! expired leaf, a leaf for another name. A certificate witness does not trust refuses the run
//! (exit 3) in words with both ways out; `--cacert` and `--insecure` pass; the handshake is
//! journalled per new connection and never on a reused one. nginx, uvicorn and openssl are
//! installed by `.ci/run`; without them a test says it skipped (and fails under CI=true).

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::*;

fn sh(dir: &Path, script: &str) {
    let out = Command::new("sh")
        .args(["-ec", script])
        .current_dir(dir)
        .output()
        .expect("sh");
    assert!(
        out.status.success(),
        "{script}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The certificates, in `dir`: `ca.pem` (a development CA) and `leaf.pem`/`leaf.key` signed by it
/// for localhost and 127.0.0.1; `self.pem`/`self.key` self-signed; `expired.pem` (the leaf's key,
/// signed by the CA, valid only on 1 January 2020); `other.pem` (the leaf's key, for other.test).
fn certificates(dir: &Path) -> bool {
    if !have("openssl", "command -v openssl") {
        return false;
    }
    let ec = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
    sh(
        dir,
        &format!(
            r#"
openssl req -x509 {ec} -keyout ca.key -out ca.pem -days 30 -subj "/CN=witness test CA" 2>/dev/null
openssl req {ec} -keyout leaf.key -out leaf.csr -subj "/CN=witness test leaf" 2>/dev/null
printf 'basicConstraints=critical,CA:FALSE\nsubjectAltName=DNS:localhost,IP:127.0.0.1\n' > ext.cnf
printf 'basicConstraints=critical,CA:FALSE\nsubjectAltName=DNS:other.test\n' > other.cnf
openssl x509 -req -in leaf.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out leaf.pem -days 30 -extfile ext.cnf 2>/dev/null
openssl x509 -req -in leaf.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out other.pem -days 30 -extfile other.cnf 2>/dev/null
openssl req -x509 {ec} -keyout self.key -out self.pem -days 30 -subj "/CN=witness self-signed test" \
  -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" -addext "basicConstraints=critical,CA:FALSE" 2>/dev/null
# A validity in the past: openssl 3.0's x509 cannot set one, its `ca` can.
mkdir -p ca && : > ca/index.txt && echo 01 > ca/serial
printf '[ca]\ndefault_ca=t\n[t]\ndir=ca\ndatabase=ca/index.txt\nnew_certs_dir=ca\nserial=ca/serial\ndefault_md=sha256\npolicy=p\nunique_subject=no\n[p]\ncommonName=supplied\n' > ca.cnf
openssl ca -batch -config ca.cnf -cert ca.pem -keyfile ca.key -in leaf.csr -out expired.pem \
  -startdate 20200101000000Z -enddate 20200102000000Z -extfile ext.cnf -notext 2>/dev/null
"#
        ),
    );
    true
}

/// nginx serving `ok` over TLS with `cert` (and the leaf's or self's key) on `port`; `extra` goes
/// in the server block (e.g. `keepalive_requests 5;`), `listen` options after `ssl` (`http2`).
fn nginx_tls(dir: &Path, port: u16, cert: &str, listen: &str, extra: &str) -> Bg {
    let nginx = nginx().expect("checked");
    let key = if cert == "self" { "self" } else { "leaf" };
    let d = dir.display();
    let conf = format!(
        r#"
daemon off;
worker_processes 1;
pid {d}/nginx-{port}.pid;
error_log stderr warn;
events {{ worker_connections 512; }}
http {{
  access_log off;
  log_format proto '$server_protocol';
  client_body_temp_path {d}/body;
  proxy_temp_path {d}/proxy;
  fastcgi_temp_path {d}/fastcgi;
  uwsgi_temp_path {d}/uwsgi;
  scgi_temp_path {d}/scgi;
  server {{
    listen 127.0.0.1:{port} ssl {listen};
    ssl_certificate {d}/{cert}.pem;
    ssl_certificate_key {d}/{key}.key;
    {extra}
    location / {{ return 200 "ok\n"; }}
  }}
}}
"#
    );
    let path = dir.join(format!("nginx-{port}.conf"));
    std::fs::write(&path, conf).unwrap();
    let bg = Bg::start(Command::new(nginx).args(["-e", "stderr", "-c"]).arg(&path));
    wait_listening(port);
    bg
}

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `witness load` on `url`, attached, with `args`; its journal and JSON report in `dir`.
fn load(
    dir: &Path,
    tag: &str,
    url: &str,
    args: &[&str],
) -> (std::process::Output, PathBuf, PathBuf) {
    let journal = dir.join(format!("{tag}.jsonl"));
    let report = dir.join(format!("{tag}.json"));
    let out = run_bounded(
        Command::new(witness())
            .args(["load", "--url", url, "--settle", "100ms"])
            .arg("--journal")
            .arg(&journal)
            .arg("--report")
            .arg(&report)
            .args(args),
        Duration::from_secs(60),
    );
    (out, journal, report)
}

fn setup(tag: &str) -> Option<PathBuf> {
    nginx()?;
    let dir = tempdir(tag);
    certificates(&dir).then_some(dir)
}

#[test]
fn a_self_signed_certificate_refuses_the_run_in_words_and_cacert_or_insecure_pass() {
    let Some(dir) = setup("tls-self") else { return };
    let port = free_port();
    let _nginx = nginx_tls(&dir, port, "self", "", "");
    let url = format!("https://127.0.0.1:{port}/");
    let (out, journal, _) = load(&dir, "refused", &url, &["--levels", "2", "--rounds", "5"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("not trusted: unknown issuer"), "{err}");
    assert!(
        err.contains("--cacert FILE") && err.contains("--insecure"),
        "{err}"
    );
    // Refused before any load: not one request sent.
    let lines = journal_lines(&journal);
    assert!(lines.iter().all(|l| l["kind"] != "request"), "{lines:?}");

    let cacert = dir.join("self.pem");
    // A credential header stays masked over TLS as over plain HTTP.
    let token = "tok-7c1d0e55-tls-bearer";
    let journal = dir.join("cacert.jsonl");
    let report = dir.join("cacert.json");
    let out = run_bounded(
        Command::new(witness())
            .args(["load", "--url", &url, "--settle", "100ms"])
            .args([
                "--levels",
                "2",
                "--rounds",
                "5",
                "--header-env",
                "Authorization=WITNESS_TLS_AUTH",
            ])
            .arg("--cacert")
            .arg(&cacert)
            .arg("--journal")
            .arg(&journal)
            .arg("--report")
            .arg(&report)
            .env("WITNESS_TLS_AUTH", format!("Bearer {token}")),
        Duration::from_secs(60),
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(json(&report)["levels"][0]["counts"]["ok"], 10);
    for p in [&journal, &report] {
        let text = std::fs::read_to_string(p).unwrap();
        assert!(!text.contains(token), "{}", p.display());
    }

    let (out, _, report) = load(
        &dir,
        "insecure",
        &url,
        &["--levels", "2", "--rounds", "5", "--insecure"],
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    // Said once on the terminal, and in the report's notes.
    assert_eq!(err.matches("witness: ! --insecure").count(), 1, "{err}");
    let r = std::fs::read_to_string(&report).unwrap();
    assert!(
        r.contains("--insecure: the server's TLS certificate is not verified"),
        "{r}"
    );
    // No key or certificate content in any artifact.
    for f in std::fs::read_dir(&dir).unwrap().flatten() {
        let p = f.path();
        if matches!(
            p.extension().and_then(|e| e.to_str()),
            Some("json" | "jsonl")
        ) {
            let text = std::fs::read_to_string(&p).unwrap();
            assert!(!text.contains("BEGIN"), "{}: {text}", p.display());
        }
    }
}

#[test]
fn an_expired_or_misnamed_certificate_is_named_for_what_it_is() {
    let Some(dir) = setup("tls-expired") else {
        return;
    };
    let cacert = dir.join("ca.pem");
    let ca = cacert.to_str().unwrap();
    let (p1, p2) = (free_port(), free_port());
    let _expired = nginx_tls(&dir, p1, "expired", "", "");
    let _other = nginx_tls(&dir, p2, "other", "", "");
    let (out, _, _) = load(
        &dir,
        "expired",
        &format!("https://127.0.0.1:{p1}/"),
        &["--levels", "1", "--rounds", "3", "--cacert", ca],
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(
        err.contains("it has expired: it was valid until 2020-01-02T00:00:00Z"),
        "{err}"
    );
    assert!(err.contains("--insecure"), "{err}");
    let (out, _, _) = load(
        &dir,
        "other",
        &format!("https://localhost:{p2}/"),
        &["--levels", "1", "--rounds", "3", "--cacert", ca],
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(
        err.contains("wrong name: it is for other.test (the names it holds), not for localhost (the name asked)"),
        "{err}"
    );
}

#[test]
fn the_handshake_is_its_own_phase_journalled_per_new_connection_never_on_a_reused_one() {
    let Some(dir) = setup("tls-phase") else {
        return;
    };
    let port = free_port();
    let _nginx = nginx_tls(&dir, port, "leaf", "", "keepalive_requests 1000;");
    let cacert = dir.join("ca.pem");
    let (out, journal, report) = load(
        &dir,
        "phase",
        &format!("https://127.0.0.1:{port}/"),
        &[
            "--levels",
            "1,4",
            "--rounds",
            "20",
            "--cacert",
            cacert.to_str().unwrap(),
        ],
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("TLS handshake floor"), "{err}");
    let lines = journal_lines(&journal);
    let reqs: Vec<_> = lines.iter().filter(|l| l["kind"] == "request").collect();
    assert_eq!(reqs.len(), 20 + 80, "{lines:?}");
    let shook: Vec<_> = reqs
        .iter()
        .filter(|r| r["handshake_s"].is_number())
        .collect();
    // One new connection per worker: 1 + 4, each with its connect and its handshake.
    assert_eq!(shook.len(), 5, "{reqs:?}");
    for r in &reqs {
        assert_eq!(
            r["handshake_s"].is_number(),
            r["connect_s"].is_number(),
            "a handshake only where a connection was opened: {r}"
        );
        if let (Some(c), Some(t), Some(h)) = (
            r["connect_s"].as_f64(),
            r["handshake_s"].as_f64(),
            r["headers_s"].as_f64(),
        ) {
            assert!(t > 0.0 && c + t <= h + 1e-6, "{r}");
        }
    }
    let floor = lines.iter().find(|l| l["kind"] == "connect_floor").unwrap();
    assert!(floor["handshake_ms"].as_f64().unwrap() > 0.0, "{floor}");
    let r = json(&report);
    for l in r["levels"].as_array().unwrap() {
        let p = &l["phases"];
        assert!(p["handshake"]["p50"].as_f64().unwrap() > 0.0, "{l:#}");
        assert!(p["handshake"]["p99"].as_f64().unwrap() > 0.0, "{l:#}");
        assert_eq!(p["new_connections"], l["concurrency"], "{l:#}");
    }
    // The terminal's phases line names it.
    let text = String::from_utf8_lossy(&out.stdout).to_string() + &err;
    assert!(text.contains("TLS handshake p50"), "{text}");
}

#[test]
fn a_cacert_that_is_missing_or_not_pem_is_bad_usage_naming_the_flag() {
    let dir = tempdir("tls-badinput");
    let not_pem = dir.join("not.pem");
    std::fs::write(&not_pem, "not a certificate\n").unwrap();
    for (file, words) in [
        (
            PathBuf::from("/nonexistent/ca.pem"),
            "could not read the file",
        ),
        (not_pem, "holds no PEM certificate"),
    ] {
        let out = run_bounded(
            Command::new(witness())
                .args(["load", "--url", "https://127.0.0.1:9/", "--levels", "1"])
                .arg("--cacert")
                .arg(&file),
            Duration::from_secs(20),
        );
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(
            err.contains(&format!("--cacert {}", file.display())),
            "{err}"
        );
        assert!(err.contains(words), "{err}");
    }
}

/// A tiny ASGI app: 200 `ok` on every path.
const ASGI: &str = r#"
import sys, uvicorn
async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"ok\n"})
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning",
            ssl_certfile=sys.argv[2], ssl_keyfile=sys.argv[3], timeout_keep_alive=1)
"#;

#[test]
fn uvicorn_over_tls_started_by_witness_is_measured_and_its_untrusted_certificate_refused_at_once() {
    if !have("uvicorn", "python3 -c 'import uvicorn'") {
        return;
    }
    let dir = tempdir("tls-uvicorn");
    if !certificates(&dir) {
        return;
    }
    let app = dir.join("app.py");
    std::fs::write(&app, ASGI).unwrap();
    let run = |tag: &str, trust: &[&str]| {
        let port = free_port();
        let (out, journal, report) = load(
            &dir,
            tag,
            &format!("https://127.0.0.1:{port}/"),
            &[
                &[
                    "--levels",
                    "1,2",
                    "--rounds",
                    "10",
                    "--ready-timeout",
                    "20s",
                ],
                trust,
                &[
                    "--",
                    "python3",
                    app.to_str().unwrap(),
                    &port.to_string(),
                    dir.join("leaf.pem").to_str().unwrap(),
                    dir.join("leaf.key").to_str().unwrap(),
                ],
            ]
            .concat(),
        );
        (out, journal, report)
    };
    // Waiting for the server to be ready does not wait for a certificate to become trusted.
    let started = std::time::Instant::now();
    let (out, _, _) = run("untrusted", &[]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(
        err.contains("unknown issuer") && err.contains("--cacert"),
        "{err}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
    let ca = dir.join("ca.pem");
    let (out, journal, report) = run("trusted", &["--cacert", ca.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(json(&report)["levels"][1]["counts"]["ok"], 20);
    let lines = journal_lines(&journal);
    let shook = lines
        .iter()
        .filter(|l| l["kind"] == "request" && l["handshake_s"].is_number())
        .count();
    assert_eq!(shook, 3, "one handshake per worker's connection");
}

/// The most requests in flight at once, from the journal's start and end times.
fn most_at_once(reqs: &[&serde_json::Value]) -> usize {
    let mut edges: Vec<(f64, i32)> = Vec::new();
    for r in reqs {
        let s = r["start_s"].as_f64().unwrap();
        edges.push((s, 1));
        edges.push((s + r["duration_s"].as_f64().unwrap(), -1));
    }
    edges.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let (mut now, mut most) = (0i32, 0i32);
    for (_, d) in edges {
        now += d;
        most = most.max(now);
    }
    most as usize
}

#[test]
fn http2_over_tls_sends_a_level_s_streams_concurrently_on_one_connection() {
    let Some(dir) = setup("tls-h2") else { return };
    let port = free_port();
    let _nginx = nginx_tls(&dir, port, "leaf", "http2", "keepalive_requests 10000;");
    let cacert = dir.join("ca.pem");
    let (out, journal, report) = load(
        &dir,
        "h2",
        &format!("https://127.0.0.1:{port}/"),
        &[
            "--http2",
            "--levels",
            "1,8",
            "--rounds",
            "25",
            "--cacert",
            cacert.to_str().unwrap(),
        ],
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let r = json(&report);
    for l in r["levels"].as_array().unwrap() {
        assert_eq!(
            l["counts"]["ok"],
            25 * l["concurrency"].as_u64().unwrap(),
            "{l:#}"
        );
        assert_eq!(l["held"], 1, "{l:#}");
        assert_eq!(l["phases"]["new_connections"], 1, "{l:#}");
        assert_eq!(
            l["protocol"], "HTTP/2 over TLS (ALPN h2): streams over 1 connection (1 opened)",
            "{l:#}"
        );
    }
    let lines = journal_lines(&journal);
    let level8: Vec<_> = lines
        .iter()
        .filter(|l| l["kind"] == "request" && l["group"] == "level1")
        .collect();
    assert_eq!(level8.len(), 200);
    // One connection, and streams on it at the same time.
    assert!(most_at_once(&level8) >= 2, "no two streams overlapped");
    let text = String::from_utf8_lossy(&out.stdout).to_string() + &err;
    assert!(text.contains("protocol (n=8): HTTP/2 over TLS"), "{text}");
}

#[test]
fn a_goaway_mid_level_sends_the_streams_the_server_did_not_process_again_over_new_connections() {
    let Some(dir) = setup("tls-goaway") else {
        return;
    };
    let (tls, clear) = (free_port(), free_port());
    // nginx ends an HTTP/2 connection with GOAWAY after keepalive_requests streams.
    let _nginx = nginx_tls(&dir, tls, "leaf", "http2", "keepalive_requests 7;");
    let nginx = nginx().unwrap();
    let d = dir.display();
    let conf = format!(
        "daemon off;\nworker_processes 1;\npid {d}/h2c.pid;\nerror_log stderr warn;\nevents {{ worker_connections 512; }}\n\
         http {{ access_log off; client_body_temp_path {d}/body; proxy_temp_path {d}/proxy; fastcgi_temp_path {d}/fastcgi; uwsgi_temp_path {d}/uwsgi; scgi_temp_path {d}/scgi;\n\
         server {{ listen 127.0.0.1:{clear} http2; keepalive_requests 7; location / {{ return 200 \"ok\\n\"; }} }} }}\n"
    );
    std::fs::write(dir.join("h2c.conf"), conf).unwrap();
    let _h2c = Bg::start(
        Command::new(nginx)
            .args(["-e", "stderr", "-c"])
            .arg(dir.join("h2c.conf")),
    );
    wait_listening(clear);
    let cacert = dir.join("ca.pem");
    for (tag, url, extra) in [
        (
            "tls",
            format!("https://127.0.0.1:{tls}/"),
            vec!["--cacert", cacert.to_str().unwrap()],
        ),
        (
            "h2c",
            format!("http://127.0.0.1:{clear}/"),
            vec!["--connections", "2"],
        ),
    ] {
        let (out, journal, report) = load(
            &dir,
            tag,
            &url,
            &[&["--http2", "--levels", "8", "--rounds", "20"][..], &extra].concat(),
        );
        let err = stderr(&out);
        let r = json(&report);
        let l = &r["levels"][0];
        let c = &l["counts"];
        assert_eq!(c["timeout"], 0, "{tag}: {l:#}");
        assert!(c["ok"].as_u64().unwrap() >= 100, "{tag}: {l:#}");
        assert_eq!(
            c["ok"].as_u64().unwrap() + c["error"].as_u64().unwrap(),
            160,
            "{tag}: {l:#}"
        );
        // The streams above each GOAWAY's last-stream-id were sent again; a failure is only one
        // the server did not process on four connections in a row (rare at 8 streams over 7).
        let kinds = l["errors_by_kind"].as_object().unwrap();
        assert!(
            kinds.keys().all(|k| k == "error: HTTP/2 GOAWAY"),
            "{tag}: {kinds:?}"
        );
        let lines = journal_lines(&journal);
        for f in lines
            .iter()
            .filter(|l| l["kind"] == "request" && l["outcome"]["kind"] == "error")
        {
            assert_eq!(f["outcome"]["error"], "goaway", "{f}");
            assert!(
                f["detail"]
                    .as_str()
                    .unwrap()
                    .contains("did not process this stream, sent 4 times"),
                "{f}"
            );
        }
        let conns = &l["connections"];
        assert!(
            conns["resent"].as_u64().unwrap() >= 1,
            "{tag}: {conns}\n{err}"
        );
        assert_eq!(conns["ends"][0]["how"], "goaway", "{tag}: {conns}");
        assert_eq!(conns["ends"][0]["reason"], "NO_ERROR", "{tag}: {conns}");
        assert_eq!(conns["ends"][0]["streams_max"], 7, "{tag}: {conns}");
        // New connections replaced the ones the server closed: at most 7 answered on each.
        assert!(
            l["phases"]["new_connections"].as_u64().unwrap() * 7 >= c["ok"].as_u64().unwrap(),
            "{tag}: {l:#}"
        );
        assert!(
            l["protocol"].as_str().unwrap().starts_with("HTTP/2"),
            "{l:#}"
        );
    }
}

#[test]
fn mcp_over_streamable_http_behind_a_tls_proxy_is_listed_and_loaded_and_wrap_s_proxy_speaks_tls_upstream(
) {
    let Some(dir) = setup("tls-mcp") else { return };
    let (mcp, tls) = (free_port(), free_port());
    let d = dir.display();
    let protocols = || std::fs::read_to_string(dir.join("mcp-access.log")).unwrap_or_default();
    let _server = Bg::start(
        Command::new(env!("CARGO_BIN_EXE_mcp_server")).args(["--http", &mcp.to_string()]),
    );
    wait_listening(mcp);
    let _nginx = nginx_tls(
        &dir,
        tls,
        "leaf",
        "http2",
        &format!(
            "access_log {d}/mcp-access.log proto; location /mcp {{ proxy_pass http://127.0.0.1:{mcp}; proxy_http_version 1.1; proxy_set_header Connection \"\"; proxy_buffering off; }}"
        ),
    );
    let url = format!("https://127.0.0.1:{tls}/mcp");
    let ca = dir.join("ca.pem");
    let tools = |trust: &[&str]| {
        run_bounded(
            Command::new(witness())
                .args(["mcp", "tools", "--url", &url])
                .args(trust),
            Duration::from_secs(30),
        )
    };
    let out = tools(&[]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(
        err.contains("unknown issuer") && err.contains("--cacert"),
        "{err}"
    );
    let out = tools(&["--cacert", ca.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("echo"));
    let (out, journal, report) = load(
        &dir,
        "mcp",
        &url,
        &[
            "--mcp",
            "echo",
            "--args",
            r#"{"text":"hi"}"#,
            "--levels",
            "1,3",
            "--rounds",
            "5",
            "--cacert",
            ca.to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(json(&report)["levels"][1]["counts"]["ok"], 15);
    assert!(journal_lines(&journal)
        .iter()
        .any(|l| l["kind"] == "request"));
    assert_eq!(
        json(&report)["levels"][0]["protocol"],
        "MCP over HTTP/1.1 over TLS"
    );
    // What nginx saw: HTTP/1.1 only, so far.
    assert!(
        !protocols().is_empty() && !protocols().contains("HTTP/2.0"),
        "{}",
        protocols()
    );
    let seen = protocols().lines().count();
    let (out, _, report) = load(
        &dir,
        "mcp-h2",
        &url,
        &[
            "--mcp",
            "echo",
            "--args",
            r#"{"text":"hi"}"#,
            "--http2",
            "--levels",
            "2",
            "--rounds",
            "5",
            "--cacert",
            ca.to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let l = &json(&report)["levels"][0];
    assert_eq!(l["counts"]["ok"], 10, "{l:#}");
    assert_eq!(
        l["protocol"],
        "MCP over HTTP/2 over TLS (ALPN h2), a connection per session"
    );
    let after = protocols();
    let h2: Vec<_> = after.lines().skip(seen).collect();
    assert!(
        !h2.is_empty() && h2.iter().all(|p| *p == "HTTP/2.0"),
        "{h2:?}"
    );

    // wrap --proxy LISTEN=https://UPSTREAM: the client speaks plain HTTP to witness, witness TLS
    // to the server.
    let listen = free_port();
    let wj = dir.join("wrap.jsonl");
    let child = Command::new(witness())
        .args(["wrap", "--journal"])
        .arg(&wj)
        .arg("--proxy")
        .arg(format!("127.0.0.1:{listen}=https://127.0.0.1:{tls}"))
        .arg("--cacert")
        .arg(&ca)
        .args(["--", "sleep", "30"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_listening(listen);
    let get = || {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(("127.0.0.1", listen)).unwrap();
        s.write_all(b"GET /x HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut got = String::new();
        let _ = s.read_to_string(&mut got);
        got
    };
    for _ in 0..3 {
        let got = get();
        assert!(
            got.starts_with("HTTP/1.1 200") && got.ends_with("ok\n"),
            "{got}"
        );
    }
    kill(child.id() as i32, 15);
    let out = wait_bounded(child, Duration::from_secs(20));
    let recs: Vec<_> = journal_lines(&wj)
        .into_iter()
        .filter(|l| l["kind"] == "request")
        .collect();
    assert_eq!(recs.len(), 3, "{}", stderr(&out));
    assert!(
        recs.iter()
            .all(|r| r["outcome"]["kind"] == "ok" && r["status"] == 200),
        "{recs:?}"
    );
}

#[test]
fn a_soak_plan_s_https_base_url_is_refused_untrusted_and_runs_with_cacert() {
    let Some(dir) = setup("tls-soak") else { return };
    let port = free_port();
    let _nginx = nginx_tls(
        &dir,
        port,
        "leaf",
        "",
        "location /stats { default_type application/json; return 200 '{\"in_flight\": 0}'; }",
    );
    let plan = dir.join("plan.toml");
    std::fs::write(
        &plan,
        format!(
            r#"
duration = "2s"
interval = "1s"
timeout = "5s"
check_timeout = "1s"

[target]
base_url = "https://127.0.0.1:{port}"

[kinds.get]
method = "GET"
path = "/x"

# Steady only: with the default cycle a driver may start in its idle phase (8 s or more), and a
# 2 s soak whose two drivers both did sent nothing (seed-dependent, about one run in three).
[[drivers]]
count = 2
cycle = ["steady"]
steady = {{ requests = [2, 4], gap = ["50ms", "100ms"] }}

[[checks]]
name = "stats answer"
get = "/stats"
pointer = "/in_flight"
max = 50
"#
        ),
    )
    .unwrap();
    let soak = |tag: &str, trust: &[&str]| {
        let report = dir.join(format!("{tag}.json"));
        let out = run_bounded(
            Command::new(witness())
                .args(["soak", "--plan"])
                .arg(&plan)
                .args(["--gpu", "off", "--journal"])
                .arg(dir.join(format!("{tag}.jsonl")))
                .arg("--report")
                .arg(&report)
                .args(trust),
            Duration::from_secs(60),
        );
        (out, report)
    };
    let (out, _) = soak("untrusted", &[]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(
        err.contains("unknown issuer") && err.contains("--insecure"),
        "{err}"
    );
    let ca = dir.join("ca.pem");
    let (out, report) = soak("trusted", &["--cacert", ca.to_str().unwrap()]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let r = std::fs::read_to_string(&report).unwrap();
    assert!(
        r.contains("\"verdict\": \"pass\"") || r.contains("\"verdict\":\"pass\""),
        "{r}"
    );
}

#[test]
fn a_stream_the_server_resets_is_an_error_of_its_own_kind_with_the_server_s_reason() {
    let Some(nginx) = nginx() else { return };
    let dir = tempdir("tls-rst");
    let port = free_port();
    let d = dir.display();
    // nginx's `return 444` (close without a response) resets an HTTP/2 stream: RST_STREAM on
    // every request, whatever the timing (a stream limit's REFUSED_STREAM depends on whether the
    // first burst beats the server's SETTINGS, which a busy machine decides).
    let conf = format!(
        "daemon off;\nworker_processes 1;\npid {d}/n.pid;\nerror_log stderr warn;\nevents {{ worker_connections 512; }}\n\
         http {{ access_log off; client_body_temp_path {d}/body; proxy_temp_path {d}/proxy; fastcgi_temp_path {d}/fastcgi; uwsgi_temp_path {d}/uwsgi; scgi_temp_path {d}/scgi;\n\
         server {{ listen 127.0.0.1:{port} http2; keepalive_requests 10000; location /drop {{ return 444; }} location / {{ return 200 \"ok\\n\"; }} }} }}\n"
    );
    std::fs::write(dir.join("n.conf"), conf).unwrap();
    let _nginx = Bg::start(
        Command::new(nginx)
            .args(["-e", "stderr", "-c"])
            .arg(dir.join("n.conf")),
    );
    wait_listening(port);
    let (out, journal, report) = load(
        &dir,
        "rst",
        &format!("http://127.0.0.1:{port}/drop"),
        &[
            "--http2",
            "--connections",
            "2",
            "--levels",
            "8",
            "--rounds",
            "3",
        ],
    );
    let r = json(&report);
    let l = &r["levels"][0];
    let c = &l["counts"];
    assert_eq!(c["timeout"], 0, "{l:#}");
    assert_eq!(c["ok"], 0, "{l:#}");
    assert_eq!(c["error"], 24, "{l:#}");
    let failed: Vec<_> = journal_lines(&journal)
        .into_iter()
        .filter(|l| l["kind"] == "request" && l["outcome"]["kind"] == "error")
        .collect();
    assert!(!failed.is_empty(), "no stream refused\n{}", stderr(&out));
    for f in &failed {
        assert_eq!(f["outcome"]["error"], "stream_reset", "{f}");
        assert!(
            f["detail"]
                .as_str()
                .is_some_and(|d| d.starts_with("the server reset this stream (RST_STREAM: ")),
            "{f}"
        );
    }
}

/// What tests/peers/count_server.py counted: the most requests it had in flight at once.
fn most_at_once_at_the_server(file: &Path) -> u64 {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("most_at_once "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

#[test]
fn http2_streams_are_in_flight_at_once_where_the_server_sees_them() {
    // Overlap measured at the server, not from witness's own start times (taken before each send,
    // so streams sent one at a time would still look concurrent there): nginx takes the level's
    // streams over one h2c connection and hands each to a Python upstream that holds it 300 ms
    // and counts how many it holds at once.
    let Some(nginx) = nginx() else { return };
    if !have("python3", "python3 -c 'import http.server'") {
        return;
    }
    let dir = tempdir("h2-at-the-server");
    let (front, up) = (free_port(), free_port());
    let counts = dir.join("counts.txt");
    let _upstream = Bg::start(
        Command::new("python3")
            .arg(repo().join("tests/peers/count_server.py"))
            .arg(up.to_string())
            .arg(&counts)
            .arg("0.3"),
    );
    let d = dir.display();
    let conf = format!(
        "daemon off;\nworker_processes 1;\npid {d}/h2c.pid;\nerror_log stderr warn;\nevents {{ worker_connections 512; }}\n\
         http {{ access_log off; client_body_temp_path {d}/body; proxy_temp_path {d}/proxy; fastcgi_temp_path {d}/fastcgi; uwsgi_temp_path {d}/uwsgi; scgi_temp_path {d}/scgi;\n\
         server {{ listen 127.0.0.1:{front} http2; location / {{ proxy_pass http://127.0.0.1:{up}; }} }} }}\n"
    );
    std::fs::write(dir.join("h2c.conf"), conf).unwrap();
    let _nginx = Bg::start(
        Command::new(nginx)
            .args(["-e", "stderr", "-c"])
            .arg(dir.join("h2c.conf")),
    );
    wait_listening(front);
    wait_listening(up);
    let (out, journal, report) = load(
        &dir,
        "h2c",
        &format!("http://127.0.0.1:{front}/"),
        &["--http2", "--levels", "8", "--rounds", "2"],
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let r = json(&report);
    assert_eq!(r["levels"][0]["counts"]["ok"], 16, "{:#}", r["levels"][0]);
    assert_eq!(r["levels"][0]["phases"]["new_connections"], 1, "{err}");
    let requests = journal_lines(&journal)
        .iter()
        .filter(|l| l["kind"] == "request")
        .count();
    assert_eq!(requests, 16);
    let most = most_at_once_at_the_server(&counts);
    assert!(
        most >= 4,
        "the server never held more than {most} of a level of 8's streams at once"
    );
}
