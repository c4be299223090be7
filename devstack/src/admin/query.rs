//! The query string of a list route (`?node=N&state=S`): `key=value` pairs,
//! percent-decoded, each key one the route takes and given once; anything
//! else is refused `request-invalid` with the key named. The client side
//! encodes a value with [`encode`].

use std::collections::BTreeMap;

use super::ApiError;

/// The pairs of `query`, refusing a key not in `keys`, a key given twice,
/// or a value that does not decode to UTF-8.
pub(crate) fn parse(query: Option<&str>, keys: &[&str]) -> Result<BTreeMap<String, String>, ApiError> {
    let mut out = BTreeMap::new();
    for pair in query.unwrap_or_default().split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        if !keys.contains(&key) {
            let takes = if keys.is_empty() { "none".to_string() } else { keys.join(", ") };
            return Err(ApiError::bad_request(format!("unknown query parameter {key:?} (this route takes {takes})")));
        }
        let value = decode(value).ok_or_else(|| ApiError::bad_request(format!("{key}={value:?} does not decode")))?;
        if out.insert(key.to_string(), value).is_some() {
            return Err(ApiError::bad_request(format!("query parameter {key:?} given twice")));
        }
    }
    Ok(out)
}

/// Percent-decodes `s` (`+` stays `+`); None for a bad escape or bytes
/// that are not UTF-8.
fn decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// `s` as one path segment or query value: unreserved characters as they
/// are, the rest percent-encoded.
pub fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_are_decoded_and_checked() {
        let got = parse(Some("node=fakehw%2041&state=pending"), &["node", "state"]).unwrap();
        assert_eq!(got["node"], "fakehw 41");
        assert_eq!(decode(&encode("a/b c%")).unwrap(), "a/b c%");
        assert!(parse(Some("nodes=x"), &["node"]).is_err());
        assert!(parse(Some("node=a&node=b"), &["node"]).is_err());
        assert!(parse(Some("node=%zz"), &["node"]).is_err());
        assert!(parse(Some("node=%ff"), &["node"]).is_err());
        assert!(parse(None, &[]).unwrap().is_empty());
    }
}
