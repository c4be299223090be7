//! DSSE envelopes (docs/formats.md, "DSSE envelopes"): PAE, signing, threshold verification,
//! and the two encodings (protobuf on the wire, JSON in fixtures).
//!
//! Hand-written because no mature Rust DSSE crate exists; the format is a
//! dozen lines. The JSON form matches Go's secure-systems-lab/dsse byte for
//! byte: members `payloadType`, `payload`, `signatures` (`keyid`, `sig`) in
//! that order, standard base64 with padding.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::error::DsseError;
use crate::{Error, PublicKey, Result, Signer, b64};

/// `PAE = "DSSEv1" SP len(type) SP type SP len(body) SP body`.
pub fn pae(payload_type: &str, payload: &[u8]) -> Vec<u8> {
    let mut out = format!("DSSEv1 {} {} {} ", payload_type.len(), payload_type, payload.len()).into_bytes();
    out.extend_from_slice(payload);
    out
}

/// A DSSE envelope.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Envelope {
    /// The payload's media type.
    pub payload_type: String,
    /// The signed bytes.
    pub payload: Vec<u8>,
    /// The signatures over PAE(payload_type, payload).
    pub signatures: Vec<Signature>,
}

/// One signature.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Signature {
    /// The signer's pin.
    pub keyid: String,
    /// The signature bytes.
    pub sig: Vec<u8>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonEnvelope {
    #[serde(rename = "payloadType")]
    payload_type: String,
    payload: String,
    signatures: Vec<JsonSignature>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonSignature {
    keyid: String,
    sig: String,
}

impl Envelope {
    /// Signs `payload` with every signer, in order.
    pub fn sign(payload_type: &str, payload: Vec<u8>, signers: &[&dyn Signer]) -> Self {
        let message = pae(payload_type, &payload);
        let signatures = signers.iter().map(|s| Signature { keyid: s.keyid(), sig: s.sign(&message) }).collect();
        Envelope { payload_type: payload_type.to_string(), payload, signatures }
    }

    /// An envelope with no signatures (an unsigned command or spec).
    pub fn unsigned(payload_type: &str, payload: Vec<u8>) -> Self {
        Envelope { payload_type: payload_type.to_string(), payload, signatures: Vec::new() }
    }

    /// The JSON form, byte-identical to Go's `json.Marshal` of a dsse.Envelope.
    pub fn to_json(&self) -> String {
        let json = JsonEnvelope {
            payload_type: self.payload_type.clone(),
            payload: b64::std(&self.payload),
            signatures: self
                .signatures
                .iter()
                .map(|s| JsonSignature { keyid: s.keyid.clone(), sig: b64::std(&s.sig) })
                .collect(),
        };
        serde_json::to_string(&json).expect("an envelope always serializes")
    }

    /// Parses the JSON form.
    pub fn from_json(text: &str) -> Result<Self> {
        let malformed = |reason: String| Error::from(DsseError::Malformed { reason });
        let json: JsonEnvelope = crate::json::object(text.as_bytes()).map_err(malformed)?;
        let payload = b64::std_decode(&json.payload).ok_or_else(|| malformed("payload is not base64".into()))?;
        let signatures = json
            .signatures
            .into_iter()
            .map(|s| {
                let sig = b64::std_decode(&s.sig).ok_or_else(|| malformed("sig is not base64".into()))?;
                Ok(Signature { keyid: s.keyid, sig })
            })
            .collect::<Result<_>>()?;
        Ok(Envelope { payload_type: json.payload_type, payload, signatures })
    }

    /// The protobuf message.
    pub fn to_proto(&self) -> proto::Envelope {
        proto::Envelope {
            payload_type: self.payload_type.clone(),
            payload: self.payload.clone(),
            signatures: self
                .signatures
                .iter()
                .map(|s| proto::Signature { keyid: s.keyid.clone(), sig: s.sig.clone() })
                .collect(),
        }
    }

    /// From the protobuf message.
    pub fn from_proto(msg: &proto::Envelope) -> Self {
        Envelope {
            payload_type: msg.payload_type.clone(),
            payload: msg.payload.clone(),
            signatures: msg
                .signatures
                .iter()
                .map(|s| Signature { keyid: s.keyid.clone(), sig: s.sig.clone() })
                .collect(),
        }
    }

    /// Verifies the payload type, then the signatures against `trusted`, and
    /// returns the payload when at least `threshold` distinct trusted keys
    /// signed it. Refusals, in this order: `dsse-payload-type`,
    /// `dsse-unsigned`, `dsse-bad-signature` (a trusted key id whose signature
    /// fails), then `dsse-unknown-key` (no trusted signer at all) or
    /// `dsse-threshold` (some, but too few).
    pub fn verify(&self, payload_type: &str, trusted: &[PublicKey], threshold: usize) -> Result<&[u8]> {
        if self.payload_type != payload_type {
            return Err(DsseError::PayloadType {
                expected: payload_type.to_string(),
                found: self.payload_type.clone(),
            }
            .into());
        }
        if self.signatures.is_empty() {
            return Err(DsseError::Unsigned.into());
        }
        let message = pae(&self.payload_type, &self.payload);
        let pins: Vec<String> = trusted.iter().map(PublicKey::pin).collect();
        let mut valid = BTreeSet::new();
        for sig in &self.signatures {
            let Some(i) = pins.iter().position(|p| *p == sig.keyid) else {
                continue;
            };
            if !trusted[i].verify(&message, &sig.sig) {
                return Err(DsseError::BadSignature { keyid: sig.keyid.clone() }.into());
            }
            valid.insert(i);
        }
        match valid.len() {
            n if n >= threshold.max(1) => Ok(&self.payload),
            0 => {
                Err(DsseError::UnknownKey { keyids: self.signatures.iter().map(|s| s.keyid.clone()).collect() }.into())
            }
            n => Err(DsseError::Threshold { valid: n, threshold }.into()),
        }
    }
}

/// Decodes a protobuf payload, refusing bytes that do not decode.
pub fn decode<M: prost::Message + Default>(payload: &[u8]) -> Result<M> {
    M::decode(payload).map_err(|e| DsseError::PayloadMalformed { reason: e.to_string() }.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys;

    #[test]
    fn pae_matches_the_spec_example() {
        // From the DSSE protocol document.
        assert_eq!(
            pae("http://example.com/HelloWorld", b"hello world"),
            b"DSSEv1 29 http://example.com/HelloWorld 11 hello world".to_vec()
        );
    }

    #[test]
    fn json_round_trips() {
        let key = keys::ed25519("s", "k");
        let env = Envelope::sign("t", b"p".to_vec(), &[&key]);
        let json = env.to_json();
        assert!(json.starts_with(r#"{"payloadType":"t","payload":"cA==","signatures":[{"keyid":"sha256:"#));
        assert_eq!(Envelope::from_json(&json).unwrap(), env);
    }

    #[test]
    fn verification_counts_distinct_trusted_keys() {
        let (a, b, c) = (keys::ed25519("s", "a"), keys::ed25519("s", "b"), keys::ed25519("s", "c"));
        let trusted = [a.public_key(), b.public_key()];
        let both = Envelope::sign("t", b"p".to_vec(), &[&a, &b]);
        assert!(both.verify("t", &trusted, 2).is_ok());
        let twice = Envelope::sign("t", b"p".to_vec(), &[&a, &a]);
        assert_eq!(twice.verify("t", &trusted, 2).unwrap_err().code(), "dsse-threshold");
        let other = Envelope::sign("t", b"p".to_vec(), &[&c]);
        assert_eq!(other.verify("t", &trusted, 1).unwrap_err().code(), "dsse-unknown-key");
        let mut bad = both.clone();
        bad.payload = b"q".to_vec();
        assert_eq!(bad.verify("t", &trusted, 1).unwrap_err().code(), "dsse-bad-signature");
        assert_eq!(both.verify("u", &trusted, 1).unwrap_err().code(), "dsse-payload-type");
        assert_eq!(Envelope::unsigned("t", vec![]).verify("t", &trusted, 1).unwrap_err().code(), "dsse-unsigned");
    }
}
