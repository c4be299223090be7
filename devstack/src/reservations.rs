//! GPU reservations (docs/protocol.md, "Reservations (holds)"): booking free GPU indexes of an
//! adopted node's `gpus` inventory as a `Hold` in a new NodeSpec generation,
//! withdrawing it on release, and what the node reports back in its
//! StatusReports: a node-signed `AllocationBound` turns a reservation
//! `active` (verified under the node's certified key, with the held indexes
//! and a generation at or after the hold's), `AllocationReleased` ends a
//! releasing one, `AllocationFailed` fails it (and withdraws the hold).
//!
//! A NodeSpec's holds are always those of the node's `pending` and `active`
//! reservations, rebuilt in the transaction that changes one.

use std::time::Duration;

use crate::ledger::Tx;
use crate::store::Db;
use prost::Message as _;
use tracing::{debug, info, warn};

use crate::clock::now_ms;
use crate::error::{Error, Result};
use crate::events::StackEvent;
use crate::gateway::handlers::{Effects, Event, EventHandler};
use crate::ids;
use crate::policy::PoolPolicy;
use crate::shared::Shared;
use crate::store::reservations as rows;
use crate::store::rows::{NodeSpecRow, NodeState, ReleaseCause, ReservationRow, ReservationState};
use crate::store::{self, inventory, nodes, pools};
use crate::view::StackView;

/// The code of an AllocationBound whose indexes are not the held ones.
pub const ALLOCATION_MISMATCH: &str = proto::refusal::Code::AllocationMismatch.as_str();
/// The code of an AllocationBound for a generation before the hold's.
pub const ALLOCATION_GENERATION: &str = proto::refusal::Code::AllocationGeneration.as_str();

/// The event of a reservation that reached `state` (or, with the state
/// unchanged, whose AllocationBound was refused for `reason`).
fn changed(node_id: &str, reservation_id: &str, state: ReservationState, reason: &str) -> StackEvent {
    StackEvent::Reservation {
        node_id: node_id.to_string(),
        reservation_id: reservation_id.to_string(),
        state,
        reason: reason.to_string(),
    }
}

/// The holds of a node's spec: its pending and active reservations.
fn holds(c: &Db<'_>, node_id: &str) -> Result<Vec<proto::Hold>> {
    Ok(rows::held(c, node_id)?
        .into_iter()
        .map(|r| proto::Hold {
            allocation_id: r.id,
            gpu_indexes: r.gpu_indexes,
            binding: r.binding,
            vcpus: r.vcpus,
            memory_bytes: r.memory_bytes,
        })
        .collect())
}

/// The next spec generation of a node with its holds rebuilt from the store.
fn respec(c: &Db<'_>, shared: &Shared, node_id: &str) -> Result<NodeSpecRow> {
    let holds = holds(c, node_id)?;
    crate::spec::next(c, shared, node_id, false, |spec| {
        spec.holds = holds;
        Ok(())
    })
}

/// The GPU indexes of a node's stored `gpus` inventory section.
fn gpu_indexes(c: &Db<'_>, node_id: &str) -> Result<Vec<u32>> {
    let missing = |reason: String| Error::NoGpuInventory { node_id: node_id.to_string(), reason };
    let section = inventory::of_node(c, node_id)?
        .into_iter()
        .find(|s| s.name == "gpus")
        .ok_or_else(|| missing("the node reported none".into()))?;
    let gpus = proto::GpuInventory::decode(section.content.as_slice()).map_err(|e| missing(e.to_string()))?;
    let mut indexes: Vec<u32> = gpus.gpus.iter().map(|g| g.index).collect();
    indexes.sort_unstable();
    indexes.dedup();
    Ok(indexes)
}

/// How a hold is bound on its node.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Binding {
    /// A plain hold: its CDI spec sets `NVIDIA_VISIBLE_DEVICES`, and a
    /// booked share runs in its slice `bcd-alloc-<id>.slice`.
    #[default]
    Plain,
    /// A Kubernetes hold (a pool with `policy.kubernetes` only): its CDI
    /// spec carries `bcd.dev/binding: kubernetes`, and the kubelet enforces
    /// the share.
    Kubernetes,
}

impl Binding {
    /// The value of `Hold.binding` and `reservations.binding`.
    pub fn as_str(self) -> &'static str {
        match self {
            Binding::Plain => "",
            Binding::Kubernetes => "kubernetes",
        }
    }
}

/// A reservation to make: GPUs, and the share of the host booked with them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReservationRequest {
    /// How many GPUs (the lowest free indexes).
    pub gpus: u32,
    /// vCPUs booked with them (0: none).
    pub vcpus: u32,
    /// Memory booked with them (0: none).
    pub memory_bytes: u64,
    /// How the hold is bound.
    pub binding: Binding,
}

/// Why the node's free vCPUs or memory cannot take the request's share, or
/// None (what its held and releasing reservations book is not free).
fn room(c: &Db<'_>, node_id: &str, request: &ReservationRequest) -> Result<Option<String>> {
    if request.vcpus == 0 && request.memory_bytes == 0 {
        return Ok(None);
    }
    let Some(system) = inventory::of_node(c, node_id)?
        .into_iter()
        .find(|s| s.name == "system")
        .and_then(|s| proto::SystemInventory::decode(s.content.as_slice()).ok())
    else {
        return Ok(Some("the node reported no system inventory".into()));
    };
    let (mut vcpus, mut memory) = (0u64, 0u64);
    for r in rows::taken(c, node_id)? {
        vcpus += r.vcpus as u64;
        memory += r.memory_bytes;
    }
    let (free_cpus, free_mem) =
        ((system.cpu_cores as u64).saturating_sub(vcpus), system.memory_bytes.saturating_sub(memory));
    Ok((request.vcpus as u64 > free_cpus || request.memory_bytes > free_mem).then(|| {
        format!(
            "{} vCPUs and {} bytes asked, {free_cpus} vCPUs and {free_mem} bytes free",
            request.vcpus, request.memory_bytes
        )
    }))
}

/// Books free GPUs of an adopted node (the lowest free indexes) and the
/// share asked in a new spec generation, sent to the node; returns the
/// reservation id. GPUs a releasing reservation still claims are not free
/// (fail-closed: they are claimed until the node reports them released).
/// With `ends_at_ms` the reservation ends itself then (`reservation_ends`).
pub fn reserve(shared: &Shared, node_id: &str, request: ReservationRequest, ends_at_ms: Option<i64>) -> Result<String> {
    let id = ids::reservation_id();
    let (spec, indexes) = shared.ledger.write(|c| {
        let booked = book(c, shared, node_id, &id, request)?;
        if let Some(end) = ends_at_ms {
            rows::set_end(c, &id, end)?;
        }
        Ok(booked)
    })?;
    info!(node_id, reservation_id = %id, gpu_indexes = ?indexes, generation = spec.generation, "reservation: hold sent");
    shared.hub.push_spec(&spec);
    Ok(id)
}

/// The capabilities a request needs its node to advertise: a booked share
/// `devices.limits`, a Kubernetes binding `binding.kubernetes`.
fn needed_capabilities(request: &ReservationRequest) -> Vec<&'static str> {
    let mut needed = Vec::new();
    if request.vcpus > 0 || request.memory_bytes > 0 {
        needed.push(crate::capabilities::DEVICES_LIMITS);
    }
    if request.binding == Binding::Kubernetes {
        needed.push(crate::capabilities::BINDING_KUBERNETES);
    }
    needed
}

/// Books a reservation `id` on a node inside the caller's transaction:
/// every check, the row, the next spec (returned, to send once committed)
/// and the event. Nothing is written when a check refuses.
pub(crate) fn book(
    c: &Tx<'_>,
    shared: &Shared,
    node_id: &str,
    id: &str,
    request: ReservationRequest,
) -> Result<(NodeSpecRow, Vec<u32>)> {
    let gpus = request.gpus;
    if gpus == 0 {
        return Err(Error::InvalidReservation { node_id: node_id.into(), reason: "zero GPUs asked".into() });
    }
    let node = nodes::get(c, node_id)?.ok_or_else(|| Error::UnknownNode { node_id: node_id.into() })?;
    crate::nodes::refuse_revoked(c, node_id)?;
    if node.state != NodeState::Adopted {
        return Err(Error::NodeNotAdopted { node_id: node_id.into(), state: node.state });
    }
    crate::cordon::refuse_if_cordoned(c, node_id)?;
    if request.binding == Binding::Kubernetes {
        let pool = pools::get(c, &node.pool_id)?.ok_or_else(|| Error::UnknownPool { pool_id: node.pool_id.clone() })?;
        if !PoolPolicy::of(&pool)?.kubernetes {
            return Err(Error::BindingUnsupported { node_id: node_id.into(), pool: pool.name });
        }
    }
    crate::capabilities::require(c, node_id, &needed_capabilities(&request))?;
    let taken = rows::taken(c, node_id)?;
    let claimed: Vec<u32> = taken.iter().flat_map(|r| r.gpu_indexes.iter().copied()).collect();
    let all = gpu_indexes(c, node_id)?;
    let free: Vec<u32> = all.iter().copied().filter(|i| !claimed.contains(i)).collect();
    if free.len() < gpus as usize {
        return Err(short_of_gpus(node_id, gpus, &free, &taken));
    }
    if let Some(reason) = room(c, node_id, &request)? {
        return Err(Error::ReservationRoom { node_id: node_id.into(), reason });
    }
    let indexes = free[..gpus as usize].to_vec();
    let generation = node.spec_generation + 1;
    let share = rows::Share {
        vcpus: request.vcpus,
        memory_bytes: request.memory_bytes,
        binding: request.binding.as_str().to_string(),
    };
    rows::insert(c, id, node_id, &indexes, &share, generation, now_ms())?;
    let spec = respec(c, shared, node_id)?;
    debug_assert_eq!(spec.generation, generation);
    c.publish(changed(node_id, id, ReservationState::Pending, ""));
    Ok((spec, indexes))
}

/// Why fewer GPUs are free than asked: `reservation-overlap` when GPUs a
/// releasing reservation still claims would have made up the difference
/// (fail-closed), else too few.
fn short_of_gpus(node_id: &str, gpus: u32, free: &[u32], taken: &[ReservationRow]) -> Error {
    let releasing: Vec<&ReservationRow> = taken.iter().filter(|r| r.state == ReservationState::Releasing).collect();
    let unclaimed = free.len() + releasing.iter().map(|r| r.gpu_indexes.len()).sum::<usize>();
    if !releasing.is_empty() && unclaimed >= gpus as usize {
        let held: Vec<String> = releasing.iter().map(|r| format!("GPUs {:?} of {}", r.gpu_indexes, r.id)).collect();
        return Error::ReservationOverlap {
            node_id: node_id.into(),
            reason: format!(
                "{gpus} GPUs asked, {} free: {} still claimed until the node reports them released",
                free.len(),
                held.join(", ")
            ),
        };
    }
    Error::InsufficientGpus { node_id: node_id.into(), wanted: gpus, free: free.len() as u32 }
}

/// How many GPUs of a node are free now (none claimed by a pending,
/// active or releasing reservation), inside the caller's transaction.
pub(crate) fn free_gpus(c: &Db<'_>, node_id: &str) -> Result<usize> {
    let claimed: Vec<u32> = rows::taken(c, node_id)?.iter().flat_map(|r| r.gpu_indexes.clone()).collect();
    Ok(gpu_indexes(c, node_id).map(|all| all.iter().filter(|i| !claimed.contains(i)).count()).unwrap_or(0))
}

/// Withdraws a pending or active reservation's hold in a new spec
/// generation for `cause` (recorded: invariant I5 reads it); the
/// reservation is `releasing` until the node reports AllocationReleased.
/// Returns the generation.
pub fn release(shared: &Shared, reservation_id: &str, cause: ReleaseCause) -> Result<u64> {
    let spec = shared.ledger.write(|c| {
        let r = rows::get(c, reservation_id)?
            .ok_or_else(|| Error::UnknownReservation { reservation_id: reservation_id.into() })?;
        if !matches!(r.state, ReservationState::Pending | ReservationState::Active) {
            return Err(Error::ReservationState { reservation_id: r.id, state: r.state, action: "release" });
        }
        let node = nodes::get(c, &r.node_id)?.ok_or_else(|| Error::UnknownNode { node_id: r.node_id.clone() })?;
        let now = store::clock::now_ms(c)?;
        rows::start_release(c, reservation_id, node.spec_generation + 1, cause, now)?;
        c.publish(changed(&r.node_id, reservation_id, ReservationState::Releasing, ""));
        respec(c, shared, &r.node_id)
    })?;
    info!(node_id = %spec.node_id, reservation_id, generation = spec.generation, %cause, "reservation: hold withdrawn");
    shared.hub.push_spec(&spec);
    Ok(spec.generation)
}

/// An AllocationBound whose signature verified, or why it did not.
struct Bound {
    /// The node's claim (decoded from the verified statement).
    result: Result<proto::AllocationBound, String>,
    /// The envelope as received (protobuf bytes).
    envelope: Vec<u8>,
    /// The allocation it names, read without verification (for the refusal).
    claimed_id: Option<String>,
}

impl Bound {
    /// Verifies one reported statement with `verify` (the session's key,
    /// then the node's other certified keys).
    fn check(
        env: &proto::Envelope,
        verify: impl Fn(&pki::dsse::Envelope) -> std::result::Result<proto::AllocationBound, pki::Error>,
    ) -> Bound {
        let envelope = pki::dsse::Envelope::from_proto(env);
        let claimed_id = proto::NodeStatement::decode(env.payload.as_slice()).ok().and_then(|s| match s.body {
            Some(proto::node_statement::Body::AllocationBound(a)) => Some(a.allocation_id),
            _ => None,
        });
        let result = verify(&envelope).map_err(|e| format!("{}: {e}", e.code()));
        Bound { result, envelope: env.encode_to_vec(), claimed_id }
    }
}

/// The report part that applies a StatusReport's allocation reports:
/// AllocationBound statements (verified under the node's certified keys),
/// releases and failures.
pub struct Allocations;

impl EventHandler<proto::StatusReport> for Allocations {
    fn record(&self, event: &Event<'_>, report: &proto::StatusReport) -> Result<Effects> {
        let node_id = event.node_id();
        let limit = event.shared.settings.options.limits.statements_per_report;
        if report.allocations.len() > limit {
            warn!(
                node_id,
                code = %crate::status::Code::ReportLimit,
                statements = report.allocations.len(),
                limit,
                "reservation: statements beyond the report's limit neither verified nor applied"
            );
        }
        let bound: Vec<Bound> = report
            .allocations
            .iter()
            .take(limit)
            .map(|env| Bound::check(env, |e| event.verify_statement(e, pki::statement::verify_allocation_bound)))
            .collect();
        let specs = apply_report(event.c, event.shared, node_id, &bound, &report.released, &report.failed)?;
        for id in rows::finish_unbound(event.c, node_id, report.applied_generation, now_ms())? {
            info!(node_id, reservation_id = %id, applied = report.applied_generation, "reservation: released (never bound; the node applied past its hold)");
            event.c.publish(changed(node_id, &id, ReservationState::Released, ""));
        }
        if !(bound.is_empty() && report.released.is_empty() && report.failed.is_empty()) {
            debug!(
                node_id = %node_id,
                allocations = bound.len(),
                released = report.released.len(),
                failed = report.failed.len(),
                "reservation: allocation reports applied"
            );
        }
        Ok(Effects { specs, ..Effects::default() })
    }
}

/// Applies a status report's allocation reports inside the event's
/// transaction; returns the specs to send once committed (holds withdrawn
/// after a failure); what changed is published once committed.
fn apply_report(
    c: &Tx<'_>,
    shared: &Shared,
    node_id: &str,
    bound: &[Bound],
    released: &[proto::AllocationReleased],
    failed: &[proto::AllocationFailed],
) -> Result<Vec<NodeSpecRow>> {
    let now = now_ms();
    let mut specs = Vec::new();
    let of_node =
        |id: &str| -> Result<Option<ReservationRow>> { Ok(rows::get(c, id)?.filter(|r| r.node_id == node_id)) };
    for b in bound {
        let claimed = match &b.result {
            Ok(a) => Some(a.allocation_id.clone()),
            Err(_) => b.claimed_id.clone(),
        };
        let Some(r) = claimed.as_deref().map(of_node).transpose()?.flatten() else {
            warn!(node_id, allocation_id = ?claimed, "reservation: AllocationBound for no reservation of this node");
            continue;
        };
        let verdict = b.result.clone().and_then(|a| {
            let mut got = a.gpu_indexes.clone();
            got.sort_unstable();
            if got != r.gpu_indexes {
                return Err(format!("{ALLOCATION_MISMATCH}: bound {got:?}, held {:?}", r.gpu_indexes));
            }
            if a.generation < r.generation {
                return Err(format!("{ALLOCATION_GENERATION}: bound at {}, held from {}", a.generation, r.generation));
            }
            Ok(a)
        });
        match verdict {
            Ok(a) => {
                // Booked from now by the store's clock, which usage is metered by.
                let booked = store::clock::now_ms(c)?;
                if rows::activate(c, &r.id, a.generation, &a.cdi_devices, &a.cgroup_parent, &b.envelope, booked)? {
                    info!(node_id, reservation_id = %r.id, generation = a.generation, cgroup_parent = %a.cgroup_parent, "reservation: active");
                    c.publish(changed(node_id, &r.id, ReservationState::Active, ""));
                }
            }
            Err(refusal) => {
                warn!(node_id, reservation_id = %r.id, refusal = ?refusal, "reservation: AllocationBound refused");
                rows::refuse(c, &r.id, &refusal)?;
                c.publish(changed(node_id, &r.id, r.state, &refusal));
            }
        }
    }
    for rel in released {
        match of_node(&rel.allocation_id)? {
            Some(r) if rows::finish_release(c, &r.id, now)? => {
                info!(node_id, reservation_id = %r.id, "reservation: released");
                c.publish(changed(node_id, &r.id, ReservationState::Released, ""));
            }
            Some(r) => info!(node_id, reservation_id = %r.id, state = %r.state, "reservation: release report ignored"),
            None => warn!(node_id, allocation_id = ?rel.allocation_id, "reservation: released an unknown allocation"),
        }
    }
    for f in failed {
        let Some(r) = of_node(&f.allocation_id)? else {
            warn!(node_id, allocation_id = ?f.allocation_id, "reservation: failure of an unknown allocation");
            continue;
        };
        let Some(before) = rows::fail(c, &r.id, &f.reason, store::clock::now_ms(c)?)? else { continue };
        warn!(node_id, reservation_id = %r.id, reason = ?f.reason, "reservation: failed");
        c.publish(changed(node_id, &r.id, ReservationState::Failed, &f.reason));
        if matches!(before, ReservationState::Pending | ReservationState::Active) {
            let spec = respec(c, shared, node_id)?;
            rows::set_release_generation(c, &r.id, spec.generation)?;
            specs.push(spec);
        }
    }
    Ok(specs)
}

impl StackView<'_> {
    /// A reservation.
    pub fn reservation(&self, reservation_id: &str) -> Option<ReservationRow> {
        self.read(|c| rows::get(c, reservation_id))
    }

    /// A node's reservations, oldest first.
    pub fn reservations(&self, node_id: &str) -> Vec<ReservationRow> {
        self.read(|c| rows::of_node(c, node_id))
    }

    /// When a reservation ends itself (None: it lasts until released).
    pub fn reservation_end(&self, reservation_id: &str) -> Option<i64> {
        self.read(|c| rows::end_of(c, reservation_id))
    }
}

/// Waits until a reservation is in `state`; fails at once when it ended
/// in another state (`failed`, say, when `active` is awaited), or when
/// no reservation has this id.
pub async fn await_reservation(
    shared: &Shared,
    reservation_id: &str,
    state: ReservationState,
    timeout: Duration,
) -> Result<ReservationRow> {
    let row = shared
        .await_until(format!("reservation {reservation_id} to be {state}"), timeout, |v| {
            let Some(row) = v.reservation(reservation_id) else {
                return Some(Err(Error::UnknownReservation { reservation_id: reservation_id.to_string() }));
            };
            v.note(format_args!("state {}, last refusal {:?}", row.state, row.last_refusal));
            (row.state == state || row.state.is_terminal()).then_some(Ok(row))
        })
        .await??;
    if row.state != state {
        return Err(Error::ReservationEnded { reservation_id: row.id, state: row.state, reason: row.reason });
    }
    Ok(row)
}
