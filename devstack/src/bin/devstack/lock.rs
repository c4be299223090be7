//! The data directory's lock (docs/devstack.md, "devstack serve"): `serve
//! --data DIR` takes an exclusive `flock` on `DIR/devstack.lock` before it
//! reads or writes anything else there, holds it for its whole life (the
//! kernel drops it when the process ends, however it ends), and writes its
//! pid into the file; a second stack on the same directory, whatever its
//! `--admin-file`, is refused naming that pid, having touched nothing.

use std::fs::File;
use std::io::{Read as _, Seek as _, Write as _};
use std::path::Path;

use anyhow::{Context as _, Result, bail};

/// The lock file's name in the data directory.
pub const LOCK_FILE: &str = "devstack.lock";

/// A held lock; dropping it releases it.
#[derive(Debug)]
pub struct DataLock {
    _file: File,
}

impl DataLock {
    /// Locks `dir` (which exists), or says which process holds it.
    pub fn take(dir: &Path) -> Result<DataLock> {
        use std::os::unix::fs::OpenOptionsExt as _;
        let path = dir.join(LOCK_FILE);
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .with_context(|| format!("open the lock file {}", path.display()))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                let mut holder = String::new();
                let _ = file.read_to_string(&mut holder);
                let holder = holder.trim();
                let who = if holder.is_empty() { "another process".to_string() } else { format!("pid {holder}") };
                bail!(
                    "{} is in use by another dev stack ({who} holds {}): stop it, or pass another --data",
                    dir.display(),
                    path.display()
                );
            }
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(e).with_context(|| format!("lock {}", path.display()));
            }
        }
        file.set_len(0).and_then(|()| file.rewind()).with_context(|| format!("write {}", path.display()))?;
        writeln!(file, "{}", std::process::id()).with_context(|| format!("write {}", path.display()))?;
        Ok(DataLock { _file: file })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_is_refused_naming_the_holder() {
        let dir = tempfile::tempdir().unwrap();
        let held = DataLock::take(dir.path()).unwrap();
        let file = dir.path().join(LOCK_FILE);
        assert_eq!(std::fs::read_to_string(file).unwrap(), format!("{}\n", std::process::id()));
        let refused = DataLock::take(dir.path()).unwrap_err().to_string();
        assert!(refused.contains(&format!("pid {}", std::process::id())), "{refused}");
        drop(held);
        DataLock::take(dir.path()).unwrap();
    }
}
