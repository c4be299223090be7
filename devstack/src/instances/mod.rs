//! VPS instances (docs/devstack.md, "Instances"): the instances API
//! (`create_instance`, `delete_instance`, `set_instance_state`,
//! `instance`, `await_instance_state`), placement onto a host of a
//! `vps-host` pool (`crate::placement`), the host's NodeSpec `instances`
//! section rebuilt in the same transaction that changes an instance or a
//! volume (as reservations do), the drivers a host announces in its Hello
//! as labels, and the states its StatusReports move instances through
//! (`report.rs`). Volumes are `volumes.rs`.
//!
//! States: `unschedulable` (no host passes placement; the reason names
//! what refused it, and placement is tried again whenever a host of the
//! pool reports), `pending` (in the host's spec), then what the host
//! reports (`starting`, `running`, `stopped`, `failed`), and `deleted`
//! once the host confirms the domain gone (a report at or after the
//! generation without it, no longer listing it).

pub mod network_policy;
mod report;
pub(crate) mod volumes;

use std::time::Duration;

use crate::store::Db;
use tracing::{info, warn};

use crate::capabilities::INSTANCE_NETWORK_POLICY;
use crate::clock::now_ms;
use crate::error::{Error, Result};
use crate::gateway::handlers::{HelloHook, Opening};
use crate::ids;
use crate::placement::{self, Request, Room};
use crate::shared::Shared;
use crate::store::rows::NodeSpecRow;
use crate::store::rows::{InstanceDesired, InstanceRow, InstanceState, NodeLabelRow};
use crate::store::{instances as rows, labels, pools, secrets, volumes as volume_rows};
use crate::view::StackView;

pub use report::Reports;

/// The code of an unschedulable instance's reason.
pub const UNSCHEDULABLE: &str = proto::refusal::Code::InstanceUnschedulable.as_str();

/// An instance to create.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct InstanceRequest {
    /// Its runtime (`libvirt-kvm`, …): a host must announce it.
    pub runtime: String,
    /// vCPUs.
    pub vcpus: u32,
    /// Memory.
    pub memory_bytes: u64,
    /// Running (the default) or stopped.
    pub state: InstanceDesired,
    /// Cloud-init user data that is not secret.
    pub user_data: Vec<u8>,
    /// A secret (from [`DevStack::put_secret`]) holding the user data: the
    /// host fetches it through the secret broker.
    pub user_data_secret: Option<String>,
    /// NICs.
    pub nics: Vec<proto::InstanceNic>,
    /// Volumes of the host it attaches (placement goes to their host).
    pub volumes: Vec<proto::VolumeAttachment>,
    /// Pin it to this host: placement's other filters still apply, room is
    /// left to the host's own admission.
    pub node: Option<String>,
    /// Back its memory with huge pages of this size (2 MiB or 1 GiB; 0:
    /// none): placement books them against what the host reserved.
    pub hugepage_bytes: u64,
    /// Pin its vCPUs, one host CPU each, on one NUMA node of its host and
    /// off the pool's reserved CPUs (its memory strictly from that node).
    pub pin_cpus: bool,
    /// The floor its host may balloon it down to under memory pressure (0:
    /// never ballooned; below its memory, and no huge pages).
    pub memory_floor_bytes: u64,
    /// The image it boots from, by digest (`sha256:<64 lowercase hex>`, a
    /// base disk in its host's image store); none: no boot disk.
    pub image: Option<String>,
    /// Its network policy (none: its NICs pass everything): only a host
    /// advertising `instance.network-policy` takes it.
    pub network_policy: Option<proto::NetworkPolicy>,
}

/// Whether `image` is an image digest an instance may name:
/// `sha256:` and 64 lowercase hex digits.
pub fn is_image_digest(image: &str) -> bool {
    image
        .strip_prefix("sha256:")
        .is_some_and(|hex| hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
}

/// A node's `instances` section: its instances and volumes that are not
/// deleted.
fn section(c: &Db<'_>, node_id: &str) -> Result<proto::InstancesSection> {
    let instances = rows::on_node(c, node_id)?
        .into_iter()
        .filter(|i| i.desired != InstanceDesired::Deleted)
        .map(|i| proto::InstanceSpec { state: i.desired.as_str().to_string(), ..i.spec })
        .collect();
    let volumes = volume_rows::on_node(c, node_id)?
        .into_iter()
        .filter(|v| !v.deleting)
        .map(|v| proto::VolumeSpec { id: v.id, size_bytes: v.size_bytes })
        .collect();
    Ok(proto::InstancesSection { instances, volumes })
}

/// The next spec generation of a node with its instances section rebuilt
/// from the store.
pub(crate) fn respec(c: &Db<'_>, shared: &Shared, node_id: &str) -> Result<NodeSpecRow> {
    let section = section(c, node_id)?;
    crate::spec::next(c, shared, node_id, false, |spec| {
        spec.instances = Some(section);
        Ok(())
    })
}

/// The Hello hook that records a Hello's runtime drivers as
/// `bc.dev/driver.<name>` labels (placement filters on them).
pub struct Drivers;

impl HelloHook for Drivers {
    fn on_hello(&self, opening: &Opening<'_>) -> Result<()> {
        let node_id = opening.node.node_id.as_str();
        let runtimes: Vec<(String, String)> = opening
            .hello
            .drivers
            .iter()
            .filter(|d| d.kind == "runtime")
            .map(|d| (d.name.clone(), d.version.clone()))
            .collect();
        if labels::set_drivers(opening.c, node_id, &runtimes, opening.now_ms)? {
            info!(node_id, drivers = ?runtimes, "node: driver labels");
        }
        Ok(())
    }
}

/// The placement request of an instance.
fn request<'a>(pool: &'a crate::store::rows::PoolRow, row: &'a InstanceRow) -> Request<'a> {
    Request {
        pool,
        runtime: &row.spec.runtime,
        need: Room { vcpus: row.spec.vcpus as u64, memory_bytes: row.spec.memory_bytes, ..Room::default() }
            .with_hugepages(row.spec.hugepage_bytes, row.spec.memory_bytes),
        volumes: row.spec.volumes.iter().map(|v| v.volume_id.clone()).collect(),
        pinned: row.pinned_node.as_deref(),
        pin_cpus: row.spec.cpus.is_some(),
        capabilities: if row.spec.network_policy.is_some() { vec![INSTANCE_NETWORK_POLICY] } else { vec![] },
    }
}

/// Tries to place an inserted instance: on success it is `pending` in its
/// host's next spec (returned), else `unschedulable` with the reason.
fn try_place(c: &Db<'_>, shared: &Shared, row: &InstanceRow) -> Result<Option<NodeSpecRow>> {
    let pool = pools::get(c, &row.pool_id)?.ok_or_else(|| Error::UnknownPool { pool_id: row.pool_id.clone() })?;
    let hosts = placement::hosts(c, &row.pool_id)?;
    let now = now_ms();
    match placement::choose(&request(&pool, row), &hosts) {
        Ok(node_id) => {
            if row.spec.cpus.is_some() {
                let host = hosts.iter().find(|h| h.node.id == node_id).expect("the chosen host is a host of the pool");
                let need = request(&pool, row).need;
                let spec = proto::InstanceSpec { cpus: host.pin(need), ..row.spec.clone() };
                rows::set_spec(c, &row.id, &spec)?;
            }
            rows::place(c, &row.id, &node_id, 0, now)?;
            let spec = respec(c, shared, &node_id)?;
            rows::place(c, &row.id, &node_id, spec.generation, now)?;
            info!(instance_id = %row.id, node_id, generation = spec.generation, "instance: placed");
            Ok(Some(spec))
        }
        Err(why) => {
            let reason = format!("{UNSCHEDULABLE}: {why}");
            if reason != row.reason {
                warn!(instance_id = %row.id, %reason, "instance: unschedulable");
            }
            rows::set_unschedulable(c, &row.id, &reason, now)?;
            Ok(None)
        }
    }
}

/// Places what can be placed of a pool's unschedulable instances, oldest
/// first; returns the specs to send.
pub(crate) fn reschedule(c: &Db<'_>, shared: &Shared, pool_id: &str) -> Result<Vec<NodeSpecRow>> {
    let mut specs = Vec::new();
    for row in rows::unschedulable(c, pool_id)? {
        if let Some(spec) = try_place(c, shared, &row)? {
            specs.push(spec);
        }
    }
    Ok(specs)
}

/// Checks a request before anything is stored.
fn check(c: &Db<'_>, request: &InstanceRequest) -> Result<()> {
    let invalid = |reason: String| Err(Error::InvalidInstance { reason });
    if request.runtime.is_empty() || request.vcpus == 0 || request.memory_bytes == 0 {
        return invalid(format!(
            "{}: runtime {:?}, {} vCPUs, {} bytes of memory",
            proto::refusal::Code::InstanceInvalid,
            request.runtime,
            request.vcpus,
            request.memory_bytes
        ));
    }
    if ![0, 2 << 20, 1 << 30].contains(&request.hugepage_bytes)
        || !request.memory_bytes.is_multiple_of(request.hugepage_bytes.max(1))
    {
        return invalid(format!(
            "{}: huge pages of {} bytes back {} bytes of memory (2 MiB or 1 GiB pages, a whole number of them)",
            proto::refusal::Code::InstanceInvalid,
            request.hugepage_bytes,
            request.memory_bytes
        ));
    }
    if request.memory_floor_bytes != 0
        && (request.memory_floor_bytes >= request.memory_bytes || request.hugepage_bytes != 0)
    {
        return invalid(format!(
            "{}: a memory floor of {} bytes for {} bytes of memory{} (below the memory, without huge pages)",
            proto::refusal::Code::InstanceInvalid,
            request.memory_floor_bytes,
            request.memory_bytes,
            if request.hugepage_bytes != 0 { " backed by huge pages" } else { "" }
        ));
    }
    if let Some(image) = &request.image
        && !is_image_digest(image)
    {
        return invalid(format!(
            "{}: image {image:?} is not a digest (sha256:<64 lowercase hex>)",
            proto::refusal::Code::InstanceInvalid
        ));
    }
    if let Some(policy) = &request.network_policy
        && let Err(why) = network_policy::check(policy)
    {
        return invalid(format!("{}: network policy: {why}", proto::refusal::Code::InstanceInvalid));
    }
    if request.state == InstanceDesired::Deleted {
        return invalid("an instance is created running or stopped".into());
    }
    if let Some(secret) = &request.user_data_secret
        && secrets::get(c, secret)?.is_none()
    {
        return invalid(format!("no secret {secret}"));
    }
    for a in &request.volumes {
        match volume_rows::get(c, &a.volume_id)? {
            Some(v) if !v.deleting => {}
            _ => return Err(Error::UnknownVolume { volume_id: a.volume_id.clone() }),
        }
    }
    Ok(())
}

/// Creates an instance and places it; returns its id.
pub fn create(shared: &Shared, pool_id: &str, request: InstanceRequest) -> Result<String> {
    let id = ids::instance_id();
    let now = now_ms();
    let spec = shared.ledger.write(|c| {
        if pools::get(c, pool_id)?.is_none() {
            return Err(Error::UnknownPool { pool_id: pool_id.to_string() });
        }
        check(c, &request)?;
        let row = InstanceRow {
            id: id.clone(),
            pool_id: pool_id.to_string(),
            node_id: None,
            desired: request.state,
            state: InstanceState::Unschedulable,
            reason: String::new(),
            spec: proto::InstanceSpec {
                id: id.clone(),
                runtime: request.runtime.clone(),
                vcpus: request.vcpus,
                memory_bytes: request.memory_bytes,
                state: request.state.as_str().to_string(),
                user_data: request.user_data.clone(),
                user_data_secret: request.user_data_secret.clone().unwrap_or_default(),
                nics: request.nics.clone(),
                volumes: request.volumes.clone(),
                hugepage_bytes: request.hugepage_bytes,
                memory_floor_bytes: request.memory_floor_bytes,
                image: request.image.clone().unwrap_or_default(),
                network_policy: request.network_policy.clone(),
                // Placement chooses the CPUs (an empty pinning asks for one).
                cpus: request.pin_cpus.then(proto::InstanceCpus::default),
                ..proto::InstanceSpec::default()
            },
            pinned_node: request.node.clone(),
            generation: None,
            delete_generation: None,
            created_at_ms: now,
            updated_at_ms: now,
            running_at_ms: None,
            deleted_at_ms: None,
            current_memory_bytes: None,
        };
        rows::insert(c, &row)?;
        try_place(c, shared, &row)
    })?;
    info!(instance_id = %id, pool_id, runtime = %request.runtime, vcpus = request.vcpus, "instance: created");
    if let Some(spec) = spec {
        shared.hub.push_spec(&spec);
    }
    Ok(id)
}

/// Deletes an instance: out of its host's next spec (deleted once the host
/// confirms), or deleted at once when it was never placed.
pub fn delete(shared: &Shared, instance_id: &str) -> Result<()> {
    let spec = shared.ledger.write(|c| {
        let row = rows::get(c, instance_id)?
            .ok_or_else(|| Error::UnknownInstance { instance_id: instance_id.to_string() })?;
        if row.desired == InstanceDesired::Deleted {
            return Ok(None);
        }
        let Some(node_id) = row.node_id.clone() else {
            rows::set_desired(c, instance_id, InstanceDesired::Deleted, &row.spec, None, now_ms())?;
            rows::finish_delete(c, instance_id, now_ms())?;
            return Ok(None);
        };
        rows::set_desired(c, instance_id, InstanceDesired::Deleted, &row.spec, None, now_ms())?;
        let spec = respec(c, shared, &node_id)?;
        rows::set_desired(c, instance_id, InstanceDesired::Deleted, &row.spec, Some(spec.generation), now_ms())?;
        Ok(Some(spec))
    })?;
    info!(instance_id, generation = spec.as_ref().map(|s| s.generation), "instance: deleted");
    if let Some(spec) = spec {
        shared.hub.push_spec(&spec);
    }
    Ok(())
}

/// Asks for a placed instance to run or to stop.
pub fn set_state(shared: &Shared, instance_id: &str, desired: InstanceDesired) -> Result<()> {
    if desired == InstanceDesired::Deleted {
        return delete(shared, instance_id);
    }
    let spec = shared.ledger.write(|c| {
        let row = rows::get(c, instance_id)?
            .ok_or_else(|| Error::UnknownInstance { instance_id: instance_id.to_string() })?;
        if row.desired == InstanceDesired::Deleted {
            return Err(Error::InstanceEnded { instance_id: row.id, state: row.state, reason: "deleted".into() });
        }
        rows::set_desired(c, instance_id, desired, &row.spec, None, now_ms())?;
        row.node_id.as_deref().map(|node| respec(c, shared, node)).transpose()
    })?;
    if let Some(spec) = spec {
        shared.hub.push_spec(&spec);
    }
    Ok(())
}

impl StackView<'_> {
    /// An instance.
    pub fn instance(&self, instance_id: &str) -> Option<InstanceRow> {
        self.read(|c| rows::get(c, instance_id))
    }

    /// Every instance, oldest first (deleted ones too).
    pub fn instances(&self) -> Vec<InstanceRow> {
        self.read(rows::all)
    }

    /// A node's labels.
    pub fn node_labels(&self, node_id: &str) -> Vec<NodeLabelRow> {
        self.read(|c| labels::of_node(c, node_id))
    }
}

/// Waits until an instance is in `state`; fails at once when it is
/// deleted (and `deleted` is not awaited), or failed when `running` is.
pub async fn await_instance_state(
    shared: &Shared,
    instance_id: &str,
    state: InstanceState,
    timeout: Duration,
) -> Result<InstanceRow> {
    let row = shared
        .await_until(format!("instance {instance_id} to be {state}"), timeout, |v| {
            let Some(row) = v.instance(instance_id) else {
                return Some(Err(Error::UnknownInstance { instance_id: instance_id.to_string() }));
            };
            v.note(format_args!("state {}, reason {:?}", row.state, row.reason));
            let ended = row.state == InstanceState::Deleted
                || (state == InstanceState::Running && row.state == InstanceState::Failed);
            (row.state == state || ended).then_some(Ok(row))
        })
        .await??;
    if row.state != state {
        return Err(Error::InstanceEnded { instance_id: row.id, state: row.state, reason: row.reason });
    }
    Ok(row)
}
