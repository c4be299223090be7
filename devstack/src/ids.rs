//! Random identifiers and secrets, drawn from the OS random number generator.

/// `n` random bytes from the OS.
pub fn random_bytes(n: usize) -> Vec<u8> {
    let mut bytes = vec![0u8; n];
    // Invariant: the OS random number generator is available on every platform
    // the stack runs on (pki draws its keys from the same source).
    getrandom::fill(&mut bytes).expect("the OS random number generator is available");
    bytes
}

/// `prefix` followed by 16 random hex digits.
fn prefixed(prefix: &str) -> String {
    format!("{prefix}{}", hex::encode(random_bytes(8)))
}

/// A node id: `node_` and 16 random hex digits.
pub fn node_id() -> String {
    prefixed("node_")
}

/// A command id.
pub fn command_id() -> String {
    prefixed("cmd_")
}

/// A reservation id (also the hold's allocation id).
pub fn reservation_id() -> String {
    prefixed("rsv_")
}

/// A TPM join session id (between the two rounds).
pub fn tpm_session_id() -> String {
    prefixed("tpm_")
}

/// A tunnel id (a console's).
pub fn tunnel_id() -> String {
    prefixed("tun_")
}

/// An exec ticket's jti.
pub fn ticket_id() -> String {
    prefixed("tkt_")
}

/// An instance id: `inst-` and 16 random hex digits (it names a libvirt
/// domain and files on its host, so no underscore).
pub fn instance_id() -> String {
    prefixed("inst-")
}

/// A volume id: `vol-` and 16 random hex digits.
pub fn volume_id() -> String {
    prefixed("vol-")
}

/// A secret reference: `secret_` and 16 random hex digits.
pub fn secret_id() -> String {
    prefixed("secret_")
}

/// A pool id.
pub fn pool_id() -> String {
    prefixed("pool_")
}

/// A join token's row id (not the secret).
pub fn token_id() -> String {
    prefixed("jt_")
}

/// A join token secret: `bc_jt_` and 32 random bytes, base64url.
pub fn token_secret() -> String {
    format!("bc_jt_{}", pki::b64::url(&random_bytes(32)))
}

/// A certificate serial: 16 random bytes, positive, without a leading zero.
pub fn serial() -> Vec<u8> {
    let mut bytes = random_bytes(16);
    bytes[0] = (bytes[0] & 0x7f) | 0x01;
    bytes
}

/// A random `u64` (ping nonces).
pub fn nonce() -> u64 {
    let b = random_bytes(8);
    u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_have_their_shape() {
        let id = node_id();
        assert!(id.starts_with("node_") && id.len() == 21, "{id}");
        assert_ne!(node_id(), node_id());
        let token = token_secret();
        assert!(token.starts_with("bc_jt_") && token.len() == 6 + 43);
        let serial = serial();
        assert!(serial[0] != 0 && serial[0] < 0x80);
    }
}
