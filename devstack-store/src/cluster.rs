//! A throwaway PostgreSQL cluster of the store's own (`devstack serve
//! --postgres`, the harness's PostgreSQL scenarios, the store's conformance
//! tests): `initdb` and `pg_ctl` from Debian's `postgresql` package in a
//! temporary directory, listening on a Unix socket there only (no TCP
//! port, nothing another machine could reach), without fsync (it is thrown
//! away), stopped and removed when dropped, and by a watchdog when the
//! process that started it ends without dropping it (a static of a test
//! binary, a kill): the watchdog holds the read end of a pipe only the
//! process has the write end of. PostgreSQL refuses to run as root, so as
//! root the cluster runs as the package's `postgres` user, which owns the
//! directory.

use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

/// Why a cluster could not be started.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClusterError {
    /// No PostgreSQL server programs on this machine.
    #[error("PostgreSQL is not installed (no initdb under /usr/lib/postgresql/*/bin): apt-get install postgresql")]
    NotInstalled,
    /// A step failed.
    #[error("{step}: {reason}")]
    Step {
        /// What was being done (`initdb`, `pg_ctl start`, …).
        step: &'static str,
        /// Why (its output, or the I/O error).
        reason: String,
    },
}

/// A running throwaway cluster.
pub struct Cluster {
    dir: tempfile::TempDir,
    bin: PathBuf,
    user: Option<String>,
    /// Stops the cluster and removes its directory once this process is
    /// gone (its stdin, a pipe from here, reads end of file).
    watchdog: Option<Child>,
}

/// The directory of the newest PostgreSQL's server programs.
fn server_bin() -> Result<PathBuf, ClusterError> {
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .map_err(|_| ClusterError::NotInstalled)?
        .filter_map(|e| e.ok())
        .filter_map(|e| Some((e.file_name().to_str()?.parse().ok()?, e.path().join("bin"))))
        .filter(|(_, bin)| bin.join("initdb").exists())
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin).ok_or(ClusterError::NotInstalled)
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

impl Cluster {
    /// Starts a cluster in a new temporary directory (about a second).
    pub fn start() -> Result<Cluster, ClusterError> {
        let bin = server_bin()?;
        let dir = tempfile::Builder::new()
            .prefix("devstack-pg-")
            .tempdir()
            .map_err(|e| ClusterError::Step { step: "make its directory", reason: e.to_string() })?;
        let user = is_root().then(|| "postgres".to_string());
        if let Some(user) = &user {
            let status = Command::new("chown").arg(format!("{user}:")).arg(dir.path()).status();
            if !status.as_ref().is_ok_and(|s| s.success()) {
                return Err(ClusterError::Step {
                    step: "give its directory to postgres",
                    reason: format!("{status:?}"),
                });
            }
        }
        let mut cluster = Cluster { dir, bin, user, watchdog: None };
        let data = cluster.data();
        let initdb = ["-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8", "-D"];
        cluster.run("initdb", "initdb", |c| c.args(initdb).arg(&data))?;
        cluster.watchdog = Some(cluster.watchdog()?);
        cluster.pg_ctl("pg_ctl start", &["start"])?;
        Ok(cluster)
    }

    /// The watchdog: a shell in a session of its own (a Ctrl-C to this
    /// process's group does not reach it) that waits for end of file on
    /// its stdin, then stops the server at once and removes the directory.
    fn watchdog(&self) -> Result<Child, ClusterError> {
        let pg_ctl = self.bin.join("pg_ctl");
        let as_user = match &self.user {
            Some(user) => format!("runuser -u {user} -- "),
            None => String::new(),
        };
        let script = format!(
            "cat >/dev/null; {as_user}\"$0\" stop -m immediate -w -D \"$1/data\" >/dev/null 2>&1; rm -rf \"$1\""
        );
        let mut command = Command::new("sh");
        command.arg("-c").arg(script).arg(pg_ctl).arg(self.dir.path());
        command.stdin(Stdio::piped()).stdout(Stdio::null()).stderr(Stdio::null());
        // SAFETY: setsid is async-signal-safe and touches nothing of the
        // parent's; the child only execs after it.
        unsafe {
            command.pre_exec(|| {
                libc::setsid();
                Ok(())
            });
        }
        command.spawn().map_err(|e| ClusterError::Step { step: "start its watchdog", reason: e.to_string() })
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// Runs one of the server programs (as `postgres` when root), with the
    /// arguments `args` adds.
    fn run(
        &self,
        step: &'static str,
        program: &str,
        args: impl FnOnce(&mut Command) -> &mut Command,
    ) -> Result<(), ClusterError> {
        let mut command = match &self.user {
            Some(user) => {
                let mut c = Command::new("runuser");
                c.args(["-u", user, "--"]).arg(self.bin.join(program));
                c
            }
            None => Command::new(self.bin.join(program)),
        };
        command.current_dir(self.dir.path());
        let out = args(&mut command).output().map_err(|e| ClusterError::Step { step, reason: e.to_string() })?;
        if !out.status.success() {
            let said = String::from_utf8_lossy(&out.stderr).trim().to_string();
            return Err(ClusterError::Step { step, reason: format!("{}: {said}", out.status) });
        }
        Ok(())
    }

    /// `pg_ctl` on the cluster: its socket directory, no TCP, no fsync.
    fn pg_ctl(&self, step: &'static str, mode: &[&str]) -> Result<(), ClusterError> {
        let options = format!("-k {} -c listen_addresses='' -F -c max_connections=400", self.dir.path().display());
        let log = self.dir.path().join("postgres.log");
        self.run(step, "pg_ctl", |c| {
            c.args(["-w", "-t", "60", "-m", "fast", "-o", &options, "-l"])
                .arg(&log)
                .arg("-D")
                .arg(self.data())
                .args(mode)
        })
    }

    /// The URL of database `name` (the cluster's own is `postgres`):
    /// `postgresql://postgres@<its socket directory, encoded>/NAME`.
    pub fn url(&self, name: &str) -> String {
        let host: String = self
            .dir
            .path()
            .to_string_lossy()
            .bytes()
            .map(|b| {
                if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                    (b as char).to_string()
                } else {
                    format!("%{b:02X}")
                }
            })
            .collect();
        format!("postgresql://postgres@{host}/{name}")
    }

    /// Creates database `name` (for a test of its own); its URL.
    pub fn database(&self, name: &str) -> Result<String, ClusterError> {
        let ok = name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        if !ok || name.is_empty() {
            return Err(ClusterError::Step { step: "createdb", reason: format!("{name:?} is not a plain name") });
        }
        let socket = self.dir.path().to_path_buf();
        self.run("createdb", "createdb", |c| c.arg("-h").arg(&socket).args(["-U", "postgres", name]))?;
        Ok(self.url(name))
    }

    /// Restarts the server (`pg_ctl restart -m fast`): its clients are cut,
    /// as when PostgreSQL itself restarts.
    pub fn restart(&self) -> Result<(), ClusterError> {
        self.pg_ctl("pg_ctl restart", &["restart"])
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // A fast stop (the clients are cut); the directory goes with it.
        let _ = self.pg_ctl("pg_ctl stop", &["stop"]);
        if let Some(mut watchdog) = self.watchdog.take() {
            drop(watchdog.stdin.take());
            let _ = watchdog.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cluster_starts_serves_a_store_restarts_and_goes() {
        let Ok(cluster) = Cluster::start() else {
            assert!(std::env::var_os("CI").is_none(), "PostgreSQL must be installed under CI");
            eprintln!("skipped: PostgreSQL is not installed");
            return;
        };
        let url = cluster.database("cluster_test").unwrap();
        let store = crate::Store::open(&crate::StoreLocation::Postgres(url)).unwrap();
        assert_eq!(store.backend(), "postgres");
        let pool = crate::rows::PoolRow {
            id: "pool_1".into(),
            name: "p".into(),
            gpu_model: None,
            expect_gpu_count: Some(8),
            acceptance: "none".into(),
            created_at_ms: 1,
            kind: "gpu".into(),
            policy: "{}".into(),
        };
        store.write(|c| crate::pools::insert(c, &pool)).unwrap();
        assert_eq!(store.read(|c| crate::pools::get(c, "pool_1")).unwrap(), Some(pool.clone()));
        cluster.restart().unwrap();
        // The pool's connections were cut: they are made again.
        assert_eq!(store.read(crate::pools::all).unwrap(), vec![pool]);
        let dir = cluster.dir.path().to_path_buf();
        drop(store);
        drop(cluster);
        assert!(!dir.exists());
    }
}
