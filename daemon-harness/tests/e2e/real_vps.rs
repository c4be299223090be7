//! The real-guest scenarios (issue 32; docs/harness.md, "Real guests"),
//! over the world of `guests.rs`: one guest from create to delete across
//! a restart of bcd (and cloud-hypervisor, configured, not advertised on a
//! host without its binary or a working KVM); two guests, each with its own metadata only; a pinned
//! huge-page guest and flavors the host cannot honour; a guest ballooned
//! to its floor under memory pressure and back; a guest under a network
//! policy, each flow it allows passing and one it does not stopped, both
//! ways.

use devstack::{InstanceRequest, InstanceState, SectionState, SpecUpdate};

use crate::common::DEADLINE;
use crate::guests::{GuestWorld, must_prove_identity};

#[tokio::test(flavor = "multi_thread")]
async fn a_real_guest_boots_from_its_overlay_proves_itself_and_outlives_a_restart_of_bcd() {
    let scenario = "a_real_guest_boots_from_its_overlay_proves_itself_and_outlives_a_restart_of_bcd";
    let Some(mut world) = GuestWorld::start(scenario).await else { return };
    // cloud-hypervisor is configured too, but without its binary or a
    // working KVM (TCG here) the host does not advertise it: the stack
    // places nothing there and says which label is missing.
    if world.accel == "tcg" {
        let labels = world.env.stack.node_labels(&world.node_id).unwrap();
        let drivers: Vec<&str> =
            labels.iter().map(|l| l.label.as_str()).filter(|l| l.starts_with("bc.dev/driver.")).collect();
        assert_eq!(drivers, ["bc.dev/driver.libvirt-kvm"], "{labels:?}");
        let ch = devstack::InstanceRequest { runtime: "cloud-hypervisor".into(), ..world.request(256, b"") };
        let ch = world.env.stack.create_instance(&world.pool, ch).await.unwrap();
        let row = world.env.stack.instance(&ch).unwrap().unwrap();
        assert_eq!(row.state, InstanceState::Unschedulable);
        assert!(row.reason.contains("lack the label bc.dev/driver.cloud-hypervisor"), "{row:?}");
        world.env.stack.delete_instance(&ch).await.unwrap();
    }
    let user_data = b"#cloud-config\nchpasswd: {list: 'root:r3al-gu3st-s3cret'}\n";
    let secret = world.env.stack.put_secret(user_data).await.unwrap();
    let req =
        devstack::InstanceRequest { user_data: Vec::new(), user_data_secret: Some(secret), ..world.request(256, b"") };
    let id = world.env.stack.create_instance(&world.pool, req).await.unwrap();
    world.env.stack.await_instance_state(&id, InstanceState::Running, DEADLINE).await.expect("it runs");
    let console = world.await_console(&id, "ready", |c| c.ready()).await;
    let token = must_prove_identity(&world, &console, &id, user_data);
    assert!(
        world.install.overlay(&id).is_file() && world.install.seed_disk(&id).is_file(),
        "its overlay and seed disk"
    );
    world.assert_base_unchanged();
    let domain = format!("bcd-{id}");
    assert_eq!(world.host.domains().unwrap(), std::slice::from_ref(&domain));
    let domid = world.host.virsh(&["domid", &domain]).unwrap();
    assert_eq!(world.taps().len(), 1, "one tap");

    // bcd restarts while the guest runs: libvirt holds it; bcd finds it
    // running and defines nothing again.
    let before = world.env.stack.await_session(&world.node_id, 1, DEADLINE).await.unwrap();
    world.node.stop().await;
    world.node.start().unwrap();
    world.env.stack.await_session(&world.node_id, before.epoch + 1, DEADLINE).await.unwrap();
    world
        .env
        .stack
        .await_until("the restarted bcd to report its instance", DEADLINE, |v| {
            v.section_status(&world.node_id, "instances").filter(|s| s.is(SectionState::Applied, "Applied"))
        })
        .await
        .unwrap();
    assert_eq!(world.host.virsh(&["domid", &domain]).unwrap(), domid, "the same QEMU runs");
    assert_eq!(world.host.domains().unwrap(), std::slice::from_ref(&domain), "no second domain");
    assert_eq!(world.defines(), 1, "defined once");
    assert_eq!(world.env.stack.instance(&id).unwrap().unwrap().state, InstanceState::Running);

    world.env.stack.delete_instance(&id).await.unwrap();
    world
        .env
        .stack
        .await_instance_state(&id, InstanceState::Deleted, DEADLINE)
        .await
        .expect("its host confirms it gone");
    assert!(world.host.domains().unwrap().is_empty(), "the domain is undefined");
    for path in [world.install.overlay(&id), world.install.seed_disk(&id), world.install.console_log(&id)] {
        assert!(!path.exists(), "{} remains", path.display());
    }
    assert!(world.taps().is_empty(), "its tap remains: {:?}", world.taps());
    world.assert_base_unchanged();
    world.node.assert_never_printed("r3al-gu3st-s3cret", "the secret user data");
    world.node.assert_never_printed(&token, "the workload token");
    world.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn two_real_guests_each_get_their_own_metadata_and_nothing_of_the_other() {
    let scenario = "two_real_guests_each_get_their_own_metadata_and_nothing_of_the_other";
    let Some(world) = GuestWorld::start(scenario).await else { return };
    let b_data = b"#cloud-config\nhostname: bee\n";
    let b = world.env.stack.create_instance(&world.pool, world.request(256, b_data)).await.unwrap();
    world.env.stack.await_instance_state(&b, InstanceState::Running, DEADLINE).await.expect("b runs");
    // a's user data is a script that asks the metadata endpoint as b, from
    // b's address and MAC (so a bridge that learned b's MAC on a's port
    // would hand it b's answer): its tap lets nothing of that through.
    let (b_addr, b_mac) = (world.address_of(&b), world.mac_of(&b));
    let a_data = format!(
        "#!/bin/sh\nnic=$(ls /sys/class/net | grep -v '^lo$' | head -n 1)\nown=$(ip -4 -o addr show dev $nic | awk '{{print $4}}')\n\
         mac=$(cat /sys/class/net/$nic/address)\nip addr flush dev $nic\nip link set $nic down\nip link set $nic address {b_mac}\n\
         ip link set $nic up\nip addr add {b_addr}/16 dev $nic\n\
         if timeout 4 wget -q -O /tmp/spoof http://169.254.169.254/nocloud/meta-data; then echo \"spoof answered: $(cat /tmp/spoof)\"; else echo 'spoof refused'; fi\n\
         ip addr flush dev $nic\nip link set $nic down\nip link set $nic address $mac\nip link set $nic up\nip addr add $own dev $nic\n"
    );
    let a = world.env.stack.create_instance(&world.pool, world.request(256, a_data.as_bytes())).await.unwrap();
    world.env.stack.await_instance_state(&a, InstanceState::Running, DEADLINE).await.expect("a runs");
    let a_console = world
        .await_console(&a, "its spoof's outcome", |c| c.lines.iter().any(|l| l.starts_with("user-data: spoof")))
        .await;
    let b_console = world.await_console(&b, "ready", |c| c.ready()).await;
    let a_token = must_prove_identity(&world, &a_console, &a, a_data.as_bytes());
    let b_token = must_prove_identity(&world, &b_console, &b, b_data);
    assert_ne!(a_token, b_token);
    assert!(a_console.lines.iter().any(|l| l == "user-data: spoof refused"), "a was answered as b: {a_console:?}");
    assert!(!b_console.lines.iter().any(|l| l.contains(&a)), "b heard of a: {b_console:?}");
    assert_eq!(world.host.domains().unwrap().len(), 2);
    for id in [&a, &b] {
        world.env.stack.delete_instance(id).await.unwrap();
    }
    for id in [&a, &b] {
        world.env.stack.await_instance_state(id, InstanceState::Deleted, DEADLINE).await.unwrap();
    }
    assert!(world.host.domains().unwrap().is_empty() && world.taps().is_empty());
    world.assert_base_unchanged();
    world.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pinned_huge_page_guest_is_placed_and_backed_and_what_the_host_cannot_honour_is_refused() {
    let scenario = "a_pinned_huge_page_guest_is_placed_and_backed_and_what_the_host_cannot_honour_is_refused";
    if !GuestWorld::available(scenario) {
        return;
    }
    // The operator reserves 2 MiB pages before bcd starts (machine-wide:
    // the kernel's count is not namespaced; set back when the guard goes).
    let _pages = HugePages::reserve(128).expect("128 huge pages of 2 MiB are reserved");
    let Some(world) = GuestWorld::start(scenario).await else { return };
    let req =
        devstack::InstanceRequest { hugepage_bytes: 2 << 20, pin_cpus: true, ..world.request(256, b"#cloud-config\n") };
    let free = HugePages::free();
    let id = world.env.stack.create_instance(&world.pool, req).await.unwrap();
    let row = world.env.stack.await_instance_state(&id, InstanceState::Running, DEADLINE).await.expect("it runs");
    world.await_console(&id, "ready", |c| c.ready()).await;
    assert_eq!(free - HugePages::free(), 128, "HugePages_Free drops by the guest's 128 pages");
    let cpus = row.spec.cpus.clone().expect("placement pinned it");
    let live = world.host.virsh(&["dumpxml", &format!("bcd-{id}")]).unwrap();
    for want in [
        format!("<vcpupin vcpu='0' cpuset='{}'/>", cpus.host_cpus[0]),
        format!("<memory mode='strict' nodeset='{}'/>", cpus.numa_node),
        "<page size='2048' unit='KiB'/>".to_string(),
        "<memballoon model='none'/>".to_string(),
    ] {
        assert!(live.contains(&want), "the live XML lacks {want}:\n{live}");
    }
    world.env.stack.delete_instance(&id).await.unwrap();
    world.env.stack.await_instance_state(&id, InstanceState::Deleted, DEADLINE).await.unwrap();
    assert_eq!(HugePages::free(), free, "the pages are free again");

    // What this host cannot honour, named in its spec anyway: 1 GiB pages
    // (it reserved none: the helper refuses) and a GPU (it has none).
    let flavor = |name: &str| proto::InstanceSpec {
        id: name.into(),
        runtime: "libvirt-kvm".into(),
        vcpus: 1,
        memory_bytes: 1 << 30,
        state: "running".into(),
        ..Default::default()
    };
    let section = proto::InstancesSection {
        instances: vec![
            proto::InstanceSpec { hugepage_bytes: 1 << 30, ..flavor("inst-gib-pages") },
            proto::InstanceSpec { gpu_indexes: vec![0], ..flavor("inst-gpu") },
        ],
        volumes: vec![],
    };
    world
        .env
        .stack
        .publish_spec(&world.node_id, SpecUpdate { instances: Some(section), ..SpecUpdate::default() })
        .await
        .unwrap();
    let failed = world
        .env
        .stack
        .await_until("instances FAILED InstanceFailed", DEADLINE, |v| {
            v.section_status(&world.node_id, "instances").filter(|s| s.is(SectionState::Failed, "InstanceFailed"))
        })
        .await
        .unwrap();
    for want in [
        "PlanUnsupported: instance-plan: huge pages of 1048576 KiB: this host reserved none",
        "PlanUnsupported: instance inst-gpu: GPU 0: this host has no GPU 0 to pass through",
    ] {
        assert!(failed.message.contains(want), "{want} not in {failed:?}");
    }
    assert!(world.host.domains().unwrap().is_empty(), "a refused flavor has no domain");
    world.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_real_guest_is_ballooned_to_its_floor_under_pressure_and_deflated_after() {
    let scenario = "a_real_guest_is_ballooned_to_its_floor_under_pressure_and_deflated_after";
    let Some(world) = GuestWorld::start(scenario).await else { return };
    world.host.set_memory_pressure(0.0).unwrap();
    let req = devstack::InstanceRequest { memory_floor_bytes: 256 << 20, ..world.request(512, b"#cloud-config\n") };
    let id = world.env.stack.create_instance(&world.pool, req).await.unwrap();
    world.env.stack.await_instance_state(&id, InstanceState::Running, DEADLINE).await.expect("it runs");
    let full = world
        .await_console(&id, "its MemTotal", |c| c.ready() && c.memtotal_kb().is_some())
        .await
        .memtotal_kb()
        .unwrap();
    // The host is pressed: bcd reads /proc/pressure/memory and sets the
    // guest's memory to its floor through its balloon; the guest sees it.
    world.host.set_memory_pressure(80.0).unwrap();
    let small = world
        .await_console(&id, "a MemTotal 256 MiB smaller", |c| {
            c.memtotal_kb().is_some_and(|m| m + 256 * 1024 <= full + 1024)
        })
        .await;
    let current = |v: &devstack::StackView<'_>| v.instance(&id).and_then(|r| r.current_memory_bytes);
    world
        .env
        .stack
        .await_until("current memory at the floor", DEADLINE, |v| (current(v) == Some(256 << 20)).then_some(()))
        .await
        .unwrap();
    // The pressure is gone: the balloon deflates.
    world.host.set_memory_pressure(5.0).unwrap();
    world.await_console(&id, "its MemTotal back", |c| c.memtotal_kb() == Some(full)).await;
    world
        .env
        .stack
        .await_until("current memory back", DEADLINE, |v| (current(v) == Some(512 << 20)).then_some(()))
        .await
        .unwrap();
    eprintln!("{scenario}: MemTotal {full} kB, ballooned {} kB, back {full} kB", small.memtotal_kb().unwrap());
    world.env.stack.delete_instance(&id).await.unwrap();
    world.env.stack.await_instance_state(&id, InstanceState::Deleted, DEADLINE).await.unwrap();
    world.stop().await;
}

/// Huge pages of 2 MiB reserved machine-wide for a scenario, set back to
/// what they were when dropped.
struct HugePages {
    before: u64,
}

const NR_HUGEPAGES: &str = "/proc/sys/vm/nr_hugepages";

impl HugePages {
    /// Raises the count by `pages`; when memory is too fragmented for
    /// them (a busy machine), compacts it and asks again, for 10 s at most.
    fn reserve(pages: u64) -> anyhow::Result<HugePages> {
        let read = || -> anyhow::Result<u64> { Ok(std::fs::read_to_string(NR_HUGEPAGES)?.trim().parse()?) };
        let before = read()?;
        let guard = HugePages { before };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            std::fs::write(NR_HUGEPAGES, (before + pages).to_string())?;
            let now = read()?;
            if now == before + pages {
                return Ok(guard);
            }
            anyhow::ensure!(
                std::time::Instant::now() < deadline,
                "the kernel reserved {now} pages, not {}, memory compacted",
                before + pages
            );
            std::fs::write("/proc/sys/vm/compact_memory", "1")?;
        }
    }

    /// HugePages_Free of /proc/meminfo.
    fn free() -> u64 {
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
        let line = meminfo.lines().find(|l| l.starts_with("HugePages_Free:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }
}

impl Drop for HugePages {
    fn drop(&mut self) {
        let _ = std::fs::write(NR_HUGEPAGES, self.before.to_string());
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_real_guest_under_a_network_policy_passes_only_the_flows_it_allows_and_their_replies() {
    let scenario = "a_real_guest_under_a_network_policy_passes_only_the_flows_it_allows_and_their_replies";
    let Some(world) = GuestWorld::start(scenario).await else { return };
    let labels = world.env.stack.node_labels(&world.node_id).unwrap();
    assert!(
        labels.iter().any(|l| l.label == "bc.dev/cap.instance.network-policy"),
        "a VPS host advertises it: {labels:?}"
    );
    // The host listens on 8001 and 8002 (on every address, so the metadata
    // address too); the guest may open 8001 only, and a peer of the
    // instance network may open the guest's 7001 only. Both ends of each
    // blocked flow listen: what stops it is the policy.
    let mut listeners: Vec<std::process::Child> = ["8001", "8002"]
        .into_iter()
        .map(|port| {
            let answer = format!("host-{port}");
            world
                .host
                .command("busybox", &["nc", "-ll", "-p", port, "-e", "/bin/busybox", "echo", &answer])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    // Nothing to await from the kernel: a short poll with a deadline.
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let ss = world.host.run("ss", &["-ltn"]).unwrap_or_default();
        if ss.contains(":8001 ") && ss.contains(":8002 ") {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the host's listeners:\n{ss}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let rule = |protocol: &str, cidr: &str, port: u32| proto::NetworkRule {
        protocol: protocol.into(),
        cidr: cidr.into(),
        port_min: port,
        port_max: port,
    };
    let policy = proto::NetworkPolicy {
        ingress: vec![rule("tcp", "169.254.0.0/16", 7001)],
        egress: vec![rule("tcp", "169.254.169.254/32", 8001)],
    };
    let script = "#!/bin/sh\n\
        for p in 7001 7002; do nc -ll -p $p -e /bin/busybox echo guest-$p >/dev/null 2>&1 & done\n\
        for p in 8001 8002; do\n\
          out=$(timeout 5 nc 169.254.169.254 $p </dev/null)\n\
          if [ -n \"$out\" ]; then echo \"egress $p $out\"; else echo \"egress $p blocked\"; fi\n\
        done\n\
        echo listening\n";
    let req = InstanceRequest { network_policy: Some(policy), ..world.request(256, script.as_bytes()) };
    let id = world.env.stack.create_instance(&world.pool, req).await.unwrap();
    world.env.stack.await_instance_state(&id, InstanceState::Running, DEADLINE).await.expect("it runs");
    let console =
        world.await_console(&id, "its flows tried", |c| c.lines.iter().any(|l| l == "user-data: listening")).await;
    // Its metadata still comes (the policy always passes it).
    must_prove_identity(&world, &console, &id, script.as_bytes());
    let said = |line: &str| console.lines.iter().any(|l| l == line);
    assert!(said("user-data: egress 8001 host-8001"), "the allowed flow and its reply: {console:?}");
    assert!(said("user-data: egress 8002 blocked"), "the flow no rule allows: {console:?}\n{}", world.network_state());
    let addr = world.address_of(&id);
    let dial = |port: &str| {
        let out = world
            .host
            .command("timeout", &["5", "busybox", "nc", &addr, port])
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    assert_eq!(dial("7001"), "guest-7001", "a peer opens what the ingress rule allows:\n{}", world.network_state());
    assert_eq!(dial("7002"), "", "and nothing else");

    // The rules are the tap's, in its guard table; they go with the instance.
    let tap = world.taps().pop().expect("its tap");
    let table = world.host.run("nft", &["list", "table", "bridge", &format!("bcd_{tap}")]).unwrap();
    assert!(table.contains("chain ingress") && table.contains("hook output"), "{table}");
    world.env.stack.delete_instance(&id).await.unwrap();
    world.env.stack.await_instance_state(&id, InstanceState::Deleted, DEADLINE).await.unwrap();
    assert!(world.taps().is_empty(), "its tap remains");
    assert!(!world.host.run("nft", &["list", "tables"]).unwrap().contains("bcd_"), "its guard table remains");
    for l in &mut listeners {
        let _ = l.kill();
        let _ = l.wait();
    }
    world.stop().await;
}
