//! The cryptography the control plane shares with bcd (docs/formats.md).
//!
//! Seeded key derivation ([`keys`]), pins ([`pin`]), certificates ([`x509`]),
//! DSSE envelopes ([`dsse`]), the JWE profile ([`jwe`]), ES256 tokens
//! ([`jws`]), join tokens and responses ([`join`]), signed intent
//! ([`intent`]), node statements ([`statement`]), releases ([`release`]) and
//! the TPM attestor ([`tpm`]).
//!
//! The crate does no I/O and reads no clock: every "now" is an argument
//! (Unix milliseconds), so fixtures verified at their `asOf` never expire.
//! The only outside input is the OS random number generator, used where a
//! caller asks for fresh randomness ([`jwe::SealRandomness::from_os`],
//! [`tpm::ChallengeRandomness::from_os`]).
//! Every refusal is an [`Error`] whose [`Error::code`] is the same stable
//! string the Go side returns.

pub mod dsse;
pub mod error;
pub mod intent;
pub mod join;
mod json;
pub mod jwe;
pub mod jws;
pub mod keys;
pub mod pin;
pub mod release;
pub mod statement;
pub mod tpm;
pub mod x509;

pub use error::{
    DsseError, Error, IntentError, JoinError, JweError, JwsError, KeyError, ReleaseError, StatementError, TpmError,
    X509Error,
};
pub use keys::{PublicKey, Signer};

/// A result whose error is a [`pki::Error`](Error).
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Base64 helpers: standard with padding (DSSE, fixtures) and URL-safe without
/// padding (JOSE, pins).
pub mod b64 {
    use base64ct::{Base64, Base64UrlUnpadded, Encoding};

    /// Standard base64 with padding.
    pub fn std(bytes: &[u8]) -> String {
        Base64::encode_string(bytes)
    }

    /// Decodes standard base64 with padding.
    pub fn std_decode(s: &str) -> Option<Vec<u8>> {
        Base64::decode_vec(s).ok()
    }

    /// URL-safe base64 without padding.
    pub fn url(bytes: &[u8]) -> String {
        Base64UrlUnpadded::encode_string(bytes)
    }

    /// Decodes URL-safe base64 without padding.
    pub fn url_decode(s: &str) -> Option<Vec<u8>> {
        Base64UrlUnpadded::decode_vec(s).ok()
    }
}
