//! NodeSpecs: building a generation (signed by the command root under signed
//! intent, else an unsigned envelope), publishing a new one to a node, the
//! DesiredState frame that carries it, and the answer to a node's
//! SpecRequest.

use prost::Message as _;
use tracing::warn;

use crate::clock::now_ms;
use crate::error::{Error, Result};
use crate::gateway::handlers::{Effects, RequestContext, RequestHandler};
use crate::shared::Shared;
use crate::store::Db;
use crate::store::rows::NodeSpecRow;
use crate::store::{nodes, specs};
use crate::view::StackView;

/// What a new spec generation changes; unset sections keep their value from
/// the previous generation.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SpecUpdate {
    /// A new access section.
    pub access: Option<proto::AccessSection>,
    /// A new trust bundle (a rotation), as signed by its approvers.
    pub trust_bundle: Option<pki::dsse::Envelope>,
    /// A new telemetry section (docs/protocol.md, "Telemetry"); a section
    /// with an empty endpoint stops the exports.
    pub telemetry: Option<proto::TelemetrySection>,
    /// A new daemon section: the release the node converges to, its signed
    /// manifest carried (docs/protocol.md, "Self-update";
    /// [`crate::releases::daemon_section`]).
    pub daemon: Option<proto::DaemonSection>,
    /// Send it unsigned even under signed intent (to test `signedSpecs`).
    pub unsigned: bool,
    /// An instances section as given, instead of the one the stack builds
    /// from its instances (to test bcd's refusals of a section placement
    /// would never send, an unknown runtime say); the next change of an
    /// instance or volume of the node rebuilds it.
    pub instances: Option<proto::InstancesSection>,
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

/// The first spec of a node (generation 1): its pool policy's host section
/// (docs/devstack.md, "Pool policies") and, with the stack's SSH CAs, the
/// access section that trusts them (docs/devstack.md, "SSH certificate
/// authorities"); no other.
pub fn first(shared: &Shared, node_id: &str, host: Option<proto::HostSection>, now: i64) -> NodeSpecRow {
    let access = shared.settings.options.ssh_cas.then(|| crate::ssh_ca::default_access(&shared.keys));
    let spec = proto::NodeSpec { node_id: node_id.to_string(), generation: 1, host, access, ..Default::default() };
    row(shared, &spec, false, now)
}

/// Builds and stores the next generation of a node's spec inside a caller's
/// transaction: the latest spec, changed by `edit`, with the next generation.
/// The caller sends it with [`push`] once the transaction committed.
pub fn next(
    c: &Db<'_>,
    shared: &Shared,
    node_id: &str,
    unsigned: bool,
    edit: impl FnOnce(&mut proto::NodeSpec) -> Result<()>,
) -> Result<NodeSpecRow> {
    if nodes::get(c, node_id)?.is_none() {
        return Err(Error::UnknownNode { node_id: node_id.to_string() });
    }
    let mut spec = match specs::latest(c, node_id)? {
        Some(latest) => proto::NodeSpec::decode(latest.payload.as_slice()).map_err(|e| {
            Error::from(crate::store::Error::corrupt(
                "node_specs",
                "payload",
                format!("{node_id}/{}", latest.generation),
                e,
            ))
        })?,
        None => proto::NodeSpec { node_id: node_id.to_string(), ..Default::default() },
    };
    spec.generation += 1;
    edit(&mut spec)?;
    let spec_row = row(shared, &spec, unsigned, now_ms());
    specs::insert(c, &spec_row)?;
    Ok(spec_row)
}

/// Stores the next generation of a node's spec and sends it to its live
/// session. A trust bundle that the current approvers signed for a higher
/// sequence also becomes the stack's current bundle (what later joins get);
/// any other is sent as is (tests of bcd's `trust.ignored`).
pub fn publish(shared: &Shared, node_id: &str, update: &SpecUpdate) -> Result<NodeSpecRow> {
    let rotation = match (&update.trust_bundle, &shared.keys.intent) {
        (Some(env), Some(intent)) => intent.check_rotation(env),
        _ => None,
    };
    let spec_row = shared.ledger.write(|c| {
        let spec_row = next(c, shared, node_id, update.unsigned, |spec| {
            if let Some(access) = &update.access {
                spec.access = Some(access.clone());
            }
            if let Some(telemetry) = &update.telemetry {
                spec.telemetry = Some(telemetry.clone());
            }
            if let Some(daemon) = &update.daemon {
                spec.daemon = Some(daemon.clone());
            }
            if let Some(bundle) = &update.trust_bundle {
                spec.trust = Some(proto::TrustSection { trust_bundle: Some(bundle.to_proto()) });
            }
            if let Some(instances) = &update.instances {
                spec.instances = Some(instances.clone());
            }
            Ok(())
        })?;
        if let (Some((_, env)), Some(intent)) = (&rotation, &shared.keys.intent) {
            intent.persist_trust(c, env)?;
        }
        Ok(spec_row)
    })?;
    if let (Some((bundle, env)), Some(intent)) = (rotation, &shared.keys.intent) {
        tracing::info!(sequence = bundle.sequence, "trust bundle rotated: it is now the stack's current bundle");
        intent.set_trust(bundle, env);
    }
    tracing::info!(node_id, generation = spec_row.generation, unsigned = update.unsigned, "spec published");
    shared.hub.push_spec(&spec_row);
    Ok(spec_row)
}

/// The SpecRequest handler: the latest spec, even when the node asks for a
/// generation above it.
pub struct SpecRequests;

impl RequestHandler<proto::SpecRequest> for SpecRequests {
    fn answer(&self, request: &RequestContext<'_>, message: proto::SpecRequest) -> Result<Effects> {
        let node_id = &request.node.node_id;
        match request.shared.ledger.read(|c| specs::latest(c, node_id))? {
            Some(spec) => {
                if spec.generation < message.min_generation {
                    warn!(
                        node_id = %node_id,
                        wanted = message.min_generation,
                        latest = spec.generation,
                        "session: spec request above the latest generation; sending the latest"
                    );
                }
                Ok(Effects { specs: vec![spec], ..Effects::default() })
            }
            None => {
                warn!(node_id = %node_id, "session: spec request from a node without a spec");
                Ok(Effects::default())
            }
        }
    }
}

/// The `headers_ref` of the telemetry section of a node's latest spec: the
/// secret its exports carry the headers of (docs/protocol.md, "Telemetry").
pub fn telemetry_headers_ref(c: &Db<'_>, node_id: &str) -> std::result::Result<Option<String>, crate::store::Error> {
    let Some(latest) = specs::latest(c, node_id)? else { return Ok(None) };
    let spec = proto::NodeSpec::decode(latest.payload.as_slice()).map_err(|e| {
        crate::store::Error::corrupt("node_specs", "payload", format!("{node_id}/{}", latest.generation), e)
    })?;
    Ok(spec.telemetry.map(|t| t.headers_ref).filter(|r| !r.is_empty()))
}

impl StackView<'_> {
    /// A node's specs, by generation.
    pub fn node_specs(&self, node_id: &str) -> Vec<NodeSpecRow> {
        self.read(|c| specs::of_node(c, node_id))
    }
}
