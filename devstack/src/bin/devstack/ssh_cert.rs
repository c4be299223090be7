//! `devstack ssh-cert NODE --principal P --ttl D [--key FILE.pub | --out
//! DIR] [--source-address CIDR]…` (docs/devstack.md, "SSH certificate
//! authorities"): a user certificate of the stack's break-glass CA. With
//! `--key` it certifies that public key and writes the certificate beside
//! it (`FILE-cert.pub`, as ssh-keygen does); without, it makes a fresh
//! Ed25519 key here (the private key never leaves this machine) and
//! writes `id_ed25519`, `id_ed25519.pub` and `id_ed25519-cert.pub` into
//! DIR (the private key 0600). It prints the files and an `ssh` line.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::Args;
use devstack::admin::api::{SshCertRequestBody, SshCertView};
use ssh_key::LineEnding;
use ssh_key::private::{Ed25519Keypair, PrivateKey};

/// `devstack ssh-cert`.
#[derive(Args)]
pub struct SshCert {
    /// The node: its id, a unique prefix of it, or its hostname.
    node: String,
    /// The principal the certificate logs in as (one the node allows: `root`).
    #[arg(long, value_name = "P")]
    principal: String,
    /// How long it is valid (`15m`, `1h`; at most `24h`).
    #[arg(long, value_name = "D", default_value = "1h", value_parser = humantime::parse_duration)]
    ttl: Duration,
    /// Certify this public key (its certificate goes beside it) instead of a fresh key.
    #[arg(long, value_name = "FILE.pub", conflicts_with = "out")]
    key: Option<PathBuf>,
    /// Where a fresh key and its certificate go (default: the current directory).
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Addresses the certificate may be used from (CIDR; repeat for more).
    #[arg(long = "source-address", value_name = "CIDR")]
    source_addresses: Vec<String>,
    #[command(flatten)]
    output: crate::output::Output,
}

/// The certificate's path of a public key file (`id.pub` → `id-cert.pub`).
fn cert_path(public: &Path) -> PathBuf {
    let name = public.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    public.with_file_name(format!("{}-cert.pub", name.strip_suffix(".pub").unwrap_or(&name)))
}

/// Writes a file with `mode`, refusing one that is there already.
fn write_new(path: &Path, data: &[u8], mode: u32) -> Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .with_context(|| format!("{} (not overwritten)", path.display()))?;
    f.write_all(data).with_context(|| path.display().to_string())
}

/// A fresh Ed25519 key in `dir`: the private key's path and the public line.
fn fresh_key(dir: &Path) -> Result<(PathBuf, String)> {
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed).map_err(|e| anyhow::anyhow!("the OS random number generator: {e}"))?;
    let key = PrivateKey::from(Ed25519Keypair::from(&ed25519_dalek::SigningKey::from_bytes(&seed)));
    let private = key.to_openssh(LineEnding::LF).context("encode the private key")?;
    let public = key.public_key().to_openssh().context("encode the public key")?;
    let path = dir.join("id_ed25519");
    write_new(&path, private.as_bytes(), 0o600)?;
    write_new(&dir.join("id_ed25519.pub"), format!("{public}\n").as_bytes(), 0o644)?;
    Ok((path, public))
}

impl SshCert {
    pub async fn run(self, ctx: &crate::Context) -> Result<ExitCode> {
        ssh_cert(ctx, self).await
    }
}

async fn ssh_cert(ctx: &crate::Context, args: SshCert) -> Result<ExitCode> {
    let route = crate::nodes::route("nodes", "node", &args.node, "/ssh-cert")?;
    let client = ctx.client()?;
    let (identity, public) = match &args.key {
        Some(path) => {
            let line = std::fs::read_to_string(path).with_context(|| path.display().to_string())?;
            (path.with_extension(""), line.trim().to_string())
        }
        None => {
            let dir = args.out.clone().unwrap_or_else(|| PathBuf::from("."));
            if dir.join("id_ed25519").exists() {
                bail!("{} exists: give another --out, or --key", dir.join("id_ed25519").display());
            }
            fresh_key(&dir)?
        }
    };
    let body = SshCertRequestBody {
        principal: args.principal.clone(),
        ttl_ms: args.ttl.as_millis() as u64,
        public_key: public,
        source_addresses: args.source_addresses,
    };
    let view: SshCertView = client.post(&route, &body).await?;
    let cert = cert_path(&identity.with_extension("pub"));
    write_new(&cert, format!("{}\n", view.certificate).as_bytes(), 0o644)?;
    if args.output.json() {
        crate::output::print_json(&view)?;
        return Ok(ExitCode::SUCCESS);
    }
    outln!(
        "certificate {} for {}@{} (serial {}), valid for {}",
        cert.display(),
        args.principal,
        view.node_id,
        view.serial,
        crate::table::duration(Duration::from_secs(view.valid_before.saturating_sub(view.valid_after)))
    )?;
    outln!("key: {}", identity.display())?;
    outln!(
        "  ssh -i {} -o CertificateFile={} {}@<the node's address>",
        identity.display(),
        cert.display(),
        args.principal
    )?;
    Ok(ExitCode::SUCCESS)
}
