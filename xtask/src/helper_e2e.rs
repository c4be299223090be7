//! `cargo xtask helper-e2e`: `bcd helper` as real root. It builds bcd and
//! the test `TestHelperAsRoot` with the tags `nonvml,helpere2e`, renders the
//! install script (`--unprivileged --instance-bridges bcbr0`, pinning the two
//! release keys of `testdata/release` with threshold 2 and sequence 5), and
//! runs the test under `unshare --mount --net` through
//! `scripts/helper-e2e-ns.sh` (overlays of `/etc`, `/usr/local` and `/var`, a
//! fresh `/run`). It lists `/etc`, `/usr/local` and `/var` (path, type, mode,
//! owner, size, mtime, ctime, link target) before and after, hashes both
//! listings, and fails if the host changed. Without root, `unshare`,
//! `useradd`, `ip` or Go it prints why and succeeds, except under `CI=true`.
//!
//! xtask drives `unshare` itself rather than through the harness's runners:
//! the harness links libc, tokio and the dev stack, and xtask links no system
//! library (it must build on a fresh machine before the prerequisites).

use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use xshell::{Shell, cmd};

/// Whether CI runs us (`CI=true`), where a missing prerequisite fails.
fn under_ci() -> bool {
    std::env::var("CI").map(|v| v == "true" || v == "1").unwrap_or(false)
}

/// Why helper-e2e cannot run here, if it cannot.
pub fn missing_prerequisite(sh: &Shell) -> Option<String> {
    match cmd!(sh, "id -u").quiet().read() {
        Ok(uid) if uid.trim() == "0" => {}
        _ => return Some("root (the test runs unshare, useradd and ip as root)".to_string()),
    }
    for program in ["unshare", "useradd", "ip", "go", "find", "sha256sum"] {
        if cmd!(sh, "sh -c 'command -v \"$0\"' {program}").quiet().ignore_stdout().run().is_err() {
            return Some(format!("{program} on PATH"));
        }
    }
    None
}

/// The host's listing of /etc, /usr/local and /var, and its SHA-256.
fn host_listing(sh: &Shell) -> Result<(String, String)> {
    let listing = cmd!(sh, "find /etc /usr/local /var -xdev -printf '%p %y %m %U %G %s %T@ %C@ %l\\n'")
        .quiet()
        .read()
        .context("listing /etc, /usr/local and /var")?;
    let mut lines: Vec<&str> = listing.lines().collect();
    lines.sort_unstable();
    let listing = lines.join("\n");
    let hash = cmd!(sh, "sha256sum").stdin(listing.as_bytes()).quiet().read()?;
    Ok((listing, hash.split_whitespace().next().unwrap_or_default().to_string()))
}

/// Runs helper-e2e; `root` is the workspace, `target` the cargo target directory.
pub fn run(sh: &Shell, root: &Path, target: &Path) -> Result<()> {
    if let Some(why) = missing_prerequisite(sh) {
        if under_ci() {
            bail!("helper-e2e: missing prerequisite: {why} (CI=true makes this a failure)");
        }
        println!("helper-e2e skipped: missing prerequisite: {why}");
        return Ok(());
    }
    let started = Instant::now();
    let dir = target.join("helper-e2e");
    let scratch = dir.join("scratch");
    std::fs::create_dir_all(&scratch)?;
    let (bcd, test, script) = (dir.join("bcd"), dir.join("roote2e.test"), dir.join("install.sh"));
    {
        let _daemon = sh.push_dir(root.join("daemon"));
        let _cgo = sh.push_env("CGO_ENABLED", "0");
        cmd!(sh, "go build -trimpath -tags nonvml,helpere2e -o {bcd} ./cmd/bcd").run()?;
        cmd!(sh, "go test -c -tags nonvml,helpere2e -o {test} ./internal/helper/roote2e").run()?;
    }
    let release = root.join("testdata/release");
    let (key0, key1) = (release.join("release-0.pub.pem"), release.join("release-1.pub.pem"));
    let rendered = cmd!(
        sh,
        "{bcd} helper install-script --unprivileged --instance-bridges bcbr0 --release-key-file {key0} --release-key-file {key1} --release-threshold 2 --release-min-sequence 5"
    )
    .read()?;
    std::fs::write(&script, rendered + "\n")?;
    let built = started.elapsed();

    let (before, before_hash) = host_listing(sh)?;
    let ns = root.join("scripts/helper-e2e-ns.sh");
    let testdata = root.join("testdata");
    let ran = Instant::now();
    // libvirt's cache of QEMU's capabilities, shared with the real-guest
    // scenarios' VPS hosts (docs/harness.md, "The VPS host").
    let caps = target.join("vps-guest/libvirt-capabilities");
    std::fs::create_dir_all(&caps)?;
    let result = cmd!(sh, "bash {ns} {scratch} {test} -test.v -test.run ^TestHelperAsRoot$")
        .env("BCD_HELPER_E2E_LIBVIRT_CAPS", &caps)
        .env("BCD_HELPER_E2E_BCD", &bcd)
        .env("BCD_HELPER_E2E_SCRIPT", &script)
        .env("BCD_HELPER_E2E_TESTDATA", &testdata)
        .run();
    let wall = ran.elapsed();
    let (after, after_hash) = host_listing(sh)?;
    println!("helper-e2e: host /etc, /usr/local, /var listing sha256 before {before_hash}, after {after_hash}");
    if before != after {
        let old: std::collections::BTreeSet<&str> = before.lines().collect();
        let new: std::collections::BTreeSet<&str> = after.lines().collect();
        for line in old.symmetric_difference(&new).take(20) {
            let sign = if old.contains(line) { "-" } else { "+" };
            println!("  {sign} {line}");
        }
        bail!("helper-e2e changed the host (or something else did meanwhile): the listings above differ");
    }
    result.context("TestHelperAsRoot failed")?;
    println!(
        "helper-e2e: TestHelperAsRoot passed as root in private namespaces in {wall:.2?} (wall time, binaries built; {built:.1?} to build), the host unchanged"
    );
    Ok(())
}
