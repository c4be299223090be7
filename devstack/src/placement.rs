//! Placement (docs/devstack.md, "Instances"): which host of a pool gets an
//! instance. The hosts of the pool go through a pipeline of filters, each
//! admitting a host or saying why not (pool kind, pool membership,
//! adoption, a pinned host, the runtime's label `bc.dev/driver.<runtime>`,
//! the instance's volumes, room for its vCPUs and memory); the hosts left
//! are scored (the most room left after placing, so instances spread) and
//! the best is chosen, ties going to the host that joined first, so the
//! choice is deterministic. A request no host passes is unschedulable, with
//! a reason naming what each filter refused (the missing label, say).
//!
//! Later filters and scores (NUMA-affine vCPUs, huge pages, GPUs) are one
//! more entry in [`FILTERS`] or one more term of [`score`].

use prost::Message as _;
use rusqlite::Connection;

use crate::error::Result;
use crate::pools::KIND_VPS_HOST;
use crate::store::instance_rows::NodeLabelRow;
use crate::store::labels::DRIVER_PREFIX;
use crate::store::rows::{NodeRow, NodeState, PoolRow};
use crate::store::{instances, inventory, labels, nodes, volumes};

/// vCPUs and memory.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Room {
    /// vCPUs (a core each).
    pub vcpus: u64,
    /// Bytes of memory.
    pub memory_bytes: u64,
}

/// What is asked of placement.
#[derive(Clone, Debug)]
pub struct Request<'a> {
    /// The instance's pool.
    pub pool: &'a PoolRow,
    /// Its runtime.
    pub runtime: &'a str,
    /// What it needs.
    pub need: Room,
    /// The volumes it attaches (they are on one host).
    pub volumes: Vec<String>,
    /// The host it is pinned to: the room filter is left to that host's
    /// own admission.
    pub pinned: Option<&'a str>,
}

/// A host as placement sees it.
#[derive(Clone, Debug)]
pub struct Host {
    /// The node.
    pub node: NodeRow,
    /// Its labels.
    pub labels: Vec<NodeLabelRow>,
    /// What its inventory says it has (None without a readable one).
    pub capacity: Option<Room>,
    /// What the instances placed on it book.
    pub booked: Room,
    /// Its volumes (not deleted).
    pub volumes: Vec<String>,
}

impl Host {
    /// What is left once `need` is placed (negative: it does not fit).
    fn left(&self, need: Room) -> (i128, i128) {
        let cap = self.capacity.unwrap_or_default();
        (
            cap.vcpus as i128 - self.booked.vcpus as i128 - need.vcpus as i128,
            cap.memory_bytes as i128 - self.booked.memory_bytes as i128 - need.memory_bytes as i128,
        )
    }
}

/// One step of the pipeline.
pub trait Filter: Sync {
    /// Its name in an unschedulable reason.
    fn name(&self) -> &'static str;
    /// Why the host cannot take the request, or None.
    fn refuses(&self, request: &Request<'_>, host: &Host) -> Option<String>;
}

struct PoolKind;
impl Filter for PoolKind {
    fn name(&self) -> &'static str {
        "pool kind"
    }
    fn refuses(&self, request: &Request<'_>, _: &Host) -> Option<String> {
        (request.pool.kind != KIND_VPS_HOST)
            .then(|| format!("the pool is a {} pool, not a vps-host pool", request.pool.kind))
    }
}

struct Adopted;
impl Filter for Adopted {
    fn name(&self) -> &'static str {
        "adopted"
    }
    fn refuses(&self, _: &Request<'_>, host: &Host) -> Option<String> {
        (host.node.state != NodeState::Adopted).then(|| "not adopted".to_string())
    }
}

struct Pinned;
impl Filter for Pinned {
    fn name(&self) -> &'static str {
        "pinned"
    }
    fn refuses(&self, request: &Request<'_>, host: &Host) -> Option<String> {
        request.pinned.filter(|p| *p != host.node.id).map(|p| format!("not the pinned host {p}"))
    }
}

struct RuntimeLabel;
impl Filter for RuntimeLabel {
    fn name(&self) -> &'static str {
        "runtime"
    }
    fn refuses(&self, request: &Request<'_>, host: &Host) -> Option<String> {
        let label = format!("{DRIVER_PREFIX}{}", request.runtime);
        (!host.labels.iter().any(|l| l.label == label)).then(|| format!("lack the label {label}"))
    }
}

struct Volumes;
impl Filter for Volumes {
    fn name(&self) -> &'static str {
        "volumes"
    }
    fn refuses(&self, request: &Request<'_>, host: &Host) -> Option<String> {
        let missing: Vec<&str> =
            request.volumes.iter().filter(|v| !host.volumes.contains(v)).map(String::as_str).collect();
        (!missing.is_empty()).then(|| format!("do not hold the volume(s) {}", missing.join(", ")))
    }
}

struct RoomFilter;
impl Filter for RoomFilter {
    fn name(&self) -> &'static str {
        "room"
    }
    fn refuses(&self, request: &Request<'_>, host: &Host) -> Option<String> {
        if request.pinned.is_some() {
            return None;
        }
        let Some(cap) = host.capacity else { return Some("reported no system inventory".into()) };
        let (cpu, mem) = host.left(request.need);
        (cpu < 0 || mem < 0).then(|| {
            format!(
                "lack room for {} vCPUs and {} bytes (have {} of {} vCPUs and {} of {} bytes free)",
                request.need.vcpus,
                request.need.memory_bytes,
                cap.vcpus.saturating_sub(host.booked.vcpus),
                cap.vcpus,
                cap.memory_bytes.saturating_sub(host.booked.memory_bytes),
                cap.memory_bytes
            )
        })
    }
}

/// The filters, in order: a host is refused by the first that refuses it.
pub static FILTERS: &[&dyn Filter] = &[&PoolKind, &Adopted, &Pinned, &RuntimeLabel, &Volumes, &RoomFilter];

/// A host's score: the room left after placing (vCPUs, then memory), higher
/// is better.
pub fn score(request: &Request<'_>, host: &Host) -> (i128, i128) {
    host.left(request.need)
}

/// Chooses a host, or says why none passes (without the code).
pub fn choose(request: &Request<'_>, hosts: &[Host]) -> std::result::Result<String, String> {
    let mut refused: Vec<(&'static str, String, usize)> = Vec::new();
    let mut best: Option<(&Host, (i128, i128))> = None;
    for host in hosts {
        match FILTERS.iter().find_map(|f| f.refuses(request, host).map(|why| (f.name(), why))) {
            Some((name, why)) => match refused.iter_mut().find(|(n, w, _)| *n == name && *w == why) {
                Some(entry) => entry.2 += 1,
                None => refused.push((name, why, 1)),
            },
            None => {
                let s = score(request, host);
                // Hosts come in join order: a tie keeps the first.
                if best.is_none_or(|(_, b)| s > b) {
                    best = Some((host, s));
                }
            }
        }
    }
    if let Some((host, _)) = best {
        return Ok(host.node.id.clone());
    }
    if hosts.is_empty() {
        return Err(format!("pool {:?} has no host", request.pool.name));
    }
    let why: Vec<String> = refused.iter().map(|(name, why, n)| format!("{name}: {n} host(s) {why}")).collect();
    Err(format!("no host of pool {:?} can take it: {}", request.pool.name, why.join("; ")))
}

/// The hosts of a pool, in join order, with what placement needs of them.
pub fn hosts(c: &Connection, pool_id: &str) -> Result<Vec<Host>> {
    let mut out = Vec::new();
    for node in nodes::of_pool(c, pool_id)? {
        let capacity = inventory::of_node(c, &node.id)?
            .into_iter()
            .find(|s| s.name == "system")
            .and_then(|s| proto::SystemInventory::decode(s.content.as_slice()).ok())
            .map(|s| Room { vcpus: s.cpu_cores as u64, memory_bytes: s.memory_bytes });
        let mut booked = Room::default();
        for i in instances::on_node(c, &node.id)? {
            booked.vcpus += i.spec.vcpus as u64;
            booked.memory_bytes += i.spec.memory_bytes;
        }
        let volumes = volumes::on_node(c, &node.id)?.into_iter().filter(|v| !v.deleting).map(|v| v.id).collect();
        let labels = labels::of_node(c, &node.id)?;
        out.push(Host { node, labels, capacity, booked, volumes });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(kind: &str) -> PoolRow {
        PoolRow {
            id: "pool_1".into(),
            name: "vps".into(),
            gpu_model: None,
            expect_gpu_count: None,
            acceptance: "none".into(),
            created_at_ms: 0,
            kind: kind.into(),
        }
    }

    fn host(id: &str, seq: i64, runtime: &str, vcpus: u64, booked: u64) -> Host {
        Host {
            node: NodeRow {
                seq,
                id: id.into(),
                pool_id: "pool_1".into(),
                state: NodeState::Adopted,
                reason: String::new(),
                hostname: String::new(),
                daemon_version: String::new(),
                hardware_id: String::new(),
                acceptance_command_id: None,
                applied_generation: 1,
                spec_generation: 1,
                created_at_ms: 0,
                adopted_at_ms: None,
            },
            labels: vec![NodeLabelRow {
                node_id: id.into(),
                label: format!("{DRIVER_PREFIX}{runtime}"),
                value: "1".into(),
            }],
            capacity: Some(Room { vcpus, memory_bytes: 64 << 30 }),
            booked: Room { vcpus: booked, memory_bytes: booked << 30 },
            volumes: vec![],
        }
    }

    fn request<'a>(pool: &'a PoolRow, runtime: &'a str, vcpus: u64) -> Request<'a> {
        Request { pool, runtime, need: Room { vcpus, memory_bytes: vcpus << 30 }, volumes: vec![], pinned: None }
    }

    #[test]
    fn the_host_with_most_room_left_wins_and_ties_go_to_the_first() {
        let p = pool(KIND_VPS_HOST);
        let hosts = [
            host("a", 1, "libvirt-kvm", 32, 8),
            host("b", 2, "libvirt-kvm", 32, 0),
            host("c", 3, "libvirt-kvm", 32, 0),
        ];
        assert_eq!(choose(&request(&p, "libvirt-kvm", 4), &hosts).unwrap(), "b");
    }

    #[test]
    fn unschedulable_reasons_name_the_label_and_the_room() {
        let p = pool(KIND_VPS_HOST);
        let hosts = [host("a", 1, "libvirt-kvm", 32, 30), host("b", 2, "cloud-hypervisor", 32, 0)];
        let why = choose(&request(&p, "libvirt-kvm", 4), &hosts).unwrap_err();
        assert!(why.contains("runtime: 1 host(s) lack the label bc.dev/driver.libvirt-kvm"), "{why}");
        assert!(why.contains("room: 1 host(s) lack room for 4 vCPUs"), "{why}");
        let why = choose(&request(&p, "firecracker", 1), &hosts).unwrap_err();
        assert!(why.contains("runtime: 2 host(s) lack the label bc.dev/driver.firecracker"), "{why}");
        let gpu = pool("gpu");
        assert!(choose(&request(&gpu, "libvirt-kvm", 1), &hosts).unwrap_err().contains("not a vps-host pool"));
    }

    #[test]
    fn a_pinned_host_skips_the_room_filter_and_volumes_pin_too() {
        let p = pool(KIND_VPS_HOST);
        let mut hosts = vec![host("a", 1, "libvirt-kvm", 32, 30), host("b", 2, "libvirt-kvm", 32, 0)];
        let mut pinned = request(&p, "libvirt-kvm", 8);
        pinned.pinned = Some("a");
        assert_eq!(choose(&pinned, &hosts).unwrap(), "a");
        hosts[0].volumes.push("vol-1".into());
        let mut with_volume = request(&p, "libvirt-kvm", 1);
        with_volume.volumes = vec!["vol-1".into()];
        assert_eq!(choose(&with_volume, &hosts).unwrap(), "a");
    }
}
