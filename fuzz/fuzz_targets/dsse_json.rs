//! The DSSE envelope in JSON (`Envelope::from_json`): what parses re-encodes
//! to JSON that parses to the same envelope, and its verification under the
//! command root refuses with a code or accepts.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pki::dsse::Envelope;

fuzz_target!(|data: &[u8]| {
    let verdict = bcd_fuzz::verdict("dsse-json", data);
    let Ok(env) = std::str::from_utf8(data).map_err(|_| ()).and_then(|t| Envelope::from_json(t).map_err(|_| ())) else {
        assert!(verdict.starts_with("refuse: dsse-malformed"), "{verdict}");
        return;
    };
    let json = env.to_json();
    let again = Envelope::from_json(&json).expect("our own JSON parses");
    assert_eq!(again, env);
    assert_eq!(again.to_json(), json);
});
