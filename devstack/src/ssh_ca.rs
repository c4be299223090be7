//! The dev stack's SSH certificate authorities (docs/devstack.md, "SSH
//! certificate authorities"): a throwaway break-glass CA, whose user
//! certificates log in to nodes, and a separate sandbox CA, which nodes'
//! sandboxes trust and their own sshd never does. Both public keys go into
//! every node's access section (generation 1 on), with the account `root`
//! that the principal `root` logs in as. [`issue`] signs a user
//! certificate with the break-glass CA for a principal the node's current
//! access section allows, for at most [`MAX_TTL`] (`ssh-principal`,
//! `ssh-ttl`, `ssh-request` otherwise). The keys are the store's, kept
//! with the stack's other keys.

use std::net::IpAddr;
use std::time::Duration;

use prost::Message as _;
use ssh_key::certificate::{Builder, CertType};
use ssh_key::private::Ed25519Keypair;
use ssh_key::public::{Ed25519PublicKey, KeyData};
use tracing::info;

use crate::clock::now_ms;
use crate::error::{Error, Result};
use crate::keys::StackKeys;
use crate::shared::Shared;
use crate::status::Code;
use crate::store::{nodes, specs};

/// The longest validity a certificate gets.
pub const MAX_TTL: Duration = Duration::from_secs(24 * 3600);
/// How far before its issue a certificate is valid (clocks that disagree).
pub const BACKDATE: Duration = Duration::from_secs(300);
/// The account (and principal) of every node's access section.
pub const ROOT_ACCOUNT: &str = "root";
/// The one extension a certificate carries: a terminal, and no forwarding.
pub const EXTENSIONS: &[&str] = &["permit-pty"];

/// A CA's public key as an OpenSSH line.
pub fn public_line(ca: &ed25519_dalek::SigningKey, comment: &str) -> String {
    let key = KeyData::Ed25519(Ed25519PublicKey(ca.verifying_key().to_bytes()));
    ssh_key::PublicKey::new(key, comment).to_openssh().expect("an Ed25519 key encodes")
}

/// Every node's access section: the two CAs and the account `root`.
pub fn default_access(keys: &StackKeys) -> proto::AccessSection {
    proto::AccessSection {
        accounts: vec![proto::SshAccount {
            name: ROOT_ACCOUNT.into(),
            authorized_keys: vec![],
            principals: vec![ROOT_ACCOUNT.into()],
        }],
        trusted_user_ca_keys: vec![public_line(&keys.ssh_break_glass, "devstack break-glass CA")],
        sandbox_user_ca_keys: vec![public_line(&keys.ssh_sandbox, "devstack sandbox CA")],
        ..Default::default()
    }
}

/// A certificate to issue.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SshCertRequest {
    /// The principal it logs in as (one the node allows).
    pub principal: String,
    /// How long it is valid (at most [`MAX_TTL`]).
    pub ttl: Duration,
    /// The user's public key, an OpenSSH line.
    pub public_key: String,
    /// The addresses it may be used from (CIDRs, its `source-address`
    /// critical option); empty: anywhere.
    pub source_addresses: Vec<String>,
}

/// An issued certificate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SshCert {
    /// The certificate, an OpenSSH line (`ssh-ed25519-cert-v01@openssh.com …`).
    pub certificate: String,
    /// Its serial (what a KRL revokes it by).
    pub serial: u64,
    /// Its key id (`devstack:<node>:<principal>:<serial>`).
    pub key_id: String,
    /// Its validity, Unix seconds.
    pub valid_after: u64,
    /// The end of its validity, Unix seconds.
    pub valid_before: u64,
}

fn refused(code: Code, detail: impl Into<String>) -> Error {
    Error::Refused { code, detail: detail.into() }
}

/// The principals the node's latest spec allows the break-glass CA's
/// certificates: those of its accounts, when it trusts that CA at all.
fn allowed_principals(shared: &Shared, node_id: &str) -> Result<Vec<String>> {
    let spec = shared.ledger.read(|c| {
        if nodes::get(c, node_id)?.is_none() {
            return Err(Error::UnknownNode { node_id: node_id.into() });
        }
        Ok(specs::latest(c, node_id)?)
    })?;
    let access = spec.and_then(|s| proto::NodeSpec::decode(s.payload.as_slice()).ok()).and_then(|s| s.access);
    let ca = public_line(&shared.keys.ssh_break_glass, "");
    let Some(access) = access.filter(|a| a.trusted_user_ca_keys.iter().any(|k| k.starts_with(ca.trim()))) else {
        return Ok(Vec::new());
    };
    Ok(access.accounts.into_iter().flat_map(|a| a.principals).collect())
}

/// Checks a CIDR (`10.0.0.0/8`, `192.0.2.1`, `2001:db8::/32`).
fn check_cidr(cidr: &str) -> Result<()> {
    let (addr, prefix) = cidr.split_once('/').unwrap_or((cidr, ""));
    let ip: IpAddr = addr.parse().map_err(|_| refused(Code::SshRequest, format!("{cidr:?} is not an address")))?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    if !prefix.is_empty() && prefix.parse::<u8>().map_or(true, |p| p > max) {
        return Err(refused(Code::SshRequest, format!("{cidr:?} has no prefix length of 0 to {max}")));
    }
    Ok(())
}

/// Issues a user certificate for a node with the break-glass CA.
pub fn issue(shared: &Shared, node_id: &str, request: &SshCertRequest) -> Result<SshCert> {
    if request.ttl.is_zero() || request.ttl > MAX_TTL {
        return Err(refused(Code::SshTtl, format!("a validity of {:?}: 1 s to {:?}", request.ttl, MAX_TTL)));
    }
    let user = ssh_key::PublicKey::from_openssh(request.public_key.trim())
        .map_err(|e| refused(Code::SshRequest, format!("the public key: {e}")))?;
    if user.key_data().is_certificate() {
        return Err(refused(Code::SshRequest, "the public key is a certificate"));
    }
    for cidr in &request.source_addresses {
        check_cidr(cidr)?;
    }
    let allowed = allowed_principals(shared, node_id)?;
    if !allowed.contains(&request.principal) {
        return Err(refused(
            Code::SshPrincipal,
            format!("node {node_id} allows {allowed:?} to log in with the break-glass CA, not {:?}", request.principal),
        ));
    }
    let mut random = [0u8; 40];
    getrandom::fill(&mut random).map_err(|e| Error::StoredKey { name: "ssh serial".into(), reason: e.to_string() })?;
    let serial = u64::from_be_bytes(random[..8].try_into().expect("8 bytes")).max(1);
    let now = (now_ms() / 1000) as u64;
    let (valid_after, valid_before) = (now.saturating_sub(BACKDATE.as_secs()), now + request.ttl.as_secs());
    let key_id = format!("devstack:{node_id}:{}:{serial}", request.principal);
    let failed = |e: ssh_key::Error| refused(Code::SshRequest, format!("the certificate: {e}"));
    let mut builder =
        Builder::new(random[8..].to_vec(), user.key_data().clone(), valid_after, valid_before).map_err(failed)?;
    builder.serial(serial).map_err(failed)?;
    builder.cert_type(CertType::User).map_err(failed)?;
    builder.key_id(key_id.clone()).map_err(failed)?;
    builder.valid_principal(request.principal.clone()).map_err(failed)?;
    for extension in EXTENSIONS {
        builder.extension(*extension, "").map_err(failed)?;
    }
    if !request.source_addresses.is_empty() {
        builder.critical_option("source-address", request.source_addresses.join(",")).map_err(failed)?;
    }
    let ca = ssh_key::PrivateKey::from(Ed25519Keypair::from(&shared.keys.ssh_break_glass));
    let cert = builder.sign(&ca).map_err(failed)?;
    let certificate = cert.to_openssh().map_err(failed)?;
    info!(node_id, principal = %request.principal, serial, valid_before, "ssh: break-glass certificate issued");
    Ok(SshCert { certificate, serial, key_id, valid_after, valid_before })
}
