//! The stack's keys and certificates: generated from the OS random number
//! generator at first start, persisted in the store's `settings`, and read
//! back on every later start, so a restarted stack keeps its CAs, pins and
//! trust bundle.
//!
//! Release keys are generated the same way, unless the options give them
//! (fixtures' keys, for deterministic tests); given keys are not stored.
//!
//! The gateway's serving certificate is re-issued (under the same serving CA,
//! so the pin holds) when the requested names change or it nears expiry.

use std::net::IpAddr;
use std::sync::RwLock;

use crate::store::Db;
use pki::{PublicKey, Signer, x509};

use crate::error::{Error, Result};
use crate::ids;
use crate::options::ReleaseKeys;
use crate::store::{Store, settings};

const DAY_MS: i64 = 24 * 3600 * 1000;
/// Validity of the stack's CAs.
const CA_VALIDITY_MS: i64 = 3650 * DAY_MS;
/// Validity of the gateway's serving certificate.
const SERVING_VALIDITY_MS: i64 = 365 * DAY_MS;
/// Approvers of the dev trust bundle, and how many must sign a rotation.
const APPROVERS: usize = 3;
const THRESHOLD: u32 = 2;
/// Release keys generated for a stack.
const RELEASE_KEYS: usize = 2;

/// The names the gateway's serving certificate carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServingNames {
    /// DNS names (always `localhost` and `gw.dev.local` first).
    pub dns: Vec<String>,
    /// IP addresses (always 127.0.0.1 first).
    pub ips: Vec<IpAddr>,
}

impl ServingNames {
    /// The default names plus extra ones, without duplicates.
    pub fn new(extra_dns: &[String], extra_ips: &[IpAddr]) -> Self {
        let mut dns = vec!["localhost".to_string(), crate::SERVER_NAME.to_string()];
        for name in extra_dns {
            if !dns.contains(name) {
                dns.push(name.clone());
            }
        }
        let mut ips = vec![IpAddr::from([127, 0, 0, 1])];
        for ip in extra_ips {
            if !ips.contains(ip) {
                ips.push(*ip);
            }
        }
        ServingNames { dns, ips }
    }
}

/// The keys of signed intent: a command root, approvers, token issuers and
/// the current signed trust bundle (sequence 1 at first, then the latest
/// rotation the approvers signed).
pub struct IntentKeys {
    /// Signs commands and NodeSpecs.
    pub command_root: ed25519_dalek::SigningKey,
    /// Sign trust bundles and batch approvals.
    pub approvers: Vec<ed25519_dalek::SigningKey>,
    /// Issues exec tickets (later issues).
    pub tunnels_issuer: p256::SecretKey,
    /// Issues workload tokens (later issues).
    pub workload_issuer: p256::SecretKey,
    /// The current trust bundle and its envelope, signed by the approvers.
    trust: RwLock<(proto::TrustBundle, pki::dsse::Envelope)>,
}

/// The settings entry of the current trust bundle.
const TRUST_BUNDLE: &str = "trust-bundle.env";

impl IntentKeys {
    /// The current trust bundle and its signed envelope.
    pub fn trust(&self) -> (proto::TrustBundle, pki::dsse::Envelope) {
        // Only whole values are stored under the lock, so a poisoned lock
        // still holds a consistent pair.
        self.trust.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The bundle of `env` if it is a rotation the current bundle accepts
    /// (signed by its approvers' threshold, same trust domain, a higher
    /// sequence); `None` otherwise.
    pub fn check_rotation(&self, env: &pki::dsse::Envelope) -> Option<(proto::TrustBundle, pki::dsse::Envelope)> {
        let (current, _) = self.trust();
        match pki::intent::accept_trust_bundle(&current, env) {
            Ok(bundle) if bundle.sequence > current.sequence => Some((bundle, env.clone())),
            Ok(_) => None,
            Err(e) => {
                tracing::info!(code = e.code(), "trust bundle not adopted by the stack: {e}");
                None
            }
        }
    }

    /// Stores a rotation (inside the caller's transaction).
    pub fn persist_trust(&self, c: &Db<'_>, env: &pki::dsse::Envelope) -> Result<()> {
        use prost::Message as _;
        Ok(settings::put(c, TRUST_BUNDLE, &env.to_proto().encode_to_vec())?)
    }

    /// Makes a stored rotation the current bundle.
    pub fn set_trust(&self, bundle: proto::TrustBundle, env: pki::dsse::Envelope) {
        *self.trust.write().unwrap_or_else(|p| p.into_inner()) = (bundle, env);
    }
}

/// Every key and certificate of the stack.
pub struct StackKeys {
    /// The node CA certificate (DER).
    pub node_ca_der: Vec<u8>,
    /// The serving CA certificate (DER); bcd pins its key.
    pub serving_ca_der: Vec<u8>,
    /// The gateway's TLS key.
    pub gateway_key: p256::SecretKey,
    /// The gateway's serving certificate (DER).
    pub gateway_der: Vec<u8>,
    /// Signs JoinResponses.
    pub join_signing: ed25519_dalek::SigningKey,
    /// The break-glass SSH CA: its certificates log in to nodes
    /// (docs/devstack.md, "SSH certificate authorities").
    pub ssh_break_glass: ed25519_dalek::SigningKey,
    /// The sandbox SSH CA: what nodes' sandboxes trust, never their sshd.
    pub ssh_sandbox: ed25519_dalek::SigningKey,
    /// Opens sealed join tokens.
    pub join_encryption: p256::SecretKey,
    /// Present under signed intent.
    pub intent: Option<IntentKeys>,
    /// Sign release manifests.
    pub release: Vec<ed25519_dalek::SigningKey>,
    /// The node CA with its key, ready to issue, and the pins every join
    /// sends or checks: derived once (each derivation is a scalar
    /// multiplication).
    node_issuer: pki::x509::NodeIssuer,
    serving_ca_pin: String,
    join_encryption_pin: String,
}

impl StackKeys {
    /// Reads the stack's keys from the store, generating and storing what is
    /// missing, in one transaction.
    pub fn load_or_create(
        store: &Store,
        names: &ServingNames,
        signed_intent: bool,
        trust_domain: &str,
        release_keys: &ReleaseKeys,
        now_ms: i64,
    ) -> Result<Self> {
        store.write(|c| {
            let node_ca_key = p256_key(c, "node-ca.key")?;
            let node_ca_der = ca_cert(c, "node-ca.crt", &node_ca_key, "bc node CA", trust_domain, now_ms)?;
            let serving_ca_key = p256_key(c, "serving-ca.key")?;
            let serving_ca_der = ca_cert(c, "serving-ca.crt", &serving_ca_key, "bc serving CA", trust_domain, now_ms)?;
            let gateway_key = p256_key(c, "gateway.key")?;
            let gateway_der = serving_cert(c, &serving_ca_key, &serving_ca_der, &gateway_key, names, now_ms)?;
            let join_signing = ed_key(c, "join-signing.key")?;
            let join_encryption = p256_key(c, "join-encryption.key")?;
            let ssh_break_glass = ed_key(c, "ssh-ca/break-glass.key")?;
            let ssh_sandbox = ed_key(c, "ssh-ca/sandbox.key")?;
            let intent = if signed_intent { Some(intent_keys(c, trust_domain)?) } else { None };
            let release = match release_keys {
                ReleaseKeys::Generated => {
                    (0..RELEASE_KEYS).map(|i| ed_key(c, &format!("release/{i}.key"))).collect::<Result<Vec<_>>>()?
                }
                ReleaseKeys::Given(seeds) => seeds.iter().map(ed25519_dalek::SigningKey::from_bytes).collect(),
            };
            let node_issuer =
                pki::x509::NodeIssuer::new(&node_ca_key, &node_ca_der).map_err(|e| stored_key_err("node-ca.crt", e))?;
            let serving_ca_pin = Signer::public_key(&serving_ca_key).pin();
            let join_encryption_pin = join_encryption.keyid();
            Ok(StackKeys {
                node_issuer,
                serving_ca_pin,
                join_encryption_pin,
                node_ca_der,
                serving_ca_der,
                gateway_key,
                gateway_der,
                join_signing,
                ssh_break_glass,
                ssh_sandbox,
                join_encryption,
                intent,
                release,
            })
        })
    }

    /// The serving CA's pin (bcd's `serving_ca_spki_pin`).
    pub fn serving_ca_pin(&self) -> String {
        self.serving_ca_pin.clone()
    }

    /// The node CA, ready to issue node certificates.
    pub fn node_issuer(&self) -> &pki::x509::NodeIssuer {
        &self.node_issuer
    }

    /// The join-signing key's pin.
    pub fn join_signing_pin(&self) -> String {
        self.join_signing.keyid()
    }

    /// The join-signing public key: standard base64 of its SPKI DER (a pin
    /// alone cannot verify a signature).
    pub fn join_signing_key_b64(&self) -> String {
        pki::b64::std(&self.join_signing.public_key().spki_der())
    }

    /// The join-encryption key's pin (the sealed token's `kid`).
    pub fn join_encryption_pin(&self) -> String {
        self.join_encryption_pin.clone()
    }

    /// The join-encryption key as a public JWK with its `kid`.
    pub fn join_encryption_jwk(&self) -> String {
        pki::pin::p256_jwk(&self.join_encryption.public_key(), Some(&self.join_encryption_pin()))
    }

    /// The command roots nodes trust (empty without signed intent).
    pub fn command_roots(&self) -> Vec<PublicKey> {
        self.intent.iter().map(|i| i.command_root.public_key()).collect()
    }
}

fn stored_key_err(name: &str, reason: impl ToString) -> Error {
    Error::StoredKey { name: name.to_string(), reason: reason.to_string() }
}

fn p256_key(c: &Db<'_>, name: &str) -> Result<p256::SecretKey> {
    if let Some(bytes) = settings::get(c, name)? {
        return p256::SecretKey::from_slice(&bytes).map_err(|e| stored_key_err(name, e));
    }
    let key = pki::keys::random_p256();
    settings::put(c, name, &key.to_bytes())?;
    Ok(key)
}

fn ed_key(c: &Db<'_>, name: &str) -> Result<ed25519_dalek::SigningKey> {
    if let Some(bytes) = settings::get(c, name)? {
        let seed: [u8; 32] = bytes.as_slice().try_into().map_err(|_| stored_key_err(name, "not 32 bytes"))?;
        return Ok(ed25519_dalek::SigningKey::from_bytes(&seed));
    }
    let key = pki::keys::random_ed25519();
    settings::put(c, name, &key.to_bytes())?;
    Ok(key)
}

fn ca_cert(
    c: &Db<'_>,
    name: &str,
    key: &p256::SecretKey,
    common_name: &str,
    trust_domain: &str,
    now_ms: i64,
) -> Result<Vec<u8>> {
    if let Some(der) = settings::get(c, name)? {
        let described = x509::describe_der(&der).map_err(|e| stored_key_err(name, e))?;
        if described.spki_der != Signer::public_key(key).spki_der() {
            return Err(stored_key_err(name, "the certificate is not for the stored key"));
        }
        return Ok(der);
    }
    let serial = ids::serial();
    let profile = x509::CaProfile {
        common_name,
        organization: Some(trust_domain),
        serial: &serial,
        validity: x509::Validity { not_before_ms: now_ms - DAY_MS, not_after_ms: now_ms + CA_VALIDITY_MS },
    };
    let der = x509::ca_certificate(key, &profile).map_err(Error::pki("build a CA certificate"))?;
    settings::put(c, name, &der)?;
    Ok(der)
}

/// The stored serving certificate if it names exactly `names` and is valid
/// for at least another day; else a new one.
fn serving_cert(
    c: &Db<'_>,
    ca_key: &p256::SecretKey,
    ca_der: &[u8],
    key: &p256::SecretKey,
    names: &ServingNames,
    now_ms: i64,
) -> Result<Vec<u8>> {
    const NAME: &str = "gateway.crt";
    if let Some(der) = settings::get(c, NAME)? {
        let fits = x509::verify_issued(&der, ca_der, now_ms + DAY_MS).is_ok_and(|v| {
            v.dns_names == names.dns && v.ips == names.ips && v.spki_der == Signer::public_key(key).spki_der()
        });
        if fits {
            return Ok(der);
        }
    }
    let dns: Vec<&str> = names.dns.iter().map(String::as_str).collect();
    let der = x509::issue_serving_certificate(
        ca_key,
        ca_der,
        &key.public_key(),
        &dns,
        &names.ips,
        &ids::serial(),
        x509::Validity { not_before_ms: now_ms - DAY_MS, not_after_ms: now_ms + SERVING_VALIDITY_MS },
    )
    .map_err(Error::pki("issue the serving certificate"))?;
    settings::put(c, NAME, &der)?;
    Ok(der)
}

fn intent_keys(c: &Db<'_>, trust_domain: &str) -> Result<IntentKeys> {
    use prost::Message as _;
    let command_root = ed_key(c, "command-root/0.key")?;
    let approvers = (0..APPROVERS).map(|i| ed_key(c, &format!("approver/{i}.key"))).collect::<Result<Vec<_>>>()?;
    let tunnels_issuer = p256_key(c, "tunnels-issuer.key")?;
    let workload_issuer = p256_key(c, "workload-issuer.key")?;
    const BUNDLE: &str = TRUST_BUNDLE;
    let trust_bundle_env = match settings::get(c, BUNDLE)? {
        Some(bytes) => {
            let msg = proto::Envelope::decode(bytes.as_slice()).map_err(|e| stored_key_err(BUNDLE, e))?;
            pki::dsse::Envelope::from_proto(&msg)
        }
        None => {
            let bundle = proto::TrustBundle {
                trust_domain: trust_domain.to_string(),
                sequence: 1,
                command_roots: vec![command_root.public_key().to_proto()],
                quorum: Some(proto::Quorum {
                    approvers: approvers.iter().map(|a| a.public_key().to_proto()).collect(),
                    threshold: THRESHOLD,
                    tiers: vec![proto::QuorumTier { min_commands: 3, threshold: 3 }],
                    unbatched_per_hour: 2,
                }),
                tunnels_issuer: Some(Signer::public_key(&tunnels_issuer).to_proto()),
                workload_issuer: Some(Signer::public_key(&workload_issuer).to_proto()),
            };
            let signers: Vec<&dyn Signer> = approvers.iter().map(|a| a as &dyn Signer).collect();
            let env = pki::intent::sign_trust_bundle(&signers, &bundle);
            settings::put(c, BUNDLE, &env.to_proto().encode_to_vec())?;
            env
        }
    };
    let approver_keys: Vec<PublicKey> = approvers.iter().map(|a| a.public_key()).collect();
    let payload = trust_bundle_env
        .verify(proto::payload_type::TRUST_BUNDLE, &approver_keys, THRESHOLD as usize)
        .map_err(|e| stored_key_err(BUNDLE, e))?;
    let trust_bundle: proto::TrustBundle = pki::dsse::decode(payload).map_err(|e| stored_key_err(BUNDLE, e))?;
    Ok(IntentKeys {
        command_root,
        approvers,
        tunnels_issuer,
        workload_issuer,
        trust: RwLock::new((trust_bundle, trust_bundle_env)),
    })
}

/// The pins a node needs to join this stack.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pins {
    /// The serving CA's pin (`serving_ca_spki_pin`).
    pub serving_ca: String,
    /// The join-signing key's pin (`join_signing_pin`).
    pub join_signing: String,
    /// The join-signing key, standard base64 of its SPKI DER (`join_signing_key`).
    pub join_signing_key: String,
    /// The join-encryption key's pin (`join_encryption_pin`).
    pub join_encryption: String,
    /// The join-encryption key as a public JWK (with `kid`).
    pub join_encryption_jwk: String,
}

impl StackKeys {
    /// The pins a node needs.
    pub fn pins(&self) -> Pins {
        Pins {
            serving_ca: self.serving_ca_pin(),
            join_signing: self.join_signing_pin(),
            join_signing_key: self.join_signing_key_b64(),
            join_encryption: self.join_encryption_pin(),
            join_encryption_jwk: self.join_encryption_jwk(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::StoreLocation;

    #[test]
    fn keys_persist_and_the_serving_certificate_follows_the_names() {
        let store = Store::open(&StoreLocation::Memory).unwrap();
        let names = ServingNames::new(&[], &[]);
        let now = crate::clock::now_ms();
        let generated = ReleaseKeys::Generated;
        let a = StackKeys::load_or_create(&store, &names, true, "compute.dev.local", &generated, now).unwrap();
        let b = StackKeys::load_or_create(&store, &names, true, "compute.dev.local", &generated, now).unwrap();
        assert_eq!(a.node_ca_der, b.node_ca_der);
        assert_eq!(a.gateway_der, b.gateway_der);
        assert_eq!(a.join_signing_pin(), b.join_signing_pin());
        assert_eq!(a.intent.as_ref().unwrap().trust(), b.intent.as_ref().unwrap().trust());
        assert_eq!(a.intent.as_ref().unwrap().trust().0.sequence, 1);
        assert_eq!(a.release.len(), 2);
        assert_eq!(a.release[1].to_bytes(), b.release[1].to_bytes());
        assert_ne!(a.release[0].to_bytes(), a.release[1].to_bytes());

        let more = ServingNames::new(&["gw.example.test".into()], &["10.0.0.1".parse().unwrap()]);
        let given = ReleaseKeys::Given(vec![[7; 32]]);
        let c = StackKeys::load_or_create(&store, &more, false, "compute.dev.local", &given, now).unwrap();
        assert_eq!(c.release.len(), 1);
        assert_eq!(c.release[0].to_bytes(), [7; 32]);
        assert_ne!(c.gateway_der, a.gateway_der);
        assert_eq!(c.serving_ca_pin(), a.serving_ca_pin());
        let v = x509::verify_issued(&c.gateway_der, &c.serving_ca_der, now).unwrap();
        assert_eq!(v.dns_names, ["localhost", "gw.dev.local", "gw.example.test"]);
        assert_eq!(v.ips.len(), 2);
        assert!(c.intent.is_none());
    }
}
