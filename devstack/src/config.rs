//! A ready `config.toml` for bcd (and `join-encryption.jwk` beside it):
//! the gateways, the pins, the `[websocket]` URL a node falls back to when
//! its gRPC dial fails, and an optional `[update]` section pinning the
//! release keys.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::releases::UpdatePins;
use crate::shared::Shared;

/// The file name of bcd's configuration.
pub const CONFIG_FILE: &str = "config.toml";
/// The file name of the join-encryption JWK, next to the configuration.
pub const JWK_FILE: &str = "join-encryption.jwk";

/// What goes into a bcd configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BcdConfig {
    /// The gateway's URL (the node's home).
    pub gateway_url: String,
    /// Every gateway's URL, the home first (written when there are several).
    pub gateway_urls: Vec<String>,
    /// The name the serving certificate is checked for.
    pub gateway_server_name: String,
    /// The serving CA's pin.
    pub serving_ca_spki_pin: String,
    /// The JoinService signing key's pin.
    pub join_signing_pin: String,
    /// The JoinService signing key itself (standard base64 of its SPKI DER).
    pub join_signing_key: String,
    /// The join-encryption key's pin.
    pub join_encryption_pin: String,
    /// bcd's data directory.
    pub data_dir: PathBuf,
    /// The WebSocket session's URL (`[websocket] url`), if any.
    pub websocket_url: Option<String>,
    /// The `[update]` section, if any.
    pub update: Option<UpdatePins>,
}

/// Where [`write`] put the files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BcdConfigPaths {
    /// `config.toml`.
    pub config: PathBuf,
    /// `join-encryption.jwk`.
    pub jwk: PathBuf,
}

/// A TOML basic string.
pub(crate) fn toml_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The text of `config.toml`.
pub fn render(config: &BcdConfig) -> String {
    let line = |key: &str, value: &str| format!("{key} = {}\n", toml_string(value));
    let mut text = String::from("# A bcd configuration written by the dev stack (devstack).\n");
    text += &line("gateway_url", &config.gateway_url);
    if config.gateway_urls.len() > 1 {
        let urls: Vec<String> = config.gateway_urls.iter().map(|u| toml_string(u)).collect();
        text += &format!("gateway_urls = [{}]\n", urls.join(", "));
    }
    text += &line("gateway_server_name", &config.gateway_server_name);
    text += &line("serving_ca_spki_pin", &config.serving_ca_spki_pin);
    text += &line("join_signing_pin", &config.join_signing_pin);
    text += &line("join_signing_key", &config.join_signing_key);
    text += &line("join_encryption_pin", &config.join_encryption_pin);
    text += &line("data_dir", &config.data_dir.to_string_lossy());
    text += &line("node_id", "");
    if let Some(url) = &config.websocket_url {
        text += "\n[websocket]\n";
        text += &line("url", url);
    }
    if let Some(update) = &config.update {
        let array = |items: Vec<String>| {
            let items: Vec<String> = items.iter().map(|s| toml_string(s)).collect();
            format!("[{}]", items.join(", "))
        };
        text += "\n[update]\n";
        text += &format!("release_keys = {}\n", array(update.spki_b64()));
        text += &format!("release_key_pins = {}\n", array(update.pins()));
        text += &format!("threshold = {}\n", update.threshold);
        text += &format!("min_sequence = {}\n", update.min_sequence);
    }
    text
}

/// Writes `dir/config.toml` and `dir/join-encryption.jwk`.
pub fn write(dir: &Path, config: &BcdConfig, jwk: &str) -> Result<BcdConfigPaths> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| Error::Io { path, source }
    };
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let paths = BcdConfigPaths { config: dir.join(CONFIG_FILE), jwk: dir.join(JWK_FILE) };
    std::fs::write(&paths.config, render(config)).map_err(io(&paths.config))?;
    std::fs::write(&paths.jwk, format!("{jwk}\n")).map_err(io(&paths.jwk))?;
    Ok(paths)
}

/// Writes a ready bcd `config.toml` for this stack (with `[websocket] url`
/// set to `websocket_url`, and an `[update]` section pinning `update`, when
/// given: the stack's release keys or a changed copy) and
/// `join-encryption.jwk` into `dir`.
pub fn write_for(
    shared: &Shared,
    dir: &Path,
    data_dir: &Path,
    websocket_url: Option<String>,
    update: Option<&UpdatePins>,
) -> Result<BcdConfigPaths> {
    let gateway_urls: Vec<String> = crate::cluster::live(shared)?.into_iter().map(|g| g.grpc_url).collect();
    // The first of the list: this gateway, unless it is not listed.
    let home = gateway_urls.first().unwrap_or(&shared.settings.gateway_url).clone();
    write_with(shared, dir, data_dir, (home, gateway_urls), websocket_url, update)
}

/// Like [`write_for`], the node dialing `gateway_urls` (in that order; a
/// fault proxy's addresses in front of the stack's gateways, say), with no
/// `[websocket]` and no `[update]` section.
pub fn write_via(shared: &Shared, dir: &Path, data_dir: &Path, gateway_urls: &[String]) -> Result<BcdConfigPaths> {
    let home = gateway_urls.first().unwrap_or(&shared.settings.gateway_url).clone();
    write_with(shared, dir, data_dir, (home, gateway_urls.to_vec()), None, None)
}

/// Writes the configuration of a node whose home and gateways are `gateways`.
fn write_with(
    shared: &Shared,
    dir: &Path,
    data_dir: &Path,
    (gateway_url, gateway_urls): (String, Vec<String>),
    websocket_url: Option<String>,
    update: Option<&UpdatePins>,
) -> Result<BcdConfigPaths> {
    let pins = shared.keys.pins();
    let cfg = BcdConfig {
        gateway_url,
        gateway_urls,
        gateway_server_name: crate::SERVER_NAME.to_string(),
        serving_ca_spki_pin: pins.serving_ca,
        join_signing_pin: pins.join_signing,
        join_signing_key: pins.join_signing_key,
        join_encryption_pin: pins.join_encryption,
        data_dir: data_dir.to_path_buf(),
        websocket_url,
        update: update.cloned(),
    };
    write(dir, &cfg, &pins.join_encryption_jwk)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_are_escaped() {
        assert_eq!(toml_string(r#"C:\data "x""#), r#""C:\\data \"x\"""#);
        let config = BcdConfig {
            gateway_url: "https://127.0.0.1:1".into(),
            gateway_urls: vec!["https://127.0.0.1:1".into()],
            gateway_server_name: "gw.dev.local".into(),
            serving_ca_spki_pin: "sha256:a".into(),
            join_signing_pin: "sha256:b".into(),
            join_signing_key: "MCow".into(),
            join_encryption_pin: "sha256:c".into(),
            data_dir: "/tmp/bcd".into(),
            websocket_url: None,
            update: None,
        };
        let text = render(&config);
        assert!(text.contains("gateway_server_name = \"gw.dev.local\"\n"));
        assert!(text.ends_with("node_id = \"\"\n"));
        assert!(!text.contains("[update]"));
        assert!(!text.contains("gateway_urls"), "one gateway: no list");
        let several = BcdConfig { gateway_urls: vec!["https://a:1".into(), "https://b:2".into()], ..config.clone() };
        assert!(render(&several).contains("gateway_urls = [\"https://a:1\", \"https://b:2\"]\n"));

        let key = pki::Signer::public_key(&pki::keys::ed25519("bc-interop-v1", "release/0"));
        let update = UpdatePins { keys: vec![key.clone()], threshold: 2, min_sequence: 5 };
        let text = render(&BcdConfig { update: Some(update), ..config });
        let tail = format!(
            "node_id = \"\"\n\n[update]\nrelease_keys = [\"{}\"]\nrelease_key_pins = [\"{}\"]\nthreshold = 2\nmin_sequence = 5\n",
            pki::b64::std(&key.spki_der()),
            key.pin()
        );
        assert!(text.ends_with(&tail), "{text}");
    }
}
