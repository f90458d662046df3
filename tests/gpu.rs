//! GPU sampling through the real binary: `witness gpu` and `wrap --gpu` without a driver (NVML
//! pointed at a library that does not exist, so the result is the same on a machine with a GPU),
//! and with the scripted fake backend (`WITNESS_FAKE_GPU`).

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

const GB: u64 = 1_000_000_000;
/// Every run here is a 2 s server life or less; this bounds a hang.
const LIMIT: Duration = Duration::from_secs(60);

fn witness() -> Command {
    let mut c = Command::new(common::witness());
    c.env_remove("WITNESS_FAKE_GPU")
        .env_remove("WITNESS_NVML_LIB");
    c
}

fn tempdir() -> PathBuf {
    common::tempdir("gpu")
}

/// An NVML library path that cannot load: "this machine has no NVIDIA driver", anywhere.
fn no_driver(c: &mut Command, dir: &Path) -> String {
    let lib = dir.join("libnvidia-ml.so.1").display().to_string();
    c.env("WITNESS_NVML_LIB", &lib);
    lib
}

/// A server that lives 2 s under wrap, sampled every 100 ms.
fn wrap(c: &mut Command, report: &Path, gpu: &str) -> Output {
    c.args([
        "wrap",
        "--gpu",
        gpu,
        "--sample-interval",
        "100ms",
        "--report",
    ])
    .arg(report)
    .arg("--journal")
    .arg(report.with_extension("jsonl"))
    .arg("--html")
    .arg(report.with_extension("html"))
    .arg("--")
    .arg(common::toy())
    .args(["--port", "0", "--die-after", "2s"]);
    common::run_bounded(c, LIMIT)
}

fn gpu_section(report: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(report).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v["gpu"].clone()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Device 0 climbs 100 MB a reading, the server's share with it, beside another process's 5 GB;
/// device 1 answers for 5 readings, then is gone.
fn fake_script(dir: &Path) -> PathBuf {
    let steps: Vec<serde_json::Value> = (0..200u64)
        .map(|i| {
            let mut devs = vec![serde_json::json!({
                "index": 0, "name": "Fake H100", "mem_total_bytes": 80 * GB,
                "mem_used_bytes": 10 * GB + i * 100_000_000,
                "gpu_util_pct": 40 + i % 20, "mem_util_pct": 15, "temperature_c": 55, "power_w": 250,
                "processes": [
                    {"pid": "server", "used_bytes": GB + i * 100_000_000},
                    {"pid": 1, "used_bytes": 5 * GB}
                ]
            })];
            if i < 5 {
                devs.push(serde_json::json!({
                    "index": 1, "name": "Fake A10", "mem_total_bytes": 24 * GB, "mem_used_bytes": GB
                }));
            }
            serde_json::Value::Array(devs)
        })
        .collect();
    let p = dir.join("fake.json");
    std::fs::write(
        &p,
        serde_json::json!({"driver_version": "550.54.15", "steps": steps}).to_string(),
    )
    .unwrap();
    p
}

#[test]
fn witness_gpu_without_a_driver_explains_and_exits_3() {
    let dir = tempdir();
    let mut c = witness();
    let lib = no_driver(&mut c, &dir);
    let o = common::run_bounded(c.arg("gpu"), LIMIT);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(
        err.contains(&format!("no NVIDIA driver — {lib} not found")),
        "{err}"
    );
    assert!(
        err.contains("expected on a machine without an NVIDIA GPU or driver"),
        "{err}"
    );
    assert!(o.stdout.is_empty());
}

#[test]
fn wrap_with_gpu_auto_and_no_driver_runs_normally_and_only_the_report_says_not_sampled() {
    let dir = tempdir();
    let report = dir.join("r.json");
    let mut c = witness();
    let lib = no_driver(&mut c, &dir);
    let o = wrap(&mut c, &report, "auto");
    let err = stderr(&o);
    // The server's own exit status (toy_server --die-after exits 1): wrap ran as usual.
    assert_eq!(o.status.code(), Some(1), "{err}");
    // wrap stays transparent, and a machine with no GPU gets no GPU words (as load's summary): the
    // JSON report says why none was sampled.
    assert_eq!(err.matches("no NVIDIA driver").count(), 0, "{err}");
    assert!(!err.contains("gpu: not sampled"), "{err}");
    assert!(
        err.contains("exited with code 1"),
        "the timeline is there: {err}"
    );
    let gpu = gpu_section(&report);
    assert_eq!(
        gpu["not_sampled"],
        format!("not sampled: no NVIDIA driver — {lib} not found")
    );
    assert_eq!(gpu["devices"], serde_json::json!([]));
    // The process sampler ran beside it.
    let journal = std::fs::read_to_string(report.with_extension("jsonl")).unwrap();
    assert!(journal.contains("\"kind\":\"proc_sample\""));
    assert!(!journal.contains("\"kind\":\"gpu_sample\""));
}

#[test]
fn load_with_gpu_auto_and_no_driver_runs_normally_says_nothing_about_gpus_and_reports_not_sampled()
{
    let dir = tempdir();
    let report = dir.join("r.json");
    let port = common::free_port().to_string();
    let mut c = witness();
    let lib = no_driver(&mut c, &dir);
    let o = c
        .args([
            "load",
            "--url",
            &format!("http://127.0.0.1:{port}/call"),
            "--levels",
            "1,2",
            "--rounds",
            "1",
        ])
        .args(["--settle", "100ms", "--gpu", "auto", "--report"])
        .arg(&report)
        .arg("--")
        .arg(env!("CARGO_BIN_EXE_toy_server"))
        .args(["--port", &port])
        .output()
        .unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        !err.to_lowercase().contains("gpu") && !out.to_lowercase().contains("gpu"),
        "no GPU words on a machine without a driver and without --gpu on: {err}{out}"
    );
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(r["verdict"], "pass");
    assert_eq!(
        r["gpu"]["not_sampled"],
        format!("not sampled: no NVIDIA driver — {lib} not found")
    );
}

#[test]
fn wrap_with_gpu_on_and_no_driver_refuses_before_starting_the_server() {
    let dir = tempdir();
    let report = dir.join("r.json");
    let mut c = witness();
    no_driver(&mut c, &dir);
    let o = wrap(&mut c, &report, "on");
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(
        err.contains("--gpu on, but there is no GPU to sample"),
        "{err}"
    );
    assert!(
        !String::from_utf8_lossy(&o.stdout).contains("toy_server listening"),
        "the server must not have been started"
    );
}

#[test]
fn wrap_with_gpu_off_says_so_in_the_report_and_not_on_stderr() {
    let dir = tempdir();
    let report = dir.join("r.json");
    let mut c = witness();
    no_driver(&mut c, &dir);
    let o = wrap(&mut c, &report, "off");
    assert_eq!(o.status.code(), Some(1));
    assert!(!stderr(&o).contains("witness: GPU:"), "{}", stderr(&o));
    assert_eq!(
        gpu_section(&report)["not_sampled"],
        "not sampled: turned off (--gpu off)"
    );
}

#[test]
fn wrap_with_the_fake_gpu_reports_per_device_figures_growth_and_a_lost_device() {
    let dir = tempdir();
    let report = dir.join("r.json");
    let mut c = witness();
    c.env("WITNESS_FAKE_GPU", fake_script(&dir));
    let o = wrap(&mut c, &report, "on");
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("for tests and demos"), "{err}");
    assert!(
        err.contains("memory used") && err.contains("trend growth"),
        "{err}"
    );

    let gpu = gpu_section(&report);
    assert!(gpu.get("not_sampled").is_none(), "{gpu}");
    let d0 = &gpu["devices"][0];
    assert_eq!(d0["name"], "Fake H100");
    let n = d0["samples"].as_u64().unwrap();
    assert!(n >= 6, "2 s at 100 ms should give about 20 readings: {n}");
    let mem = &d0["mem_used_bytes"];
    assert_eq!(mem["before"].as_f64(), Some(10e9));
    assert_eq!(mem["after"].as_f64(), Some(10e9 + (n - 1) as f64 * 1e8));
    assert_eq!(mem["min"], mem["before"]);
    assert_eq!(mem["max"], mem["after"]);
    assert_eq!(d0["mem_trend"]["class"], "growth", "{}", d0["mem_trend"]);
    assert_eq!(d0["gpu_util_pct"]["before"].as_f64(), Some(40.0));
    // The server's own memory: its pid matched, the other process's 5 GB (pid 1) not counted.
    let server = &d0["server_mem_bytes"];
    assert_eq!(server["before"].as_f64(), Some(1e9), "{server}");
    assert!(server["max"].as_f64().unwrap() < 5e9, "{server}");

    let d1 = &gpu["devices"][1];
    assert_eq!(d1["samples"], 5);
    assert!(d1["disappeared_at_s"].as_f64().is_some(), "{d1}");
    let reasons: Vec<&str> = gpu["unavailable"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|u| u["reason"].as_str())
        .collect();
    assert_eq!(
        reasons,
        ["GPU 1 (Fake A10) disappeared: no longer reported by the driver"]
    );
    let journal = std::fs::read_to_string(report.with_extension("jsonl")).unwrap();
    assert_eq!(
        journal.matches("\"kind\":\"gpu_sample\"").count() as u64,
        n + 5
    );
    // The HTML resource charts draw both devices' memory on the run's time axis.
    let html = std::fs::read_to_string(report.with_extension("html")).unwrap();
    for chart in [
        "GPU0 memory used",
        "GPU0 memory (server)",
        "GPU1 memory used",
        "GPU0 util",
    ] {
        assert!(html.contains(chart), "the HTML has no {chart:?} chart");
    }
}

#[test]
fn witness_gpu_with_the_fake_shows_devices_driver_and_processes() {
    let dir = tempdir();
    let o = common::run_bounded(
        witness()
            .env("WITNESS_FAKE_GPU", fake_script(&dir))
            .arg("gpu"),
        LIMIT,
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("driver 550.54.15, 2 devices"), "{out}");
    assert!(
        out.contains("GPU 0: Fake H100") && out.contains("GPU 1: Fake A10"),
        "{out}"
    );
    assert!(out.contains("9.3 GiB used"), "{out}");
    assert!(out.contains("utilisation  gpu 40%, memory 15%"), "{out}");
    // "server" means nothing without a server; pid 1 is listed with its memory.
    assert!(out.contains("pid 1 ") && out.contains(": 4.7 GiB"), "{out}");
}

#[test]
fn a_bad_fake_script_is_a_usage_error_naming_the_variable() {
    let dir = tempdir();
    let p = dir.join("bad.json");
    std::fs::write(&p, r#"{"steps": [[{"index": 0}]]}"#).unwrap();
    let report = dir.join("r.json");
    let mut c = witness();
    c.env("WITNESS_FAKE_GPU", &p);
    let o = wrap(&mut c, &report, "auto");
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("WITNESS_FAKE_GPU=") && err.contains("step 0"),
        "{err}"
    );
}
