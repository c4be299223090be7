//! A NodeFrame as the gateway receives it (tonic decodes it with prost): what
//! decodes re-encodes to a frame equal to it, and every node-signed statement
//! it carries goes through the verifier the gateway's handlers run
//! (`devstack/src/gateway/handlers.rs`), which refuses with a code unless
//! node/0's key signed it for node_0.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pki::dsse::Envelope;
use prost::Message as _;
use proto::node_frame::Frame;

fuzz_target!(|data: &[u8]| {
    let Ok(frame) = proto::NodeFrame::decode(data) else { return };
    let again = proto::NodeFrame::decode(frame.encode_to_vec().as_slice()).expect("our own encoding decodes");
    assert_eq!(again, frame);
    let key = pki::Signer::public_key(&pki::keys::p256(bcd_fuzz::SEED, "node/0"));
    match &frame.frame {
        Some(Frame::CommandUpdate(u)) => {
            if let Some(env) = &u.result {
                let _ = pki::statement::verify_command_result(&Envelope::from_proto(env), &key, bcd_fuzz::NODE);
            }
        }
        Some(Frame::StatusReport(r)) => {
            for env in &r.allocations {
                let _ = pki::statement::verify_allocation_bound(&Envelope::from_proto(env), &key, bcd_fuzz::NODE);
            }
        }
        Some(Frame::SecretRequest(env)) => {
            let _ = pki::statement::verify_secret_request(&Envelope::from_proto(env), &key, bcd_fuzz::NODE);
        }
        _ => {}
    }
});
