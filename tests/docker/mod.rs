//! Docker helpers for the container tests (see README.md beside this file): the engine must answer
//! (CI starts one; without it these tests fail, they never skip), the test images are built here with
//! no registry and cached by content hash, and every container a test makes carries a label and is
//! removed when the test ends, pass or fail.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use crate::common::{repo, run_bounded, witness};

/// Runs the docker CLI, bounded; returns its output whatever the status.
pub fn docker(args: &[&str]) -> Output {
    run_bounded(Command::new("docker").args(args), Duration::from_secs(120))
}

/// Runs the docker CLI and fails the test, with its stderr, if it fails.
pub fn docker_ok(args: &[&str]) -> String {
    let out = docker(args);
    assert!(
        out.status.success(),
        "docker {} failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Fails (never skips) when no engine answers: CI guarantees one, so its absence is a broken setup.
pub fn require_engine() {
    static OK: OnceLock<Result<String, String>> = OnceLock::new();
    let r = OK.get_or_init(|| {
        match Command::new("docker")
            .args(["version", "--format", "{{.Server.Version}}"])
            .stdin(Stdio::null())
            .output()
        {
            Ok(o) if o.status.success() => Ok(String::from_utf8_lossy(&o.stdout).trim().into()),
            Ok(o) => Err(String::from_utf8_lossy(&o.stderr).trim().to_string()),
            Err(e) => Err(format!("could not run the docker CLI: {e}")),
        }
    });
    if let Err(e) = r {
        panic!(
            "these tests need a Docker engine (CI starts one; locally: start dockerd, or set DOCKER_HOST): `docker version` says: {e}"
        );
    }
}

/// The containers of one test: a unique label, and all of them removed on drop.
pub struct Scope {
    pub label: String,
}

impl Scope {
    pub fn new(test: &str) -> Self {
        require_engine();
        let s = Scope {
            label: format!("witness-test={test}-{}", std::process::id()),
        };
        s.clean();
        s
    }

    /// Ids of the containers carrying the label, in any state.
    pub fn containers(&self) -> Vec<String> {
        docker_ok(&[
            "ps",
            "-aq",
            "--no-trunc",
            "--filter",
            &format!("label={}", self.label),
        ])
        .lines()
        .map(str::to_string)
        .collect()
    }

    fn clean(&self) {
        let ids = self.containers();
        if !ids.is_empty() {
            let mut args = vec!["rm", "-f"];
            args.extend(ids.iter().map(String::as_str));
            let _ = docker(&args);
        }
    }
}

impl Drop for Scope {
    fn drop(&mut self) {
        self.clean();
    }
}

/// A fast, stable content hash for image tags (FNV-1a, 64 bits).
fn hash(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for p in parts {
        for chunk in p.chunks(8) {
            let mut w = [0u8; 8];
            w[..chunk.len()].copy_from_slice(chunk);
            h ^= u64::from_le_bytes(w);
            h = h.wrapping_mul(0x100000001b3);
        }
        h ^= p.len() as u64;
        h = h.wrapping_mul(0x100000001b3);
    }
    h
}

fn image_exists(tag: &str) -> bool {
    docker(&["image", "inspect", "--format", "{{.Id}}", tag])
        .status
        .success()
}

/// Removes the other tags of `repo` (older builds), so the cache does not grow without bound.
fn prune_others(repo_name: &str, keep: &str) {
    let tags = docker_ok(&["images", repo_name, "--format", "{{.Repository}}:{{.Tag}}"]);
    for t in tags.lines().filter(|t| *t != keep) {
        let _ = docker(&["rmi", "-f", t]);
    }
}

fn work_dir(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// examples/toy_server.rs built statically with rustc (std only), so it runs in an empty image.
pub fn static_toy() -> &'static Path {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        let src = repo().join("examples/toy_server.rs");
        let h = hash(&[&std::fs::read(&src).unwrap(), b"static-toy-1"]);
        let dir = work_dir("docker-toy");
        let out = dir.join(format!("toy_server-{h:016x}"));
        // Tests run in processes of their own, several at once: one builds, the others wait for it.
        let _lock = FileLock::new(&dir.join("build.lock"));
        if !out.exists() {
            let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
            let tmp = dir.join(format!("toy_server-{h:016x}.part-{}", std::process::id()));
            let o = run_bounded(
                Command::new(rustc)
                    .args([
                        "-O",
                        "--edition",
                        "2021",
                        "-C",
                        "target-feature=+crt-static",
                    ])
                    .arg(&src)
                    .arg("-o")
                    .arg(&tmp),
                Duration::from_secs(300),
            );
            assert!(
                o.status.success(),
                "building the static toy server failed: {}",
                String::from_utf8_lossy(&o.stderr)
            );
            std::fs::rename(&tmp, &out).unwrap();
        }
        out
    })
}

/// An exclusive lock on a file (flock), held until dropped: builds shared by test processes.
pub struct FileLock(std::fs::File);

impl FileLock {
    pub fn new(path: &Path) -> Self {
        use std::os::fd::AsRawFd;
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .unwrap();
        // SAFETY: a valid descriptor; flock blocks until the lock is ours.
        assert_eq!(unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) }, 0);
        FileLock(f)
    }
}

/// `witness-test/toy:<hash>`: FROM scratch with the static toy server as its entrypoint.
pub fn toy_image() -> &'static str {
    static TAG: OnceLock<String> = OnceLock::new();
    TAG.get_or_init(|| {
        require_engine();
        let bin = static_toy();
        let h = hash(&[&std::fs::read(bin).unwrap(), b"toy-image-1"]);
        let tag = format!("witness-test/toy:{h:016x}");
        let _lock = FileLock::new(&work_dir("docker-toy").join("image.lock"));
        if !image_exists(&tag) {
            let ctx = work_dir(&format!("docker-toy-ctx-{h:016x}"));
            std::fs::copy(bin, ctx.join("toy_server")).unwrap();
            std::fs::write(
                ctx.join("Dockerfile"),
                "FROM scratch\nCOPY toy_server /toy_server\nENTRYPOINT [\"/toy_server\"]\n",
            )
            .unwrap();
            docker_ok(&["build", "-q", "-t", &tag, ctx.to_str().unwrap()]);
            prune_others("witness-test/toy", &tag);
        }
        tag
    })
}

/// The shared libraries a binary needs, as `ldd` lists them (absolute paths).
fn libs_of(bin: &Path) -> Vec<PathBuf> {
    let out = run_bounded(Command::new("ldd").arg(bin), Duration::from_secs(30));
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .filter_map(|l| {
            let l = l.trim();
            let path = match l.split_once("=>") {
                Some((_, r)) => r.trim().split(' ').next()?,
                None => l.split(' ').next()?,
            };
            path.starts_with('/').then(|| PathBuf::from(path))
        })
        .collect()
}

fn place(root: &Path, from: &Path, at: &str) {
    let to = root.join(at.trim_start_matches('/'));
    std::fs::create_dir_all(to.parent().unwrap()).unwrap();
    // fs::copy follows symlinks: the library itself lands at the path the loader looks for.
    std::fs::copy(from, &to)
        .unwrap_or_else(|e| panic!("copying {} into the test rootfs: {e}", from.display()));
}

/// `witness-test/entry:<hash>`: a root filesystem assembled here and `docker import`ed: this build's
/// witness binary, wrappers/container-entrypoint as the entrypoint, /bin/sh, the static toy server,
/// and the shared libraries `ldd` names. witness is PID 1 in it.
pub fn entry_image() -> &'static str {
    static TAG: OnceLock<String> = OnceLock::new();
    TAG.get_or_init(|| {
        require_engine();
        let w = witness();
        let script = repo().join("wrappers/container-entrypoint");
        let sh = std::fs::canonicalize("/bin/sh").unwrap();
        let toy = static_toy();
        let h = hash(&[
            &std::fs::read(&w).unwrap(),
            &std::fs::read(&script).unwrap(),
            &std::fs::read(&sh).unwrap(),
            &std::fs::read(toy).unwrap(),
            b"entry-image-1",
        ]);
        let tag = format!("witness-test/entry:{h:016x}");
        let _lock = FileLock::new(&work_dir("docker-toy").join("image.lock"));
        if image_exists(&tag) {
            return tag;
        }
        let root = work_dir(&format!(
            "docker-entry-root-{h:016x}-{}",
            std::process::id()
        ));
        place(&root, &w, "/usr/local/bin/witness");
        place(&root, &script, "/usr/local/bin/container-entrypoint");
        place(&root, &sh, "/bin/sh");
        place(&root, toy, "/toy_server");
        for bin in [w.as_path(), sh.as_path()] {
            for lib in libs_of(bin) {
                place(&root, &lib, lib.to_str().unwrap());
            }
        }
        for d in ["tmp", "witness", "proc", "sys", "dev", "etc"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        let tar = root.with_extension("tar");
        let o = run_bounded(
            Command::new("tar")
                .arg("-C")
                .arg(&root)
                .arg("-cf")
                .arg(&tar)
                .arg("."),
            Duration::from_secs(120),
        );
        assert!(
            o.status.success(),
            "tar: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        docker_ok(&[
            "import",
            "--change",
            r#"ENTRYPOINT ["/usr/local/bin/container-entrypoint"]"#,
            "--change",
            "ENV PATH=/usr/local/bin:/bin",
            tar.to_str().unwrap(),
            &tag,
        ]);
        let _ = std::fs::remove_dir_all(&root);
        let _ = std::fs::remove_file(&tar);
        prune_others("witness-test/entry", &tag);
        tag
    })
}

/// The host pid of a container's main process (0 when it is not running).
pub fn host_pid(id: &str) -> i32 {
    docker_ok(&["inspect", "--format", "{{.State.Pid}}", id])
        .parse()
        .unwrap_or(0)
}

/// Zombie children of a host pid, read from /proc.
pub fn zombie_children(parent: i32) -> Vec<i32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let mut f = stat.rsplit(')').next().unwrap_or("").split_whitespace();
        let (state, ppid) = (f.next(), f.next().and_then(|p| p.parse::<i32>().ok()));
        if state == Some("Z") && ppid == Some(parent) {
            out.push(pid);
        }
    }
    out
}
