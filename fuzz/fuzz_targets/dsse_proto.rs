//! The DSSE envelope in protobuf, as the wire carries it: what decodes
//! re-encodes to a message that decodes to the same envelope, and its
//! verification under the command root accepts or refuses with a code.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pki::dsse::Envelope;
use prost::Message as _;

fuzz_target!(|data: &[u8]| {
    let Ok(msg) = proto::Envelope::decode(data) else { return };
    let env = Envelope::from_proto(&msg);
    let wire = env.to_proto().encode_to_vec();
    let again = Envelope::from_proto(&proto::Envelope::decode(wire.as_slice()).expect("our own encoding decodes"));
    assert_eq!(again, env);
    if let Ok(payload) = env.verify(proto::payload_type::COMMAND, &[bcd_fuzz::command_root()], 1) {
        let _ = pki::dsse::decode::<proto::Command>(payload);
    }
});
