//! NodeSpecs: building a generation (signed by the command root under signed
//! intent, else an unsigned envelope), publishing a new one to a node, and
//! the DesiredState frame that carries it.

use prost::Message as _;

use crate::clock::now_ms;
use crate::commands::frame;
use crate::error::{Error, Result};
use crate::hub::Control;
use crate::shared::Shared;
use crate::store::rows::NodeSpecRow;
use crate::store::{nodes, specs};

/// What a new spec generation changes; unset sections keep their value from
/// the previous generation.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SpecUpdate {
    /// A new access section.
    pub access: Option<proto::AccessSection>,
    /// A new trust bundle (a rotation), as signed by its approvers.
    pub trust_bundle: Option<pki::dsse::Envelope>,
    /// Send it unsigned even under signed intent (to test `signedSpecs`).
    pub unsigned: bool,
}

/// A spec row for `spec`, signed unless the stack has no intent keys or
/// `unsigned` asks otherwise.
pub fn row(shared: &Shared, spec: &proto::NodeSpec, unsigned: bool, now: i64) -> NodeSpecRow {
    let envelope = match (&shared.keys.intent, unsigned) {
        (Some(intent), false) => pki::intent::sign_spec(&intent.command_root, spec),
        _ => pki::dsse::Envelope::unsigned(proto::payload_type::NODE_SPEC, spec.encode_to_vec()),
    };
    NodeSpecRow {
        node_id: spec.node_id.clone(),
        generation: spec.generation,
        payload: spec.encode_to_vec(),
        envelope: envelope.to_proto().encode_to_vec(),
        created_at_ms: now,
    }
}

/// The first spec of a node (generation 1, no sections).
pub fn first(shared: &Shared, node_id: &str, now: i64) -> NodeSpecRow {
    let spec = proto::NodeSpec { node_id: node_id.to_string(), generation: 1, ..Default::default() };
    row(shared, &spec, false, now)
}

/// Stores the next generation of a node's spec and sends it to its live
/// session (a node that is away gets it after its next Welcome).
pub fn publish(shared: &Shared, node_id: &str, update: &SpecUpdate) -> Result<NodeSpecRow> {
    let now = now_ms();
    let spec_row = shared.store.tx(|c| {
        if nodes::get(c, node_id)?.is_none() {
            return Err(Error::UnknownNode { node_id: node_id.to_string() });
        }
        let mut spec = match specs::latest(c, node_id)? {
            Some(latest) => proto::NodeSpec::decode(latest.payload.as_slice()).map_err(|e| Error::Corrupt {
                table: "node_specs",
                column: "payload",
                key: format!("{node_id}/{}", latest.generation),
                reason: e.to_string(),
            })?,
            None => proto::NodeSpec { node_id: node_id.to_string(), ..Default::default() },
        };
        spec.generation += 1;
        if let Some(access) = &update.access {
            spec.access = Some(access.clone());
        }
        if let Some(bundle) = &update.trust_bundle {
            spec.trust = Some(proto::TrustSection { trust_bundle: Some(bundle.to_proto()) });
        }
        let spec_row = row(shared, &spec, update.unsigned, now);
        specs::insert(c, &spec_row)?;
        Ok(spec_row)
    })?;
    tracing::info!(node_id, generation = spec_row.generation, unsigned = update.unsigned, "spec published");
    shared.hub.send(node_id, Control::Raw(Box::new(desired_state_frame(&spec_row)?)));
    shared.bump();
    Ok(spec_row)
}

/// The DesiredState frame of a stored spec.
pub fn desired_state_frame(spec: &NodeSpecRow) -> Result<proto::GatewayFrame> {
    let envelope = proto::Envelope::decode(spec.envelope.as_slice()).map_err(|e| Error::Corrupt {
        table: "node_specs",
        column: "envelope",
        key: format!("{}/{}", spec.node_id, spec.generation),
        reason: e.to_string(),
    })?;
    Ok(frame(proto::gateway_frame::Frame::DesiredState(proto::DesiredState { spec: Some(envelope) })))
}
