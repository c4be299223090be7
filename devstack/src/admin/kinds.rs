//! A command checked against the kind list (`proto/kinds.toml`, the one
//! bcd's registry is held to) before it is enqueued: the kind is one the
//! list names (else `kind-unknown`, with the closest kind suggested), and
//! its params are an object whose keys are the kind's, of their types, the
//! required ones given (else `params-invalid`). The admin endpoint checks
//! every `POST /v1/commands`; the CLI checks the same before it sends.

use proto::kind::{Kind, ParamType, TABLE};
use proto::refusal::Code;

/// Why a command was refused before it was enqueued.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct KindRefusal {
    /// `kind-unknown` or `params-invalid`.
    pub code: Code,
    /// For people.
    pub message: String,
}

/// The listed kind closest to `name` (Jaro-Winkler, case-folded), if one is close.
pub fn closest(name: &str) -> Option<&'static str> {
    let folded = name.to_ascii_lowercase();
    TABLE
        .iter()
        .map(|k| (strsim::jaro_winkler(&folded, &k.name.to_ascii_lowercase()), k.name))
        .filter(|(score, _)| *score >= 0.7)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, name)| name)
}

/// Every listed kind's name.
pub fn names() -> Vec<&'static str> {
    TABLE.iter().map(|k| k.name).collect()
}

fn type_of(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "boolean",
        serde_json::Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        serde_json::Value::Number(_) => "number",
        serde_json::Value::String(_) => "string",
        serde_json::Value::Array(_) => "array",
        serde_json::Value::Object(_) => "object",
    }
}

fn fits(ty: ParamType, value: &serde_json::Value) -> bool {
    match ty {
        ParamType::Number => value.is_number(),
        other => type_of(value) == other.as_str(),
    }
}

/// Checks a command of `kind` with `params` against the list.
pub fn check(kind: &str, params: &serde_json::Value) -> Result<&'static Kind, KindRefusal> {
    let Some(k) = Kind::find(kind) else {
        let hint = match closest(kind) {
            Some(near) => format!("; did you mean {near:?}?"),
            None => format!(" (the kinds: {})", names().join(", ")),
        };
        return Err(KindRefusal {
            code: Code::KindUnknown,
            message: format!("no command kind is named {kind:?}{hint}"),
        });
    };
    let params_invalid = |why: String| KindRefusal { code: Code::ParamsInvalid, message: format!("{kind}: {why}") };
    let Some(object) = params.as_object() else {
        return Err(params_invalid(format!("params must be a JSON object, not {}", type_of(params))));
    };
    for (key, value) in object {
        let Some(p) = k.param(key) else {
            let takes: Vec<&str> = k.params.iter().map(|p| p.name).collect();
            let takes = if takes.is_empty() { "no params".to_string() } else { format!("params {}", takes.join(", ")) };
            return Err(params_invalid(format!("unknown param {key:?} (it takes {takes})")));
        };
        if !fits(p.ty, value) {
            return Err(params_invalid(format!("param {key:?} must be a {}, not {}", p.ty.as_str(), type_of(value))));
        }
    }
    if let Some(missing) = k.params.iter().find(|p| p.required && !object.contains_key(p.name)) {
        return Err(params_invalid(format!("param {:?} is required ({})", missing.name, missing.about)));
    }
    if !k.one_of.is_empty() && k.one_of.iter().filter(|n| object.contains_key(**n)).count() != 1 {
        return Err(params_invalid(format!("give exactly one of the params {}", k.one_of.join(", "))));
    }
    Ok(k)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn kinds_and_params_are_those_of_the_list() {
        assert_eq!(check("diag.nvml", &json!({})).unwrap().name, "diag.nvml");
        let e = check("diag.nvm", &json!({})).unwrap_err();
        assert_eq!(e.code, Code::KindUnknown);
        assert!(e.message.contains("did you mean \"diag.nvml\""), "{}", e.message);
        assert!(check("zzz", &json!({})).unwrap_err().message.contains("the kinds: diag.nvml"));
        let e = check("diag.nvml", &json!([1, 2])).unwrap_err();
        assert_eq!(
            (e.code, e.message.as_str()),
            (Code::ParamsInvalid, "diag.nvml: params must be a JSON object, not array")
        );
        let e = check("daemon.upgrade", &json!({"version": 9})).unwrap_err();
        assert!(e.message.contains("param \"version\" must be a string, not integer"), "{}", e.message);
        assert!(check("daemon.upgrade", &json!({"version": "0.9.1"})).is_ok());
        assert!(check("daemon.upgrade", &json!({})).unwrap_err().message.contains("exactly one of"));
        assert!(check("daemon.upgrade", &json!({"verison": "1"})).unwrap_err().message.contains("unknown param"));
        assert!(check("fakeGpuReset", &json!({})).unwrap_err().message.contains("\"gpu\" is required"));
        assert!(check("fakeGpuReset", &json!({"gpu": 3})).is_ok());
        assert_eq!(closest("daemon.upgrad"), Some("daemon.upgrade"));
    }

    #[test]
    fn the_stacks_own_kinds_are_listed() {
        for kind in [crate::adoption::ACCEPTANCE_DIAG, crate::releases::UPGRADE_KIND] {
            assert!(Kind::find(kind).is_some(), "{kind}");
        }
    }
}
