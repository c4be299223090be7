//! Strict JSON (docs/formats.md, "JSON"): the one reader of every JSON object
//! `pki` verifies (DSSE envelopes, JOSE headers and claims, sealed token
//! payloads, release manifests).
//!
//! serde_json keeps the last of two members with the same name, and
//! encoding/json does too; two readers of one document that pick different
//! members is how a signed object says two things. So a member name that
//! appears twice in the same object, at any depth (known, unknown or nested),
//! refuses the whole document, here and in `daemon/internal/pki`
//! (`encoding.go`), with the refusing domain's malformed code. Only a JSON
//! object is accepted at the top: serde's derived structs would also take an
//! array in field order.

use serde::Deserialize;
use serde::de::{self, DeserializeOwned, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// A JSON value whose objects, at every depth, have distinct member names.
struct Unique(Value);

impl<'de> Deserialize<'de> for Unique {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(UniqueVisitor)
    }
}

struct UniqueVisitor;

impl<'de> Visitor<'de> for UniqueVisitor {
    type Value = Unique;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Unique, E> {
        Ok(Unique(Value::Bool(v)))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Unique, E> {
        Ok(Unique(Value::from(v)))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Unique, E> {
        Ok(Unique(Value::from(v)))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Unique, E> {
        Ok(Unique(Value::from(v)))
    }
    fn visit_str<E>(self, v: &str) -> Result<Unique, E> {
        Ok(Unique(Value::String(v.to_string())))
    }
    fn visit_string<E>(self, v: String) -> Result<Unique, E> {
        Ok(Unique(Value::String(v)))
    }
    fn visit_unit<E>(self) -> Result<Unique, E> {
        Ok(Unique(Value::Null))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Unique, A::Error> {
        let mut items = Vec::new();
        while let Some(Unique(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(Unique(Value::Array(items)))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Unique, A::Error> {
        let mut members = Map::new();
        while let Some(name) = map.next_key::<String>()? {
            if members.contains_key(&name) {
                return Err(de::Error::custom(format!("duplicate member {name:?}")));
            }
            let Unique(value) = map.next_value()?;
            members.insert(name, value);
        }
        Ok(Unique(Value::Object(members)))
    }
}

/// Parses exactly one JSON value, refusing a member name twice in any object.
pub(crate) fn parse(bytes: &[u8]) -> Result<Value, String> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let Unique(value) = Unique::deserialize(&mut de).map_err(|e| e.to_string())?;
    de.end().map_err(|e| e.to_string())?;
    Ok(value)
}

/// Parses a JSON object into `T` (see the module comment for what is refused).
pub(crate) fn object<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    let value = parse(bytes)?;
    if !value.is_object() {
        return Err("not a JSON object".to_string());
    }
    serde_json::from_value(value).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defect_10_a_member_twice_at_any_depth_is_refused() {
        for text in [
            r#"{"a":1,"a":1}"#,
            r#"{"a":1,"z":2,"z":3}"#,
            r#"{"a":{"x":1,"x":2}}"#,
            r#"{"a":[{"y":[],"y":null}]}"#,
            r#"{"a":1,"\u0061":2}"#,
        ] {
            let err = parse(text.as_bytes()).unwrap_err();
            assert!(err.contains("duplicate member"), "{text}: {err}");
        }
    }

    #[test]
    fn distinct_members_and_values_pass_through() {
        let value = parse(br#" {"a":[1,-2,1.5,"s",true,null,{"b":{}}],"A":{}} "#).unwrap();
        assert_eq!(value["a"][6]["b"], serde_json::json!({}));
        assert_eq!(value["A"], serde_json::json!({}));
        assert!(parse(br#"{"a":1} {}"#).is_err());
        assert_eq!(object::<Value>(b"[1]").unwrap_err(), "not a JSON object");
    }
}
