//! Placement (docs/devstack.md, "Instances"): which host of a pool gets an
//! instance. The hosts of the pool go through a pipeline of filters, each
//! admitting a host or saying why not (pool kind, pool membership,
//! adoption, a cordon, a pinned host, the runtime's label
//! `bc.dev/driver.<runtime>`, the capabilities it needs, the instance's
//! volumes, room for its vCPUs and memory); the hosts left
//! are scored (the most room left after placing, so instances spread) and
//! the best is chosen, ties going to the host that joined first, so the
//! choice is deterministic. A request no host passes is unschedulable, with
//! a reason naming what each filter refused (the missing label, say).
//!
//! Pinned vCPUs need a NUMA node with that many CPUs off the pool policy's
//! reserved ones and off those pinned already (the numa filter), huge pages
//! are booked against what the host's inventory reports reserved (the room
//! filter), and the policy's reserved CPUs and overcommit shape a host's
//! room. Later filters and scores (GPUs) are one more entry in [`FILTERS`]
//! or one more term of [`score`].

use crate::store::Db;
use prost::Message as _;

use crate::error::Result;
use crate::policy::PoolPolicy;
use crate::pools::KIND_VPS_HOST;
use crate::store::labels::{CAPABILITY_PREFIX, DRIVER_PREFIX};
use crate::store::rows::NodeLabelRow;
use crate::store::rows::{NodeRow, NodeState, PoolRow};
use crate::store::{cordons, instances, inventory, labels, nodes, pools, volumes};

/// vCPUs, memory and huge pages.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Room {
    /// vCPUs (a core each).
    pub vcpus: u64,
    /// Bytes of memory.
    pub memory_bytes: u64,
    /// 2 MiB huge pages (what the host units reserved, per the inventory).
    pub hugepages_2mi: u64,
    /// 1 GiB huge pages.
    pub hugepages_1gi: u64,
}

impl Room {
    /// The huge pages `bytes` of memory backed by pages of `page` bytes
    /// take (2 MiB or 1 GiB; anything else takes none).
    pub fn with_hugepages(mut self, page: u64, bytes: u64) -> Self {
        match page {
            p if p == 2 << 20 => self.hugepages_2mi = bytes.div_ceil(p),
            p if p == 1 << 30 => self.hugepages_1gi = bytes.div_ceil(p),
            _ => {}
        }
        self
    }
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
    /// Pin its vCPUs on one NUMA node of the host, off the reserved CPUs.
    pub pin_cpus: bool,
    /// The capabilities the host must advertise (`bc.dev/cap.<name>`:
    /// `instance.network-policy` for an instance with a network policy).
    pub capabilities: Vec<&'static str>,
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
    /// Its NUMA nodes (from the inventory).
    pub numa: Vec<proto::NumaNode>,
    /// The CPUs its pool policy reserves for the host itself.
    pub reserved_cpus: Vec<u32>,
    /// The host CPUs the instances placed on it pinned.
    pub pinned_cpus: Vec<u32>,
    /// The huge pages (2 MiB, 1 GiB) the pinned instances placed on it
    /// take from each NUMA node (a strict numatune takes them there), by
    /// node id.
    pub pinned_pages: std::collections::BTreeMap<u32, (u64, u64)>,
    /// The huge pages (2 MiB, 1 GiB) its floating (unpinned) instances
    /// take: the kernel may take them from any NUMA node.
    pub floating_pages: (u64, u64),
    /// Why it is cordoned, when it is (it takes no new instance).
    pub cordoned: Option<String>,
}

impl Host {
    /// Where pinned vCPUs go: the first NUMA node with as many CPUs
    /// neither reserved nor pinned as `need` has vCPUs, and as many free
    /// huge pages of its node as it needs (its memory comes strictly from
    /// there), its lowest such CPUs. A node's free pages are its own less
    /// those its pinned instances take and less every page of the host's
    /// floating instances: the kernel may have taken all of those from this
    /// node, and a node's pages are never over-committed whatever it did.
    pub fn pin(&self, need: Room) -> Option<proto::InstanceCpus> {
        let vcpus = need.vcpus;
        self.numa.iter().find_map(|node| {
            let (pinned_2mi, pinned_1gi) = self.pinned_pages.get(&node.id).copied().unwrap_or_default();
            let (used_2mi, used_1gi) = (pinned_2mi + self.floating_pages.0, pinned_1gi + self.floating_pages.1);
            if used_2mi + need.hugepages_2mi > node.hugepages_2mi || used_1gi + need.hugepages_1gi > node.hugepages_1gi
            {
                return None;
            }
            let free: Vec<u32> = node
                .cpus
                .iter()
                .copied()
                .filter(|c| !self.reserved_cpus.contains(c) && !self.pinned_cpus.contains(c))
                .take(vcpus as usize)
                .collect();
            (free.len() as u64 == vcpus).then_some(proto::InstanceCpus { numa_node: node.id, host_cpus: free })
        })
    }
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

struct Schedulable;
impl Filter for Schedulable {
    fn name(&self) -> &'static str {
        "cordoned"
    }
    fn refuses(&self, _: &Request<'_>, host: &Host) -> Option<String> {
        host.cordoned.as_ref().map(|reason| format!("are cordoned ({reason})"))
    }
}

struct Capabilities;
impl Filter for Capabilities {
    fn name(&self) -> &'static str {
        "capabilities"
    }
    fn refuses(&self, request: &Request<'_>, host: &Host) -> Option<String> {
        let missing: Vec<&str> = request
            .capabilities
            .iter()
            .copied()
            .filter(|cap| !host.labels.iter().any(|l| l.label.strip_prefix(CAPABILITY_PREFIX) == Some(cap)))
            .collect();
        (!missing.is_empty()).then(|| format!("do not advertise {}", missing.join(", ")))
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

struct Numa;
impl Filter for Numa {
    fn name(&self) -> &'static str {
        "numa"
    }
    fn refuses(&self, request: &Request<'_>, host: &Host) -> Option<String> {
        (request.pin_cpus && host.pin(request.need).is_none()).then(|| {
            let pages = match (request.need.hugepages_2mi, request.need.hugepages_1gi) {
                (0, 0) => String::new(),
                (p2, 0) => format!(" and {p2} free huge pages of 2Mi"),
                (_, p1) => format!(" and {p1} free huge pages of 1Gi"),
            };
            format!("lack a NUMA node with {} CPUs neither reserved nor pinned{pages}", request.need.vcpus)
        })
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
        for (size, want, have, booked) in [
            ("2Mi", request.need.hugepages_2mi, cap.hugepages_2mi, host.booked.hugepages_2mi),
            ("1Gi", request.need.hugepages_1gi, cap.hugepages_1gi, host.booked.hugepages_1gi),
        ] {
            if want > 0 && booked.saturating_add(want) > have {
                return Some(format!(
                    "lack {want} free huge pages of {size} (have {} of {have} reserved)",
                    have.saturating_sub(booked)
                ));
            }
        }
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
pub static FILTERS: &[&dyn Filter] =
    &[&PoolKind, &Adopted, &Schedulable, &Pinned, &RuntimeLabel, &Capabilities, &Volumes, &Numa, &RoomFilter];

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

/// Scales `n` by an overcommit percentage (0: 100).
fn overcommit(n: u64, percent: u32) -> u64 {
    if percent == 0 { n } else { (n as u128 * percent as u128 / 100) as u64 }
}

/// The hosts of a pool, in join order, with what placement needs of them:
/// its inventory's room (the cores not reserved for the host, and the
/// memory, each scaled by the pool policy's overcommit), the huge pages
/// reserved and the NUMA nodes.
pub fn hosts(c: &Db<'_>, pool_id: &str) -> Result<Vec<Host>> {
    let policy = match pools::get(c, pool_id)? {
        Some(pool) => PoolPolicy::of(&pool)?,
        None => PoolPolicy::default(),
    };
    let mut out = Vec::new();
    for node in nodes::of_pool(c, pool_id)? {
        let system = inventory::of_node(c, &node.id)?
            .into_iter()
            .find(|s| s.name == "system")
            .and_then(|s| proto::SystemInventory::decode(s.content.as_slice()).ok());
        let capacity = system.as_ref().map(|s| Room {
            vcpus: overcommit(
                (s.cpu_cores as u64).saturating_sub(policy.reserved_cpus.len() as u64),
                policy.cpu_overcommit_percent,
            ),
            memory_bytes: overcommit(s.memory_bytes, policy.memory_overcommit_percent),
            hugepages_2mi: s.hugepages_2mi,
            hugepages_1gi: s.hugepages_1gi,
        });
        let mut booked = Room::default();
        let mut pinned_cpus = Vec::new();
        let mut pinned_pages = std::collections::BTreeMap::<u32, (u64, u64)>::new();
        let mut floating_pages = (0, 0);
        for i in instances::on_node(c, &node.id)? {
            pinned_cpus.extend(i.spec.cpus.iter().flat_map(|p| p.host_cpus.iter().copied()));
            let need = Room::default().with_hugepages(i.spec.hugepage_bytes, i.spec.memory_bytes);
            if let Some(pin) = i.spec.cpus.as_ref().filter(|p| !p.host_cpus.is_empty()) {
                let pages = pinned_pages.entry(pin.numa_node).or_default();
                pages.0 += need.hugepages_2mi;
                pages.1 += need.hugepages_1gi;
            } else {
                floating_pages.0 += need.hugepages_2mi;
                floating_pages.1 += need.hugepages_1gi;
            }
            booked.vcpus += i.spec.vcpus as u64;
            booked.memory_bytes += i.spec.memory_bytes;
            booked.hugepages_2mi += need.hugepages_2mi;
            booked.hugepages_1gi += need.hugepages_1gi;
        }
        let volumes = volumes::on_node(c, &node.id)?.into_iter().filter(|v| !v.deleting).map(|v| v.id).collect();
        let labels = labels::of_node(c, &node.id)?;
        let numa = system.map(|s| s.numa).unwrap_or_default();
        let cordoned = cordons::get(c, &node.id)?.map(|c| c.reason);
        out.push(Host {
            node,
            labels,
            capacity,
            booked,
            volumes,
            numa,
            reserved_cpus: policy.reserved_cpus.clone(),
            pinned_cpus,
            pinned_pages,
            floating_pages,
            cordoned,
        });
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
            policy: "{}".into(),
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
                session_epoch: 0,
                gateway_id: String::new(),
                unreachable_since_ms: None,
            },
            labels: vec![NodeLabelRow {
                node_id: id.into(),
                label: format!("{DRIVER_PREFIX}{runtime}"),
                value: "1".into(),
            }],
            capacity: Some(Room { vcpus, memory_bytes: 64 << 30, ..Room::default() }),
            booked: Room { vcpus: booked, memory_bytes: booked << 30, ..Room::default() },
            volumes: vec![],
            numa: vec![
                proto::NumaNode { id: 0, cpus: (0..vcpus as u32 / 2).collect(), ..Default::default() },
                proto::NumaNode { id: 1, cpus: (vcpus as u32 / 2..vcpus as u32).collect(), ..Default::default() },
            ],
            reserved_cpus: vec![],
            pinned_cpus: vec![],
            pinned_pages: Default::default(),
            floating_pages: (0, 0),
            cordoned: None,
        }
    }

    fn request<'a>(pool: &'a PoolRow, runtime: &'a str, vcpus: u64) -> Request<'a> {
        Request {
            pool,
            runtime,
            need: Room { vcpus, memory_bytes: vcpus << 30, ..Room::default() },
            volumes: vec![],
            pinned: None,
            pin_cpus: false,
            capabilities: vec![],
        }
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
    fn a_cordoned_host_and_one_without_a_capability_take_no_instance() {
        let p = pool(KIND_VPS_HOST);
        let mut hosts = vec![host("a", 1, "libvirt-kvm", 32, 0), host("b", 2, "libvirt-kvm", 32, 0)];
        hosts[0].cordoned = Some("disk swap".into());
        assert_eq!(choose(&request(&p, "libvirt-kvm", 4), &hosts).unwrap(), "b");
        let mut policy = request(&p, "libvirt-kvm", 4);
        policy.capabilities = vec!["instance.network-policy"];
        let why = choose(&policy, &hosts).unwrap_err();
        assert!(why.contains("cordoned: 1 host(s) are cordoned (disk swap)"), "{why}");
        assert!(why.contains("capabilities: 1 host(s) do not advertise instance.network-policy"), "{why}");
        hosts[1].labels.push(NodeLabelRow {
            node_id: "b".into(),
            label: format!("{CAPABILITY_PREFIX}instance.network-policy"),
            value: String::new(),
        });
        assert_eq!(choose(&policy, &hosts).unwrap(), "b");
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

    #[test]
    fn huge_pages_are_booked_against_what_the_inventory_reserved() {
        let p = pool(KIND_VPS_HOST);
        let mut a = host("a", 1, "libvirt-kvm", 32, 0);
        a.capacity = Some(Room { hugepages_2mi: 1024, ..a.capacity.unwrap() });
        a.booked.hugepages_2mi = 512;
        let mut req = request(&p, "libvirt-kvm", 1);
        req.need = req.need.with_hugepages(2 << 20, 1 << 30);
        assert_eq!(req.need.hugepages_2mi, 512);
        assert_eq!(choose(&req, std::slice::from_ref(&a)).unwrap(), "a");
        a.booked.hugepages_2mi = 513;
        let why = choose(&req, &[a]).unwrap_err();
        assert!(why.contains("room: 1 host(s) lack 512 free huge pages of 2Mi (have 511 of 1024 reserved)"), "{why}");
    }

    #[test]
    fn pinned_vcpus_stay_on_one_numa_node_off_the_reserved_and_pinned_cpus() {
        let p = pool(KIND_VPS_HOST);
        let mut a = host("a", 1, "libvirt-kvm", 8, 0);
        a.reserved_cpus = vec![0, 1];
        a.pinned_cpus = vec![2];
        // Node 0 has 0-3: only 3 is free; node 1 (4-7) takes 3 vCPUs.
        let vcpus = |vcpus| Room { vcpus, ..Room::default() };
        let pin = a.pin(vcpus(3)).unwrap();
        assert_eq!((pin.numa_node, pin.host_cpus.as_slice()), (1, [4, 5, 6].as_slice()));
        assert_eq!(a.pin(vcpus(1)).unwrap().host_cpus, [3]);
        // Huge pages come from the node: node 0 has none free, node 1 has 100.
        a.numa[0].hugepages_2mi = 10;
        a.numa[1].hugepages_2mi = 100;
        a.pinned_pages.insert(0, (10, 0));
        let paged = Room { vcpus: 1, hugepages_2mi: 50, ..Room::default() };
        assert_eq!(a.pin(paged).unwrap().numa_node, 1);
        assert!(a.pin(Room { hugepages_2mi: 101, ..paged }).is_none());
        // A floating guest's 60 pages may all be on node 1: 40 are left there for sure.
        a.floating_pages = (60, 0);
        assert!(a.pin(paged).is_none(), "node 1 could be over-committed");
        assert_eq!(a.pin(Room { hugepages_2mi: 40, ..paged }).unwrap().numa_node, 1);
        let mut req = request(&p, "libvirt-kvm", 5);
        req.pin_cpus = true;
        let why = choose(&req, &[a]).unwrap_err();
        assert!(why.contains("numa: 1 host(s) lack a NUMA node with 5 CPUs neither reserved nor pinned"), "{why}");
    }
}
