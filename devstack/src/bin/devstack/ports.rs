//! The ports a stack on a data directory keeps (docs/devstack.md,
//! "devstack serve"): `serve --data DIR` writes the gateway, HTTP and HTTPS
//! ports it listens on to `DIR/ports.json`, and a later `serve` on DIR
//! listens on the same ones unless a flag names another, so the nodes
//! that joined it (their `config.toml` names the gateway and the WebSocket
//! URL) find it again after a restart.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use serde::{Deserialize, Serialize};

/// The file's name in the data directory.
pub const PORTS_FILE: &str = "ports.json";

/// The ports of a stack.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ports {
    /// The gateway (gRPC).
    pub gateway: u16,
    /// The well-known document, the releases.
    pub http: u16,
    /// The WebSocket session, renewal, OTLP.
    pub https: u16,
}

/// Where the ports of `dir` are kept.
pub fn path(dir: &Path) -> PathBuf {
    dir.join(PORTS_FILE)
}

impl Ports {
    /// The ports kept in `dir` (all 0 when none are: the kernel picks).
    pub fn kept(dir: &Path) -> Result<Ports> {
        let file = path(dir);
        match std::fs::read(&file) {
            Ok(bytes) => serde_json::from_slice(&bytes).with_context(|| format!("read {}", file.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Ports::default()),
            Err(e) => Err(e).with_context(|| format!("read {}", file.display())),
        }
    }

    /// Each flag given, else the kept port.
    pub fn choose(self, gateway: Option<u16>, http: Option<u16>, https: Option<u16>) -> Ports {
        Ports {
            gateway: gateway.unwrap_or(self.gateway),
            http: http.unwrap_or(self.http),
            https: https.unwrap_or(self.https),
        }
    }

    /// Keeps these ports in `dir`.
    pub fn keep(&self, dir: &Path) -> Result<()> {
        let file = path(dir);
        let json = serde_json::to_vec_pretty(self)?;
        devstack::admin::discovery::write_private(&file, &json).with_context(|| format!("write {}", file.display()))
    }

    /// Whether any port is a kept one (not 0).
    pub fn any(&self) -> bool {
        self.gateway != 0 || self.http != 0 || self.https != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_ports_come_back_unless_a_flag_names_another() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(Ports::kept(dir.path()).unwrap(), Ports::default());
        Ports { gateway: 4000, http: 4001, https: 4002 }.keep(dir.path()).unwrap();
        let kept = Ports::kept(dir.path()).unwrap();
        assert_eq!(kept.choose(None, Some(0), None), Ports { gateway: 4000, http: 0, https: 4002 });
    }
}
