//! An OTLP/JSON body as the OTLP receiver checks it before decoding
//! (`devstack/src/otlp/validate.rs`, built here as it is): what passes under
//! tight limits passes under looser ones, what a refusal names is a path of
//! the metrics model's field names and indices only (no value of the body
//! reaches the receiver's log), and a verdict is the same every time.
#![no_main]

#[path = "../../devstack/src/otlp/validate.rs"]
#[allow(dead_code)]
mod validate;

use libfuzzer_sys::fuzz_target;
use validate::{LIMITS, Limits, check};

/// Limits small enough that a short input reaches each of them.
const TIGHT: Limits = Limits { points: 4, values: 32, depth: 2 };

fuzz_target!(|data: &[u8]| {
    let Ok(body) = serde_json::from_slice::<serde_json::Value>(data) else { return };
    let tight = check(&body, TIGHT);
    let receiver = check(&body, LIMITS);
    if tight.is_ok() {
        assert!(receiver.is_ok(), "passed tight limits but not the receiver's: {receiver:?}");
    }
    for verdict in [&tight, &receiver] {
        if let Err(invalid) = verdict {
            assert!(
                invalid.path.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '[' | ']')),
                "a refusal's path holds more than field names and indices: {:?}",
                invalid.path
            );
        }
    }
    assert_eq!(check(&body, LIMITS), receiver, "the same body, another verdict");
});
