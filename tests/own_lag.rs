//! witness's own waits are witness's (issue 39, item 5): a thousand workers started at once on a
//! few cores wait for a thread before their first system call, and notice their connects late.
//! Against a real nginx serving a static file: that wait is reported as witness's own lag, apart
//! from every phase; the connects are the kernel's handshakes, near the connect floor; and no slice
//! of a spread is called a SYN retransmission. Ratios and orders only: the machine is busy.

use crate::common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::*;

/// nginx serving `dir/www/index.html` on `port`, room for more than a thousand connections.
fn static_conf(dir: &Path, port: u16) -> std::path::PathBuf {
    let d = dir.display();
    std::fs::create_dir_all(dir.join("www")).unwrap();
    std::fs::write(dir.join("www/index.html"), "hello\n").unwrap();
    let conf = format!(
        r#"
daemon off;
worker_processes 1;
pid {d}/nginx.pid;
error_log stderr warn;
events {{ worker_connections 2048; }}
http {{
  access_log off;
  client_body_temp_path {d}/body;
  proxy_temp_path {d}/proxy;
  fastcgi_temp_path {d}/fastcgi;
  uwsgi_temp_path {d}/uwsgi;
  scgi_temp_path {d}/scgi;
  server {{
    listen 127.0.0.1:{port};
    location / {{ root {d}/www; }}
  }}
}}
"#
    );
    let p = dir.join("nginx.conf");
    std::fs::write(&p, conf).unwrap();
    p
}

#[test]
fn a_thousand_workers_at_once_wait_for_witness_and_that_wait_is_witness_s_not_the_connect_s() {
    let Some(nginx) = nginx() else { return };
    let dir = tempdir("own-lag");
    let port = free_port();
    let conf = static_conf(&dir, port);
    let (j, r, h) = (dir.join("j.jsonl"), dir.join("r.json"), dir.join("r.html"));
    let out = run_bounded(
        Command::new(witness())
            .args(["load", "--url", &format!("http://127.0.0.1:{port}/")])
            .args(["--levels", "1000", "--rounds", "1", "--settle", "100ms"])
            .args(["--timeout", "20s", "--journal"])
            .arg(&j)
            .arg("--report")
            .arg(&r)
            .arg("--html")
            .arg(&h)
            .arg("--")
            .arg(nginx)
            .args(["-e", "stderr", "-c"])
            .arg(&conf),
        Duration::from_secs(120),
    );
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(r.exists(), "no report:\n{said}");
    let report = json(&r);
    let level = &report["levels"][0];
    assert_eq!(level["counts"]["ok"], 1000, "{level:#}\n{said}");
    let phases = &level["phases"];
    let lag = &phases["lag"];
    // Every request's lag is measured, and it is witness's: a worker started behind hundreds of
    // others on the same thread waited for it.
    assert_eq!(lag["count"], 1000, "{phases:#}");
    let (lag_p50, lag_max) = (lag["p50"].as_f64().unwrap(), lag["max"].as_f64().unwrap());
    assert!(lag_max > 0.0, "{phases:#}");
    // The connects are the kernel's handshakes: near the floor, far below witness's lag (before,
    // each held the lag of the workers polled ahead of it: 1000× the floor).
    let floor_s = report["connect_floor_ms"]
        .as_f64()
        .expect("a connect floor")
        / 1000.0;
    let connect = &phases["connect"];
    assert_eq!(connect["count"], 1000, "{phases:#}");
    let connect_p50 = connect["p50"].as_f64().unwrap();
    assert!(
        connect_p50 <= 20.0 * floor_s,
        "connect p50 {connect_p50} vs floor {floor_s}: {phases:#}"
    );
    assert!(
        connect_p50 * 10.0 < lag_p50,
        "connect p50 {connect_p50} vs lag p50 {lag_p50}: {phases:#}"
    );
    assert!(phases.get("connect_note").is_none(), "{phases:#}");
    // No slice of the spread is a SYN retransmission.
    let syn: Vec<_> = report["suspicions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["kind"] == "syn_retransmit")
        .collect();
    assert!(syn.is_empty(), "{syn:#?}");
    // Said apart on the terminal, and journalled per request.
    assert!(
        said.contains("witness's own lag before sending (not in any phase): p50 "),
        "{said}"
    );
    let page = std::fs::read_to_string(&h).unwrap();
    assert!(
        page.contains("own lag before sending (not in any phase): p50 "),
        "no lag in the HTML"
    );
    let lags = journal_lines(&j)
        .iter()
        .filter(|v| v["kind"] == "request" && v["group"] == "level0")
        .filter(|v| v["lag_s"].is_number())
        .count();
    assert_eq!(lags, 1000);
}
