//! Secrets and files: credential headers in `load` and a plan's secret in `soak` appear in no
//! artifact and no terminal line (a fatal line's abort message, a line cut at 16 KiB included);
//! artifacts are never written through a symlink, are 0600 when the run carries secrets, and the
//! default journal goes to a per-user folder, created exclusively.

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::*;

fn rand_hex() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    format!("{:016x}", h.finish())
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

fn read(p: &Path) -> String {
    String::from_utf8_lossy(&std::fs::read(p).unwrap()).into_owned()
}

#[test]
fn credential_headers_reach_the_server_and_no_artifact_or_terminal_line() {
    let dir = tempdir("load-secrets");
    let token = format!("tok{}", rand_hex());
    let cookie = format!("ck{}", rand_hex());
    let apikey = format!("ak{}", rand_hex());
    let port = free_port().to_string();
    let url = format!("http://127.0.0.1:{port}/call");
    let files = ["j.jsonl", "r.json", "r.html", "t.json"].map(|f| dir.join(f));
    let out = run_bounded(
        Command::new(witness())
            .args(["load", "--url", &url, "--levels", "1,2", "--rounds", "3"])
            .args(["--settle", "0s", "--gpu", "off"])
            // The bearer token from the environment (never in argv) ...
            .args(["--header-env", "Authorization=WITNESS_TEST_AUTH"])
            // ... and two credentials in argv: a cookie, and a header marked secret.
            .args(["--header", &format!("Cookie: session={cookie}")])
            .args(["--secret-header", "x-api-key"])
            .args(["--header", &format!("X-Api-Key: {apikey}")])
            .arg("--journal")
            .arg(&files[0])
            .arg("--report")
            .arg(&files[1])
            .arg("--html")
            .arg(&files[2])
            .arg("--trace")
            .arg(&files[3])
            .arg("--")
            .arg(toy())
            .args([
                "--port",
                &port,
                "--require-secret-env",
                "WITNESS_TEST_TOKEN",
                // The cookie and the marked header must reach it too, whole.
                "--require-header-env",
                "Cookie=WITNESS_TEST_COOKIE",
                "--require-header-env",
                "X-Api-Key=WITNESS_TEST_APIKEY",
            ])
            .env("WITNESS_TEST_TOKEN", &token)
            .env("WITNESS_TEST_COOKIE", format!("session={cookie}"))
            .env("WITNESS_TEST_APIKEY", &apikey)
            .env("WITNESS_TEST_AUTH", format!("Bearer {token}")),
        Duration::from_secs(60),
    );
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    // The server checked the bearer token, the cookie and the API key: every call was answered
    // 200, not 401.
    let report = json(&files[1]);
    for l in report["levels"].as_array().unwrap() {
        assert_eq!(
            l["counts"]["ok"],
            l["concurrency"].as_u64().unwrap() * 3,
            "{l:#}"
        );
    }
    let journal = read(&files[0]);
    assert!(journal.contains("Cookie: ***"), "argv is kept, masked");
    let texts = files
        .iter()
        .map(|f| (f.display().to_string(), read(f)))
        .chain([
            (
                "stdout".into(),
                String::from_utf8_lossy(&out.stdout).into_owned(),
            ),
            ("stderr".into(), stderr),
        ]);
    for (what, text) in texts {
        for s in [&token, &cookie, &apikey] {
            assert!(!text.contains(s.as_str()), "a secret leaked into {what}");
        }
    }
    for f in &files {
        assert_eq!(mode(f), 0o600, "{} carries a run with secrets", f.display());
    }
}

#[test]
fn a_plan_secret_stays_out_of_the_abort_message_and_a_line_cut_at_16_kib() {
    let dir = tempdir("soak-secrets");
    let token = format!("SECRETTOKEN{}", rand_hex());
    let plan = dir.join("p.toml");
    let src = std::fs::read_to_string(repo().join("examples/plans/gateway.toml")).unwrap();
    std::fs::write(
        &plan,
        format!("{src}\n[invariants]\nfatal_log = [\"^FATAL\"]\n"),
    )
    .unwrap();
    let port = free_port().to_string();
    // Before it serves, the server prints a 16 KiB line whose cut falls 6 bytes into the token,
    // then a fatal line quoting the token in full (passed through with --show-output).
    let script = format!(
        r#"awk 'BEGIN {{ s = "x"; while (length(s) < 16373) s = s s; s = substr(s, 1, 16373); t = ENVIRON["WITNESS_SOAK_TOKEN"]; print "LONG " s t " tail"; print "FATAL token=" t; fflush() }}'; exec "$0" --port {port} --require-secret-env WITNESS_SOAK_TOKEN"#
    );
    let journal = dir.join("j.jsonl");
    let report = dir.join("r.json");
    let out = run_bounded(
        Command::new(witness())
            .args(["soak", "--plan"])
            .arg(&plan)
            .args(["--base-url", &format!("http://127.0.0.1:{port}")])
            .args(["--duration", "20s", "--gpu", "off"])
            .args(["--watch", "long=^LONG"])
            // The server's own output passed through is scrubbed too.
            .arg("--show-output")
            .arg("--journal")
            .arg(&journal)
            .arg("--report")
            .arg(&report)
            .args(["--", "sh", "-c", &script])
            .arg(toy())
            .env("WITNESS_SOAK_TOKEN", &token),
        Duration::from_secs(60),
    );
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("soak aborted") && stderr.contains("FATAL token=***"),
        "{stderr}"
    );
    let lines = journal_lines(&journal);
    let long = lines
        .iter()
        .find(|l| l["label"] == "long")
        .expect("the long line is journalled");
    assert_eq!(long["truncated"], true);
    let text = long["line"].as_str().unwrap();
    assert!(
        text.contains("xxx***"),
        "the secret at the cut is masked: ...{}",
        &text[text.len() - 20..]
    );
    for (what, text) in [
        ("journal", read(&journal)),
        ("report", read(&report)),
        ("stdout", String::from_utf8_lossy(&out.stdout).into_owned()),
        ("stderr", stderr),
    ] {
        // Not even the first bytes of the token, which the 16 KiB cut used to leave behind.
        assert!(
            !text.contains("SECRET"),
            "the secret leaked into the {what}"
        );
    }
    assert_eq!(mode(&journal), 0o600);
    assert_eq!(mode(&report), 0o600);
}

#[test]
fn artifacts_are_never_written_through_a_symlink() {
    let dir = tempdir("symlink");
    let victim = dir.join("victim");
    std::fs::write(&victim, "precious").unwrap();
    let link = dir.join("j.jsonl");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    let out = run_bounded(
        Command::new(witness())
            .args(["wrap", "--gpu", "off", "--journal"])
            .arg(&link)
            .args(["--", "true"]),
        Duration::from_secs(30),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("symbolic link"), "{stderr}");
    assert_eq!(read(&victim), "precious");
    // A report path that is a link: replaced by the new file, its target untouched.
    let journal = dir.join("real.jsonl");
    let rlink = dir.join("r.json");
    std::os::unix::fs::symlink(&victim, &rlink).unwrap();
    let out = run_bounded(
        Command::new(witness())
            .args(["wrap", "--gpu", "off", "--journal"])
            .arg(&journal)
            .arg("--report")
            .arg(&rlink)
            .args(["--", "true"]),
        Duration::from_secs(30),
    );
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(read(&victim), "precious");
    assert!(!std::fs::symlink_metadata(&rlink).unwrap().is_symlink());
    assert_ne!(
        mode(&journal) & 0o044,
        0,
        "no secrets: the usual mode (umask permitting)"
    );
}

#[test]
fn the_default_journal_goes_to_a_per_user_state_folder_never_tmp() {
    let dir = tempdir("state");
    let state = dir.join("state");
    let out = run_bounded(
        Command::new(witness())
            .args(["wrap", "--gpu", "off", "--", "true"])
            .env("XDG_STATE_HOME", &state),
        Duration::from_secs(30),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let folder = state.join("witness");
    assert_eq!(mode(&folder), 0o700);
    // One journal, beside the index of runs `witness report` reads (runs.tsv).
    let journals = |folder: &Path| -> Vec<PathBuf> {
        std::fs::read_dir(folder)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
            .collect()
    };
    let made = journals(&folder);
    assert_eq!(made.len(), 1, "{made:?}");
    let path = made[0].clone();
    assert!(std::fs::read_to_string(folder.join("runs.tsv"))
        .unwrap()
        .contains(&path.display().to_string()));
    assert!(
        stderr.contains(&format!("journal: {}", path.display())),
        "{stderr}"
    );
    // Without XDG_STATE_HOME: under HOME's .local/state.
    let home = dir.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let out = run_bounded(
        Command::new(witness())
            .args(["wrap", "--gpu", "off", "--", "true"])
            .env_remove("XDG_STATE_HOME")
            .env("HOME", &home),
        Duration::from_secs(30),
    );
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(journals(&home.join(".local/state/witness")).len(), 1);
}
