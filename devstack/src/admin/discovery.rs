//! How a client finds a running stack's admin endpoint (docs/devstack.md,
//! "The admin endpoint"): a small JSON discovery file (the URL, the token
//! file, the server's pid) at a per-user location, and the bearer token in
//! its own file readable by the owner only. `devstack serve` writes both at
//! start and removes both at exit; `--admin-file` or `DEVSTACK_ADMIN`
//! moves the discovery file (the token file goes beside it).

use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The environment variable naming the discovery file.
pub const ENV: &str = "DEVSTACK_ADMIN";
/// The discovery file's name in the default directory.
pub const FILE_NAME: &str = "admin.json";

/// What the discovery file says.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Discovery {
    /// The endpoint (`http://127.0.0.1:PORT`).
    pub url: String,
    /// The file holding the bearer token (mode 0600).
    pub token_file: PathBuf,
    /// The serving process.
    pub pid: u32,
    /// The stack's data directory.
    pub data_dir: PathBuf,
    /// When the stack started (Unix milliseconds).
    pub started_at_ms: i64,
}

/// The current user's id.
fn uid() -> u32 {
    // SAFETY: getuid has no preconditions and cannot fail.
    unsafe { libc::getuid() }
}

/// The default discovery file: `$XDG_RUNTIME_DIR/devstack/admin.json`, else
/// `<temp dir>/devstack-<uid>/admin.json`.
pub fn default_path() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        Some(runtime) => PathBuf::from(runtime).join("devstack").join(FILE_NAME),
        None => std::env::temp_dir().join(format!("devstack-{}", uid())).join(FILE_NAME),
    }
}

/// The discovery file to use: the flag's, else `DEVSTACK_ADMIN`'s, else the
/// default.
pub fn path(flag: Option<&Path>) -> PathBuf {
    flag.map(Path::to_path_buf)
        .or_else(|| std::env::var_os(ENV).filter(|p| !p.is_empty()).map(PathBuf::from))
        .unwrap_or_else(default_path)
}

/// The token file beside a discovery file: `admin.json` → `admin.json.token`.
pub fn token_path(discovery: &Path) -> PathBuf {
    let mut name = discovery.file_name().unwrap_or_default().to_os_string();
    name.push(".token");
    discovery.with_file_name(name)
}

/// Whether a process with this pid runs.
pub fn alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else { return false };
    // SAFETY: signal 0 only checks that the process exists.
    let answered = pid > 0 && unsafe { libc::kill(pid, 0) } == 0;
    // EPERM: it exists, and belongs to someone else.
    answered || (pid > 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM))
}

/// Reads a discovery file.
pub fn read(path: &Path) -> std::io::Result<Discovery> {
    let text = std::fs::read(path)?;
    serde_json::from_slice(&text).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

/// Creates the directory of the discovery file, mode 0700 when it is new.
/// An existing one must be the current user's.
fn ensure_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _};
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    let owner = std::fs::metadata(dir)?.uid();
    if owner != uid() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!("{} belongs to uid {owner}, not to this user", dir.display()),
        ));
    }
    Ok(())
}

/// Writes a file readable by its owner only (0600, also when it existed),
/// through a temporary name, so a reader never sees it half-written.
pub fn write_private(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
    let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp)?;
    file.write_all(contents)?;
    file.sync_all()?;
    std::fs::rename(&tmp, path)
}

/// The discovery and token files of a running endpoint; removed on drop.
#[derive(Debug)]
pub struct Published {
    discovery: PathBuf,
    token: PathBuf,
}

impl Published {
    /// Writes the token file, then the discovery file (so a client that
    /// finds the second finds the first). Refuses when the discovery file
    /// names a process that still runs.
    pub fn write(discovery: &Path, mut what: Discovery, token: &str) -> std::io::Result<Published> {
        if let Some(dir) = discovery.parent().filter(|d| !d.as_os_str().is_empty()) {
            ensure_dir(dir)?;
        }
        if let Ok(other) = read(discovery)
            && other.pid != std::process::id()
            && alive(other.pid)
        {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                format!(
                    "{} names a dev stack that still runs (pid {}); stop it, or pass --admin-file (or set {ENV}) to run another",
                    discovery.display(),
                    other.pid
                ),
            ));
        }
        let token_file = token_path(discovery);
        write_private(&token_file, format!("{token}\n").as_bytes())?;
        what.token_file = token_file.clone();
        let json = serde_json::to_vec_pretty(&what).map_err(std::io::Error::other)?;
        write_private(discovery, &json)?;
        Ok(Published { discovery: discovery.to_path_buf(), token: token_file })
    }

    /// The discovery file.
    pub fn path(&self) -> &Path {
        &self.discovery
    }
}

impl Drop for Published {
    fn drop(&mut self) {
        // Only our own discovery file: a later stack may have replaced a
        // stale one.
        if read(&self.discovery).is_ok_and(|d| d.pid == std::process::id()) {
            let _ = std::fs::remove_file(&self.discovery);
        }
        let _ = std::fs::remove_file(&self.token);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn discovery(pid: u32) -> Discovery {
        Discovery {
            url: "http://127.0.0.1:1".into(),
            token_file: PathBuf::new(),
            pid,
            data_dir: "/tmp/x".into(),
            started_at_ms: 1,
        }
    }

    #[test]
    fn the_files_are_private_refuse_a_live_owner_and_go_away() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub").join("admin.json");
        let published = Published::write(&path, discovery(std::process::id()), "secret").unwrap();
        let read_back = read(&path).unwrap();
        assert_eq!(read_back.token_file, token_path(&path));
        assert_eq!(std::fs::read_to_string(&read_back.token_file).unwrap(), "secret\n");
        for file in [&path, &read_back.token_file] {
            assert_eq!(std::fs::metadata(file).unwrap().permissions().mode() & 0o777, 0o600);
        }
        assert_eq!(std::fs::metadata(path.parent().unwrap()).unwrap().permissions().mode() & 0o777, 0o700);

        // Another process's live file is refused; a stale one is replaced.
        let other = dir.path().join("other.json");
        std::fs::write(&other, serde_json::to_vec(&discovery(1)).unwrap()).unwrap();
        let refused = Published::write(&other, discovery(std::process::id()), "s").unwrap_err();
        assert_eq!(refused.kind(), std::io::ErrorKind::AlreadyExists, "pid 1 runs");
        std::fs::write(&other, serde_json::to_vec(&discovery(u32::MAX - 1)).unwrap()).unwrap();
        drop(Published::write(&other, discovery(std::process::id()), "s").unwrap());
        assert!(!other.exists());

        drop(published);
        assert!(!path.exists() && !token_path(&path).exists());
    }

    #[test]
    fn the_location_follows_the_flag_then_the_environment() {
        assert_eq!(path(Some(Path::new("/x/a.json"))), PathBuf::from("/x/a.json"));
        assert!(default_path().ends_with(FILE_NAME));
        assert_eq!(token_path(Path::new("/x/a.json")), PathBuf::from("/x/a.json.token"));
    }
}
