//! A cgroup (v2) holding the server tree, where witness may create one: the server starts in
//! `witness-<pid>-<n>` (spawn.rs), so every descendant is in it whatever it does (`setsid`, double
//! fork); ending the tree is one write to `cgroup.kill`, or a kill of every pid in
//! `cgroup.procs` on kernels without it. The guard ([`super::guard`]) makes it, the tree watcher
//! and the watchdog use it: it depends on neither.

use std::path::{Path, PathBuf};

/// A cgroup holding the server tree.
#[derive(Clone, Debug)]
pub struct Cgroup {
    pub dir: PathBuf,
}

impl Cgroup {
    /// Creates `witness-<pid>-<n>` next to (below) witness's own cgroup v2, when witness may.
    /// `WITNESS_CGROUP=off` declines it, to run (and test) the unprivileged guarantee as root.
    pub fn create(n: u32) -> Option<Cgroup> {
        if std::env::var_os("WITNESS_CGROUP").is_some_and(|v| v == "off") {
            return None;
        }
        let base = v2_own_dir()?;
        let dir = base.join(format!("witness-{}-{n}", std::process::id()));
        std::fs::create_dir(&dir).ok()?;
        // A cgroup we cannot move a process into is no use: test with the `cgroup.procs` file.
        if !dir.join("cgroup.procs").exists() {
            let _ = std::fs::remove_dir(&dir);
            return None;
        }
        Some(Cgroup { dir })
    }

    pub fn pids(&self) -> Vec<u32> {
        pids_in(&self.dir)
    }

    /// Kills every process in the cgroup and removes it once empty. Returns how many were left.
    pub fn kill_all(&self) -> usize {
        kill_cgroup(&self.dir)
    }
}

fn pids_in(dir: &Path) -> Vec<u32> {
    std::fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

pub(super) fn kill_cgroup(dir: &Path) -> usize {
    let left = pids_in(dir);
    if !left.is_empty() && std::fs::write(dir.join("cgroup.kill"), "1").is_err() {
        for p in &left {
            // SAFETY: kill with plain integers.
            unsafe { libc::kill(*p as i32, libc::SIGKILL) };
        }
    }
    // The kernel takes a moment to empty it; rmdir succeeds once it is.
    for _ in 0..200 {
        if std::fs::remove_dir(dir).is_ok() || !dir.exists() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    left.len()
}

/// witness's own cgroup v2 folder, from where cgroup2 is mounted and /proc/self/cgroup.
fn v2_own_dir() -> Option<PathBuf> {
    let mount = v2_mount()?;
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let rel = own.lines().find_map(|l| l.strip_prefix("0::"))?;
    let dir = mount.join(rel.trim_start_matches('/'));
    dir.is_dir().then_some(dir)
}

/// Where cgroup2 is mounted: one of the two places systems put it (`/sys/fs/cgroup`, or
/// `/sys/fs/cgroup/unified` beside v1 controllers), asked of the file system itself; elsewhere,
/// found in /proc/self/mountinfo (a long file where docker keeps many mounts: reading it was a
/// tenth of `wrap -- true`).
fn v2_mount() -> Option<PathBuf> {
    v2_usual_mount().or_else(|| v2_mounts_listed().into_iter().next())
}

/// cgroup2 at one of its usual places, by the file system's magic number.
fn v2_usual_mount() -> Option<PathBuf> {
    const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;
    [c"/sys/fs/cgroup", c"/sys/fs/cgroup/unified"]
        .into_iter()
        .find(|dir| {
            // SAFETY: statfs fills a plain struct through a valid pointer, from a NUL-terminated
            // path.
            unsafe {
                let mut st: libc::statfs = std::mem::zeroed();
                libc::statfs(dir.as_ptr(), &mut st) == 0 && st.f_type as i64 == CGROUP2_SUPER_MAGIC
            }
        })
        .and_then(|dir| Some(PathBuf::from(dir.to_str().ok()?)))
}

/// Every cgroup2 mount /proc/self/mountinfo lists, in its order.
fn v2_mounts_listed() -> Vec<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    mounts
        .lines()
        .filter_map(|l| {
            let (pre, post) = l.split_once(" - ")?;
            post.starts_with("cgroup2 ")
                .then(|| pre.split(' ').nth(4).map(PathBuf::from))?
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    /// The quick look finds cgroup2 wherever mountinfo puts it at a usual place, and nowhere
    /// else; and some cgroup2 is found whenever mountinfo lists one.
    #[test]
    fn the_cgroup2_mount_is_one_mountinfo_names() {
        let listed = super::v2_mounts_listed();
        let usual = listed.iter().find(|m| {
            *m == Path::new("/sys/fs/cgroup") || *m == Path::new("/sys/fs/cgroup/unified")
        });
        assert_eq!(super::v2_usual_mount().as_ref(), usual, "{listed:?}");
        match super::v2_mount() {
            Some(m) => assert!(listed.contains(&m), "{m:?} is not in {listed:?}"),
            None => assert!(listed.is_empty(), "missed {listed:?}"),
        }
    }
}
