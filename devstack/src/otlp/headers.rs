//! The headers an export must carry (docs/protocol.md, "Telemetry"): when
//! the telemetry section of a node's latest spec names a `headers_ref`, the
//! receiver reads that secret as bcd does (`name=value,name=value`, the
//! form of `OTEL_EXPORTER_OTLP_HEADERS`, values percent-encoded) and takes
//! an export only when it carries each of those headers with exactly that
//! value (compared in constant time); otherwise `otlp-unauthenticated`,
//! HTTP 401. What the receiver keeps and says is the headers' names, never
//! a value.

use axum::http::HeaderMap;
use percent_encoding::percent_decode_str;
use subtle::ConstantTimeEq as _;

use crate::error::Result;
use crate::shared::Shared;
use crate::spec;
use crate::store::secrets;

/// The most headers a secret may name, as bcd takes them.
const MAX_HEADERS: usize = 32;

/// The headers a node's exports must carry: `(lowercase name, value)`.
pub type Required = Vec<(String, Vec<u8>)>;

/// Why an export is not taken: the answer's message (no value in it).
#[derive(Debug, PartialEq, Eq)]
pub struct Unauthenticated(pub String);

/// Parses a secret as headers: each `name=value` with a token name (each
/// once) and a percent-decoded value without control characters. The error
/// says where, never what.
pub fn parse(text: &[u8]) -> std::result::Result<Required, String> {
    let text = std::str::from_utf8(text).map_err(|_| "the secret is not UTF-8".to_string())?;
    let entries: Vec<&str> = text.split(',').collect();
    if entries.len() > MAX_HEADERS {
        return Err(format!("{} entries, more than {MAX_HEADERS}", entries.len()));
    }
    let mut out: Required = Vec::new();
    for (i, entry) in entries.iter().enumerate() {
        let Some((name, value)) = entry.split_once('=') else {
            return Err(format!("entry {} is not name=value", i + 1));
        };
        let name = name.trim().to_ascii_lowercase();
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)) {
            return Err(format!("the name of entry {} is not an HTTP token", i + 1));
        }
        if out.iter().any(|(n, _)| *n == name) {
            return Err(format!("entry {} names {name} again", i + 1));
        }
        let value: Vec<u8> = percent_decode_str(value.trim()).collect();
        if value.iter().any(|&b| (b < 0x20 && b != b'\t') || b == 0x7f) {
            return Err(format!("the value of entry {} ({name}) has a control character", i + 1));
        }
        out.push((name, value));
    }
    Ok(out)
}

/// The headers `node_id`'s exports must carry now (none without a
/// `headers_ref`); a `headers_ref` naming no secret, or one that is not
/// headers, lets no export in.
pub fn required(shared: &Shared, node_id: &str) -> Result<Option<std::result::Result<Required, Unauthenticated>>> {
    shared.ledger.read(|c| {
        let Some(reference) = spec::telemetry_headers_ref(c, node_id)? else { return Ok(None) };
        let parsed = match secrets::get(c, &reference)? {
            None => Err(Unauthenticated(format!("the node's headers_ref {reference} names no secret"))),
            Some(value) => parse(&value)
                .map_err(|why| Unauthenticated(format!("the node's headers_ref {reference} is not headers: {why}"))),
        };
        Ok::<_, crate::store::Error>(Some(parsed))
    })
}

/// Checks an export's headers against `required`: the names it carried,
/// in order, or why it is not taken.
pub fn check(required: &Required, headers: &HeaderMap) -> std::result::Result<Vec<String>, Unauthenticated> {
    for (name, value) in required {
        let mut sent = headers.get_all(name.as_str()).iter();
        let (Some(first), None) = (sent.next(), sent.next()) else {
            return Err(Unauthenticated(format!("the export does not carry the header {name} once")));
        };
        if !bool::from(first.as_bytes().ct_eq(value)) {
            return Err(Unauthenticated(format!("the header {name} is not the value of the node's headers_ref")));
        }
    }
    Ok(required.iter().map(|(n, _)| n.clone()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn headers_parse_as_bcd_reads_them_and_are_checked_without_saying_a_value() {
        let required = parse(b" Authorization = Bearer%20s3cret , X-Tenant=acme%2C1").unwrap();
        assert_eq!(
            required,
            [("authorization".to_string(), b"Bearer s3cret".to_vec()), ("x-tenant".to_string(), b"acme,1".to_vec())]
        );
        for bad in ["", "a", "=x", "a b=x", "a=1,A=2", "a=%0d%0ax", "a=1,"] {
            let why = parse(bad.as_bytes()).unwrap_err();
            assert!(!why.contains("s3cret"), "{why}");
        }
        let mut headers = HeaderMap::new();
        headers.insert("authorization", HeaderValue::from_static("Bearer s3cret"));
        let missing = check(&required, &headers).unwrap_err();
        assert!(missing.0.contains("x-tenant"), "{missing:?}");
        headers.insert("x-tenant", HeaderValue::from_static("acme,1"));
        assert_eq!(check(&required, &headers).unwrap(), ["authorization", "x-tenant"]);
        headers.insert("authorization", HeaderValue::from_static("Bearer wrong"));
        let wrong = check(&required, &headers).unwrap_err();
        assert!(!wrong.0.contains("s3cret") && !wrong.0.contains("wrong"), "{wrong:?}");
        headers.append("x-tenant", HeaderValue::from_static("acme,1"));
        headers.insert("authorization", HeaderValue::from_static("Bearer s3cret"));
        assert!(check(&required, &headers).is_err(), "a header sent twice");
    }
}
