//! The frames the gateway sends that carry stored rows: a command's
//! delivery (with its batch approval) and a spec's DesiredState, and the
//! control-frame wrapper (`seq` 0).

use prost::Message as _;

use crate::error::{Error, Result};
use crate::store::rows::{CommandRow, NodeSpecRow};

fn decode_envelope(bytes: &[u8], column: &'static str, key: &str) -> Result<proto::Envelope> {
    proto::Envelope::decode(bytes)
        .map_err(|e| Error::from(crate::store::Error::corrupt("commands", column, key.to_string(), e)))
}

/// The frame that delivers a stored command (with its batch approval).
pub fn delivery_frame(row: &CommandRow) -> Result<proto::GatewayFrame> {
    let command = decode_envelope(&row.envelope, "envelope", &row.id)?;
    let batch_approval =
        row.batch_approval.as_deref().map(|b| decode_envelope(b, "batch_approval", &row.id)).transpose()?;
    Ok(frame(proto::gateway_frame::Frame::Command(proto::CommandDelivery { command: Some(command), batch_approval })))
}

/// A control frame (`seq` 0).
pub fn frame(frame: proto::gateway_frame::Frame) -> proto::GatewayFrame {
    proto::GatewayFrame { seq: 0, frame: Some(frame) }
}

/// The DesiredState frame of a stored spec.
pub fn desired_state_frame(spec: &NodeSpecRow) -> Result<proto::GatewayFrame> {
    let envelope = proto::Envelope::decode(spec.envelope.as_slice()).map_err(|e| {
        Error::from(crate::store::Error::corrupt(
            "node_specs",
            "envelope",
            format!("{}/{}", spec.node_id, spec.generation),
            e,
        ))
    })?;
    Ok(frame(proto::gateway_frame::Frame::DesiredState(proto::DesiredState { spec: Some(envelope) })))
}
