//! How witness creates the files it writes (journals, reports, timelines, traces): never through a
//! symlink, exclusively where the name is witness's own choice, 0600 when the run carries secrets,
//! and the default journal in a per-user folder rather than under a predictable name in /tmp.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The mode a new artifact gets: 0600 when the run carries secrets (a credential masked in the
/// text still says a run was authenticated), else 0644 (both before the umask).
pub fn mode() -> u32 {
    if crate::secrets::carried() {
        0o600
    } else {
        0o644
    }
}

/// Opens `path` for writing the user asked for (`--journal FILE`): created or truncated, but never
/// through a symlink (a planted link would make witness overwrite its target).
pub fn create_named(path: &Path) -> io::Result<File> {
    let f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode())
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => io::Error::new(
                io::ErrorKind::InvalidInput,
                "it is a symbolic link; witness does not write through links (remove it or name the file it points to)",
            ),
            _ => e,
        })?;
    if crate::secrets::carried() {
        // An existing file keeps its old mode on truncate: tighten it.
        use std::os::unix::fs::PermissionsExt;
        f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    }
    Ok(f)
}

/// Creates a new file whose name witness chose: exclusively (never an existing file or link).
pub fn create_new(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode())
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

/// Where default journals go: `$XDG_STATE_HOME/witness`, else `~/.local/state/witness` (created
/// 0700), else the working directory; never a shared temp folder.
pub fn state_dir() -> PathBuf {
    let base = std::env::var_os("XDG_STATE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| {
            std::env::var_os("HOME")
                .map(PathBuf::from)
                .filter(|p| p.is_absolute())
                .map(|h| h.join(".local").join("state"))
        });
    match base {
        Some(b) => b.join("witness"),
        None => PathBuf::from("."),
    }
}

/// Creates the per-user folder (0700) if it is missing.
pub fn ensure_state_dir(dir: &Path) -> io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

/// Writes `bytes` to `path` whole: into a new file beside it whose name witness chose (created
/// exclusively), then renamed over `path` (a rename replaces a link, never writes through it), so
/// a reader never sees half a file.
pub fn replace(path: &Path, bytes: &[u8]) -> io::Result<()> {
    use std::io::Write;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let tmp = path.with_file_name(format!(
        ".{name}.witness-{}-{stamp:08x}",
        std::process::id()
    ));
    let res = create_new(&tmp)
        .and_then(|mut f| f.write_all(bytes))
        .and_then(|_| std::fs::rename(&tmp, path));
    if res.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_is_never_written_through() {
        let dir = std::env::temp_dir().join(format!("witness-files-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let target = dir.join("victim");
        std::fs::write(&target, "keep me").unwrap();
        let link = dir.join("link");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let e = create_named(&link).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        assert!(create_new(&link).is_err());
        replace(&link, b"new").unwrap();
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep me");
        assert_eq!(std::fs::read_to_string(&link).unwrap(), "new");
        assert!(!std::fs::symlink_metadata(&link).unwrap().is_symlink());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
