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

/// Why a file or directory another user could have made or changed is not
/// trusted, or `None` when it is this user's, not a symlink, and writable by
/// no one else (`private`: readable by no one else either).
fn untrusted(path: &Path, dir: bool, private: bool) -> Option<String> {
    use std::os::unix::fs::MetadataExt as _;
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) => return Some(format!("{}: {e}", path.display())),
    };
    let kind = meta.file_type();
    let shown = path.display();
    if kind.is_symlink() {
        return Some(format!("{shown} is a symbolic link"));
    }
    if (dir && !kind.is_dir()) || (!dir && !kind.is_file()) {
        return Some(format!("{shown} is not a {}", if dir { "directory" } else { "regular file" }));
    }
    if meta.uid() != uid() {
        return Some(format!("{shown} belongs to uid {}, not to this user ({})", meta.uid(), uid()));
    }
    let others = if private { 0o077 } else { 0o022 };
    if meta.mode() & others != 0 {
        return Some(format!(
            "{shown} has mode {:o}: others may {}",
            meta.mode() & 0o777,
            if private { "read it" } else { "change it" }
        ));
    }
    None
}

/// Whether a discovery file's endpoint is on loopback: `http://` and an IP
/// literal of the loopback range with a port (what `serve` writes).
pub fn loopback_authority(url: &str) -> Option<&str> {
    let authority = url.strip_prefix("http://").filter(|a| !a.contains('/'))?;
    let addr: std::net::SocketAddr = authority.parse().ok()?;
    addr.ip().is_loopback().then_some(authority)
}

/// Reads a discovery file a client may trust: it and its directory are the
/// current user's and writable by no one else, its endpoint is on loopback,
/// and its token file is the one beside it, the user's, mode 0600 (the
/// checks `serve` makes, so a file another user planted is refused before
/// its token file is read or any request is sent).
pub fn read_trusted(path: &Path) -> std::io::Result<Discovery> {
    let refuse = |why: String| std::io::Error::new(std::io::ErrorKind::PermissionDenied, why);
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    if let Some(why) = untrusted(dir, true, false) {
        return Err(refuse(why));
    }
    std::fs::symlink_metadata(path)?; // NotFound: no stack runs
    if let Some(why) = untrusted(path, false, false) {
        return Err(refuse(why));
    }
    let discovery = read(path)?;
    if loopback_authority(&discovery.url).is_none() {
        return Err(refuse(format!("its endpoint {:?} is not http:// on a loopback address", discovery.url)));
    }
    if discovery.token_file != token_path(path) {
        let beside = token_path(path);
        return Err(refuse(format!(
            "it names the token file {}, not {}",
            discovery.token_file.display(),
            beside.display()
        )));
    }
    if let Some(why) = untrusted(&discovery.token_file, false, true) {
        return Err(refuse(why));
    }
    Ok(discovery)
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

/// Refuses when the discovery file names a process that still runs (not
/// this one): a second stack must not take it over. Reads only.
pub fn check_free(discovery: &Path) -> std::io::Result<()> {
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
    Ok(())
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
        check_free(discovery)?;
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
    fn a_discovery_file_another_user_could_have_planted_is_refused() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d").join("admin.json");
        let published = Published::write(&path, discovery(std::process::id()), "secret").unwrap();
        assert_eq!(read_trusted(&path).unwrap().token_file, token_path(&path));
        let refused = |why: &str| {
            let e = read_trusted(&path).unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied, "{why}: {e}");
            assert!(e.to_string().contains(why), "{why}: {e}");
        };
        let mode = |p: &Path, m: u32| std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
        let rewrite = |d: Discovery| write_private(&path, &serde_json::to_vec(&d).unwrap()).unwrap();
        let good = read(&path).unwrap();

        mode(path.parent().unwrap(), 0o777);
        refused("others may change it");
        mode(path.parent().unwrap(), 0o700);
        mode(&path, 0o666);
        refused("others may change it");
        mode(&path, 0o600);
        mode(&good.token_file, 0o644);
        refused("others may read it");
        mode(&good.token_file, 0o600);
        rewrite(Discovery { url: "http://203.0.113.7:80".into(), ..good.clone() });
        refused("not http:// on a loopback address");
        rewrite(Discovery { url: "http://evil.example:80".into(), ..good.clone() });
        refused("not http:// on a loopback address");
        let elsewhere = dir.path().join("victim-secret");
        std::fs::write(&elsewhere, "another file of this user").unwrap();
        rewrite(Discovery { token_file: elsewhere, ..good.clone() });
        refused("not");
        rewrite(good.clone());
        let link = dir.path().join("link.json");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        let e = read_trusted(&link).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        if uid() == 0 {
            // Planted by another user (root can make the file someone else's).
            std::os::unix::fs::chown(&path, Some(65534), None).unwrap();
            refused("belongs to uid 65534");
            std::os::unix::fs::chown(&path, Some(0), None).unwrap();
        }
        assert!(read_trusted(&path).is_ok());
        drop(published);
    }

    #[test]
    fn the_location_follows_the_flag_then_the_environment() {
        assert_eq!(path(Some(Path::new("/x/a.json"))), PathBuf::from("/x/a.json"));
        assert!(default_path().ends_with(FILE_NAME));
        assert_eq!(token_path(Path::new("/x/a.json")), PathBuf::from("/x/a.json.token"));
    }
}
