//! The WSL runner, end to end through the runner's own code and the `wsl`
//! crate: discovery, the default route, arguments and environment arriving
//! unchanged, exit statuses. On Linux against the `scripts/wsl.exe` shim
//! (and the shim on its own); on Windows against the real `wsl.exe`, with
//! `BCD_E2E=1`.

use std::ffi::OsString;
use std::path::Path;

use daemon_harness::runner::Runner;
use daemon_harness::wsl_runner::WslRunner;
#[cfg(target_os = "linux")]
use {
    crate::probe,
    daemon_harness::netns::{link_exists, netns_exists},
    daemon_harness::prereq,
    daemon_harness::wsl_runner::{SHIM_NETNS_VAR, shim_path},
    std::net::{IpAddr, SocketAddr},
    std::process::Command,
};

/// Arguments no shell could pass through unchanged.
const TRICKY: &[&str] = &[
    "two words",
    "  padded  ",
    "it's",
    "\"double quoted\"",
    "'single quoted'",
    "$HOME",
    "${PATH}",
    "$(id -u)",
    "`id`",
    "$",
    "*",
    "?[a]",
    "a;b",
    "a|b&&c",
    ">out <in",
    "\\",
    "back\\slash\\\"",
    "line\nbreak",
    "tab\there",
    "",
    "-e",
    "--",
    "-d",
    "%s %d",
    "ünïcödé ✓",
    "--config=C:\\x",
    "--list --quiet",
];

/// What any WSL runner must do, over the shim or the real `wsl.exe`:
/// arguments arrive unchanged, the environment given to the runner arrives
/// unchanged, and the exit status is the program's. Returns the sorted
/// environment the program saw.
async fn arguments_environment_and_status_pass_unchanged(runner: &WslRunner) -> Vec<String> {
    // printf receives the arguments as argv and prints each NUL-terminated.
    let mut args: Vec<OsString> = vec!["%s\\0".into()];
    args.extend(TRICKY.iter().map(OsString::from));
    let out = runner.command(Path::new("/usr/bin/printf"), &args, &[]).output().await.unwrap();
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8(out.stdout).unwrap();
    let received: Vec<&str> = stdout.strip_suffix('\0').unwrap_or(&stdout).split('\0').collect();
    assert_eq!(received, TRICKY);

    let out = runner.command(Path::new("/usr/bin/env"), &[], &ENV.map(|(k, v)| (k.into(), v.into()))).output();
    let out = out.await.unwrap();
    assert!(out.status.success(), "{out:?}");
    let mut lines: Vec<String> = String::from_utf8(out.stdout).unwrap().lines().map(str::to_string).collect();
    lines.sort();
    for (k, v) in ENV {
        assert!(lines.contains(&format!("{k}={v}")), "{k} did not arrive unchanged: {lines:?}");
    }

    let out = runner.command(Path::new("sh"), &["-c".into(), "exit 7".into()], &[]).output().await.unwrap();
    assert_eq!(out.status.code(), Some(7));
    lines
}

/// The environment a test gives the runner.
const ENV: [(&str, &str); 2] =
    [("BCD_FAKEHW_SEED", "seed with spaces, $dollar and 'quotes'"), ("BCD_FAKEHW_VARIANT", "hgx-h100")];

#[cfg(windows)]
#[tokio::test]
async fn the_wsl_runner_works_end_to_end_against_the_real_wsl() {
    if !wsl::e2e_enabled() {
        eprintln!("skipped the WSL runner against the real wsl.exe: opt-in with BCD_E2E=1");
        return;
    }
    let runner = WslRunner::from_env().unwrap();
    assert!(runner.wsl().list().unwrap().iter().any(|d| d == runner.distro()));
    assert!(!runner.gateway().is_unspecified() && !runner.gateway().is_loopback(), "{}", runner.gateway());
    arguments_environment_and_status_pass_unchanged(&runner).await;
}

#[cfg(target_os = "linux")]
#[tokio::test]
async fn the_wsl_runner_works_end_to_end_over_the_shim() {
    if !prereq::require_netns("WSL runner over the shim") {
        return;
    }
    let runner = WslRunner::with_shim(None).unwrap();
    let ns = runner.shim_netns().expect("the shim's namespace");
    let (name, veth) = (ns.name().to_string(), ns.host_interface().to_string());

    // Discovery: wsl.exe --list --quiet (UTF-16LE) lists the namespace as the distribution.
    assert_eq!(runner.wsl().list().unwrap(), [name.as_str()]);
    assert_eq!(runner.distro(), name);

    // The default route, read through `wsl.exe -e ip route show default`, is the host side of the veth.
    assert_eq!(runner.gateway(), IpAddr::V4(ns.host_addr()));
    assert_eq!(runner.gateway_host(), ns.host_addr().to_string());

    // Arguments, environment and exit status pass unchanged; and under the
    // shim, as under WSL, nothing else of the test's environment does.
    let lines = arguments_environment_and_status_pass_unchanged(&runner).await;
    let expected_wslenv = wsl::wslenv(std::env::var("WSLENV").ok().as_deref(), &ENV.map(|(k, _)| k)).unwrap();
    let mut expected: Vec<String> = ENV.iter().map(|(k, v)| format!("{k}={v}")).collect();
    expected.extend([
        "HOME=/root".to_string(),
        "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".to_string(),
        format!("WSLENV={expected_wslenv}"),
        format!("WSL_DISTRO_NAME={name}"),
    ]);
    expected.sort();
    assert_eq!(lines, expected);

    // The program runs inside the namespace: its connection to the gateway
    // comes from the namespace side of the veth.
    let gateway = runner.gateway();
    let (target, server) = probe::serve_once(gateway);
    let result = probe::run(&runner, target, "hello-from-wsl").await.unwrap();
    let (peer, message) = server.join().unwrap();
    assert_eq!((peer.ip(), message.as_str()), (IpAddr::V4(ns.ns_addr()), "hello-from-wsl"));
    assert_eq!(result, format!("connected {peer} welcome"));
    let loopback = SocketAddr::from(([127, 0, 0, 1], target.port()));
    assert_eq!(probe::run(&runner, loopback, "x").await.unwrap(), "refused");

    // Dropping the runner removes the namespace and its veth pair.
    drop(runner);
    assert!(!netns_exists(&name), "namespace {name} is left");
    assert!(!link_exists(&veth), "veth {veth} is left");
}

#[cfg(target_os = "linux")]
fn have_ip() -> bool {
    prereq::have_program(&daemon_harness::netns::ip_program().to_string_lossy(), "-V")
}

#[cfg(target_os = "linux")]
#[test]
fn the_shim_refuses_what_it_does_not_implement() {
    if !prereq::require("WSL shim refusals", "iproute2", have_ip()) {
        return;
    }
    let absent = format!("bcdwsl-absent-{}", std::process::id());
    let shim = |args: &[&str]| Command::new(shim_path()).env(SHIM_NETNS_VAR, &absent).args(args).output().unwrap();
    // No distribution: wsl.exe says so in UTF-16LE and fails.
    let wsl = wsl::Wsl::new(shim_path()).with_env(SHIM_NETNS_VAR, &absent);
    match wsl.list() {
        Err(wsl::Error::Failed { status: Some(1), output, .. }) => {
            assert_eq!(output, "Windows Subsystem for Linux has no installed distributions.")
        }
        other => panic!("expected a failure, got {other:?}"),
    }
    for args in [
        &["-d", "no-such-distro", "-e", "true"][..],
        &["-d", &absent, "bash"],
        &["-e"],
        &["--list"],
        &["-u", "me", "-e", "true"],
        &[],
    ] {
        let out = shim(args);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {out:?}");
    }
}

#[cfg(target_os = "linux")]
#[test]
fn shim_setup_and_teardown_by_hand() {
    if !prereq::require_netns("WSL shim setup by hand") {
        return;
    }
    let name = format!("bcdwsl-byhand-{}", std::process::id());
    let shim = |arg: &str| Command::new(shim_path()).env(SHIM_NETNS_VAR, &name).arg(arg).output().unwrap();
    let out = shim("--shim-setup");
    assert!(out.status.success(), "{out:?}");
    let printed: IpAddr = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    let wsl = wsl::Wsl::new(shim_path()).with_env(SHIM_NETNS_VAR, &name);
    let listed = wsl.list();
    let gateway = wsl.default_gateway(&name);
    let veth = daemon_harness::netns::host_interface_of(&name);
    let out = shim("--shim-teardown");
    assert!(out.status.success(), "{out:?}");
    assert_eq!(listed.unwrap(), [name.as_str()]);
    assert_eq!(gateway.unwrap(), printed);
    let veth = veth.expect("the shim names the host side in eth0's alias");
    assert!(!netns_exists(&name), "namespace {name} is left");
    assert!(!link_exists(&veth), "veth {veth} is left");
}

#[cfg(target_os = "linux")]
#[test]
fn the_bcd_for_wsl_is_a_linux_amd64_binary() {
    if !prereq::require_go("bcd for WSL") {
        return;
    }
    let bcd = daemon_harness::wsl_runner::bcd_for_wsl().unwrap();
    let header = std::fs::read(&bcd).unwrap();
    assert_eq!(&header[..4], b"\x7fELF", "{} is an ELF binary", bcd.display());
    assert_eq!(header[4], 2, "64-bit");
    assert_eq!(u16::from_le_bytes([header[18], header[19]]), 0x3E, "x86-64");
}

#[cfg(target_os = "linux")]
#[tokio::test]
async fn bcd_runs_under_the_netns_and_wsl_runners() {
    if !prereq::require_go("bcd under the runners") || !prereq::require_netns("bcd under the runners") {
        return;
    }
    let bcd = daemon_harness::wsl_runner::bcd_for_wsl().unwrap();
    let netns = daemon_harness::netns::NetnsRunner::new().unwrap();
    let wsl = WslRunner::with_shim(None).unwrap();
    for runner in [&netns as &dyn Runner, &wsl] {
        let out = runner.command(&bcd, &["version".into()], &[]).output().await.unwrap();
        assert!(out.status.success(), "{}: {out:?}", runner.name());
        assert!(
            !String::from_utf8_lossy(&out.stdout).trim().is_empty(),
            "{}: bcd version printed nothing",
            runner.name()
        );
    }
}
