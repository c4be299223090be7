//! The `netns` runner: traffic to the gateway crosses the veth pair, the
//! namespace's loopback is its own, and nothing is left behind (after a
//! drop, a panic, or a killed test process).

use std::net::{IpAddr, SocketAddr, TcpListener};
use std::path::Path;
use std::process::Command;

use daemon_harness::netns::{self, NETNS_PREFIX, NetnsRunner, link_exists, netns_exists};
use daemon_harness::prereq;
use daemon_harness::runner::Runner;

use crate::probe;

fn rx_packets(interface: &str) -> u64 {
    let path = Path::new("/sys/class/net").join(interface).join("statistics/rx_packets");
    std::fs::read_to_string(&path).expect("a veth has statistics").trim().parse().expect("a packet count")
}

#[tokio::test]
async fn traffic_reaches_the_gateway_through_the_veth_and_loopback_is_isolated() {
    if !prereq::require_netns("netns runner traffic") {
        return;
    }
    let runner = NetnsRunner::new().unwrap();
    let ns = runner.netns();
    let gateway: IpAddr = runner.gateway_host().parse().unwrap();
    assert_eq!(gateway, IpAddr::V4(ns.host_addr()));

    // The namespace's default route goes via the host side of the veth.
    let out = runner.command(Path::new("ip"), &["route".into(), "show".into(), "default".into()], &[]).output();
    let out = out.await.unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(wsl::parse_default_route(&String::from_utf8_lossy(&out.stdout)).unwrap(), gateway);

    // A listener bound to the gateway address is reached from inside, and
    // the connection comes from the namespace side of the veth.
    let (target, server) = probe::serve_once(gateway);
    let rx_before = rx_packets(ns.host_interface());
    let result = probe::run(&runner, target, "hello-from-inside").await.unwrap();
    let (peer, message) = server.join().unwrap();
    assert_eq!(peer.ip(), IpAddr::V4(ns.ns_addr()), "the connection comes from the namespace side");
    assert_eq!(message, "hello-from-inside");
    assert_eq!(result, format!("connected {peer} welcome"));
    assert!(rx_packets(ns.host_interface()) > rx_before, "the packets crossed {}", ns.host_interface());

    // The host's loopback is out of reach: 127.0.0.1 inside is the
    // namespace's own, and a listener bound to the host's 127.0.0.1 is not
    // reached through the gateway address either (bind to the gateway).
    let loopback = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = loopback.local_addr().unwrap().port();
    let inside_loopback = SocketAddr::from(([127, 0, 0, 1], port));
    assert_eq!(probe::run(&runner, inside_loopback, "x").await.unwrap(), "refused");
    assert_eq!(probe::run(&runner, SocketAddr::new(gateway, port), "x").await.unwrap(), "refused");
    loopback.set_nonblocking(true).unwrap();
    assert_eq!(loopback.accept().unwrap_err().kind(), std::io::ErrorKind::WouldBlock, "no connection reached it");

    // Inside, there are only the namespace's loopback (up) and its veth end.
    let args = ["-o", "-4", "addr", "show"].map(Into::into);
    let out = runner.command(Path::new("ip"), &args, &[]).output().await.unwrap();
    let addresses: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|line| line.split_whitespace().skip(1).take(3).collect::<Vec<_>>().join(" "))
        .collect();
    assert_eq!(addresses, ["lo inet 127.0.0.1/8".to_string(), format!("eth0 inet {}/30", ns.ns_addr())]);
}

#[test]
fn dropping_the_runner_removes_namespace_and_veth() {
    if !prereq::require_netns("netns runner cleanup") {
        return;
    }
    let runner = NetnsRunner::new().unwrap();
    let name = runner.netns().name().to_string();
    let veth = runner.netns().host_interface().to_string();
    assert!(name.starts_with(&format!("{NETNS_PREFIX}-{}-", std::process::id())), "{name}");
    assert!(netns_exists(&name) && link_exists(&veth));
    drop(runner);
    assert!(!netns_exists(&name), "namespace {name} is left");
    assert!(!link_exists(&veth), "veth {veth} is left");
}

#[test]
fn a_panicking_test_leaves_nothing_behind() {
    if !prereq::require_netns("netns runner cleanup on panic") {
        return;
    }
    let names = std::sync::Mutex::new(None);
    let sleeper = std::sync::Mutex::new(None);
    let outcome = std::panic::catch_unwind(|| {
        let runner = NetnsRunner::new().unwrap();
        *names.lock().unwrap() = Some((runner.netns().name().to_string(), runner.netns().host_interface().to_string()));
        // A process still running inside is killed by the cleanup too: once
        // it is inside (`ip netns pids` lists it), the panic.
        let child = runner.netns().command("sleep".as_ref(), &["600".into()]).spawn().unwrap();
        let pid = child.id() as i32;
        *sleeper.lock().unwrap() = Some(child);
        let name = runner.netns().name().to_string();
        await_condition("the sleeper inside the namespace", || netns::pids_in(&name).contains(&pid));
        panic!("a deliberate panic, to test the cleanup");
    });
    assert!(outcome.is_err());
    let mut sleeper = sleeper.into_inner().unwrap().expect("the sleeper was started");
    let mut status = None;
    await_condition("the sleeper's end", || {
        status = sleeper.try_wait().unwrap();
        status.is_some()
    });
    let _ = sleeper.kill();
    let status = status.unwrap();
    assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(libc::SIGKILL), "killed by the cleanup");
    let (name, veth) = names.into_inner().unwrap().expect("the runner was created");
    assert!(!netns_exists(&name), "namespace {name} is left");
    assert!(!link_exists(&veth), "veth {veth} is left");
}

#[test]
fn namespaces_of_dead_test_processes_are_reaped() {
    if !prereq::require_netns("netns runner reaping") {
        return;
    }
    // A pid that no longer exists: a child that has exited and been waited for.
    let mut child = Command::new("true").spawn().unwrap();
    let dead_pid = child.id();
    child.wait().unwrap();
    let name = format!("{NETNS_PREFIX}-{dead_pid}-0");
    let veth = format!("bcdvs{dead_pid}");
    let ip =
        |args: &[&str]| assert!(Command::new(netns::ip_program()).args(args).status().unwrap().success(), "{args:?}");
    {
        // Built whole before any reaper of a test running beside this one
        // sees it.
        let _hold = netns::hold_reaping();
        ip(&["netns", "add", &name]);
        ip(&["link", "add", &veth, "type", "veth", "peer", "name", "eth0", "netns", &name]);
        ip(&["-n", &name, "link", "set", "eth0", "alias", &veth]);
    }

    netns::reap_stale();

    let veth_left = link_exists(&veth);
    if veth_left {
        let _ = Command::new(netns::ip_program()).args(["link", "delete", &veth]).status();
    }
    assert!(!netns_exists(&name), "stale namespace {name} is left");
    assert!(!veth_left, "veth {veth} outlived its namespace");
}

/// Polls `done` until it holds, for at most 10 s (then fails, naming `what`).
fn await_condition(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !done() {
        assert!(std::time::Instant::now() < deadline, "{what}: not within 10 s");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}
