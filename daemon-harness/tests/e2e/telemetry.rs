//! Node metrics (docs/protocol.md, "Telemetry"): the NodeSpec telemetry
//! section makes bcd export OTLP/JSON to the dev stack's receiver at once,
//! then every interval; an unchanged section keeps the schedule, a changed
//! interval restarts it (from sample 0: the same deterministic fakehw
//! values again), an empty endpoint stops it. A captured export is also
//! decoded by a second, independent decoder (Go's protojson into the OTLP
//! proto types, `TestACapturedExportDecodes`). An authenticated export: a
//! section whose `headers_ref` names a secret of the broker sends that
//! secret's headers, which the receiver checks, across a restart of the
//! schedule and of bcd, and never logs; an unknown one FAILS the section.

use std::collections::BTreeSet;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use daemon_harness::build::bcd_src;
use devstack::{LogCapture, OtlpExport, SectionState, SpecUpdate, point_attribute, point_value};

use crate::common::{DEADLINE, Env};

/// The GPU metrics every export of a fakehw GPU machine carries.
const GPU_SERIES: [&str; 5] =
    ["bcd.gpu.utilization", "bcd.gpu.memory.used", "bcd.gpu.temperature", "bcd.gpu.power", "bcd.gpu.xid.active"];

fn section(endpoint: &str, interval_ms: u32) -> SpecUpdate {
    let attribute = proto::Attribute { key: "deployment.environment".into(), value: "e2e".into() };
    SpecUpdate {
        telemetry: Some(proto::TelemetrySection {
            otlp_endpoint: endpoint.to_string(),
            export_interval_ms: interval_ms,
            resource_attributes: vec![attribute, proto::Attribute { key: "service.name".into(), value: "x".into() }],
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The utilization of every GPU, by index: what identifies a sample.
fn utilization(export: &OtlpExport) -> Vec<(String, u64)> {
    let points = export.points("bcd.gpu.utilization");
    points
        .iter()
        .map(|p| (point_attribute(p, "gpu.index").unwrap_or_default(), point_value(p).unwrap().to_bits()))
        .collect()
}

/// Waits for the telemetry section's status of `generation`.
async fn await_section(env: &Env, id: &str, generation: u64) -> devstack::SectionStatus {
    env.stack
        .await_until(format!("the telemetry section of generation {generation}"), DEADLINE, |v| {
            v.section_status(id, "telemetry").filter(|s| s.generation >= generation)
        })
        .await
        .unwrap()
}

/// The second decoder: `go test` of the captured bytes.
fn must_decode_with_protojson(node: &daemon_harness::node::Node, export: &OtlpExport, node_id: &str) {
    let capture = node.dir().join("otlp-capture.json");
    std::fs::write(&capture, &export.body).unwrap();
    let out = Command::new("go")
        .args(["test", "./internal/telemetry/", "-run", "^TestACapturedExportDecodes$", "-count=1", "-v"])
        .current_dir(bcd_src())
        .env("BCD_OTLP_CAPTURE", &capture)
        .env("BCD_OTLP_CAPTURE_NODE", node_id)
        .env("BCD_OTLP_CAPTURE_GPUS", "8")
        .output()
        .expect("go test runs");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && text.contains("--- PASS: TestACapturedExportDecodes"), "{text}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_telemetry_section_exports_otlp_json_and_follows_its_changes() {
    let Some(env) = Env::start("the_telemetry_section_exports_otlp_json_and_follows_its_changes").await else {
        return;
    };
    let pool = env.must_create_pool("hgx", Some(8)).await;
    let mut node = env.must_make_node("metrics", "hgx-h100").await;
    let id = env.must_join_and_adopt(&mut node, &pool).await;
    let version = env.stack.node_sessions(&id).unwrap().last().unwrap().daemon_version.clone();

    // A 5 s interval and an extra resource attribute: an export at once.
    let generation = env.stack.publish_spec(&id, section(&env.stack.otlp_url(), 5000)).await.unwrap();
    let first = env.stack.await_export(&id, DEADLINE, |_| true).await.unwrap();
    let attributes = first.resource_attributes();
    let expected: Vec<(String, String)> = [
        ("deployment.environment", "e2e"),
        ("service.name", "bcd"),
        ("service.version", version.as_str()),
        ("bcd.node.id", id.as_str()),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    assert_eq!(attributes, expected, "the section's attributes, then bcd's, which win");
    let gpus: BTreeSet<String> =
        first.points("bcd.gpu.utilization").iter().filter_map(|p| point_attribute(p, "gpu.index")).collect();
    assert_eq!(gpus.len(), 8, "all 8 GPUs: {gpus:?}");
    for series in GPU_SERIES {
        assert_eq!(first.points(series).len(), 8, "{series} for every GPU in {:?}", first.metric_names());
    }
    assert!(first.points("bcd.gpu.utilization").iter().all(|p| (0.0..=1.0).contains(&point_value(p).unwrap())));
    // A fakehw bcd is a VPS host: it counts its instances, none here, and
    // has no per-instance series.
    let count: Vec<f64> = first.points("bcd.instances").iter().filter_map(|p| point_value(p)).collect();
    assert_eq!(count, vec![0.0], "bcd.instances of a VPS host without instances");
    assert!(first.points("bcd.instance.vcpu").is_empty(), "no per-instance series without instances");
    let status = await_section(&env, &id, generation).await;
    assert!(status.is(SectionState::Applied, "Applied") && status.message.contains("every 5s"), "{status:?}");
    must_decode_with_protojson(&node, &first, &id);

    // An unchanged section keeps its schedule: the next export is a later sample.
    let ops = proto::SshAccount { name: "ops".into(), principals: vec!["ops".into()], ..Default::default() };
    let access = proto::AccessSection { accounts: vec![ops], ..Default::default() };
    let mark = env.stack.otlp_exports(&id).len();
    let unchanged =
        env.stack.publish_spec(&id, SpecUpdate { access: Some(access), ..Default::default() }).await.unwrap();
    await_section(&env, &id, unchanged).await;
    let later = after(&env, &id, mark).await;
    assert_ne!(utilization(&later), utilization(&first), "an unchanged section restarted the schedule");

    // A changed interval restarts it: at once, from sample 0 again.
    let mark = env.stack.otlp_exports(&id).len();
    let changed = env.stack.publish_spec(&id, section(&env.stack.otlp_url(), 6000)).await.unwrap();
    let restarted = after(&env, &id, mark).await;
    assert_eq!(utilization(&restarted), utilization(&first), "the restarted schedule starts at sample 0");
    let status = await_section(&env, &id, changed).await;
    assert!(status.message.contains("every 6s"), "{status:?}");

    // An empty endpoint stops the exports.
    let stopped = env.stack.publish_spec(&id, section("", 0)).await.unwrap();
    await_section(&env, &id, stopped).await;
    node.logs().await_line(DEADLINE, "telemetry.stopped").await.unwrap();
    // Past the 6 s interval, nothing more came.
    let mark = env.stack.otlp_exports(&id).len();
    let quiet = env
        .stack
        .await_until("an export after the endpoint was emptied", Duration::from_secs(8), |v| {
            v.otlp_exports(&id).into_iter().nth(mark)
        })
        .await;
    assert!(quiet.is_err(), "an export after the endpoint was emptied: {:?}", quiet.map(|e| e.received_at_ms));
    node.stop().await;
    env.report();
}

/// The first export of `id` received after its first `mark` exports.
async fn after(env: &Env, id: &str, mark: usize) -> Arc<OtlpExport> {
    env.stack
        .await_until(format!("an export of {id} after the {mark} first"), DEADLINE, |v| {
            v.otlp_exports(id).into_iter().nth(mark)
        })
        .await
        .unwrap()
}

/// A VPS host's export with a running instance: the instance's series as
/// the product names them (`bcd.instance.*`, each point naming the
/// instance; fakehw's usage: a CPU second per boot, half its memory in use,
/// no disk or network I/O), and the host's own CPU, memory and network
/// series beside the GPU ones.
#[tokio::test(flavor = "multi_thread")]
async fn a_vps_hosts_export_carries_its_running_instances_and_its_own_series() {
    let scenario = "a_vps_hosts_export_carries_its_running_instances_and_its_own_series";
    if !crate::vps::require_validator(scenario) {
        return;
    }
    let Some(env) = Env::start(scenario).await else { return };
    let pool = crate::vps::must_create_vps_pool(&env, "vps").await;
    let mut node = env.must_make_node("host", "hgx-h100").await;
    let id = env.must_join_and_adopt(&mut node, &pool).await;
    let instance = crate::vps::must_run_instance(&env, &node, &pool, crate::vps::request(2, 4)).await.id;
    env.stack.publish_spec(&id, section(&env.stack.otlp_url(), 5000)).await.unwrap();
    let export = env
        .stack
        .await_export(&id, DEADLINE, |e| !e.points("bcd.instance.vcpu").is_empty())
        .await
        .expect("an export with the instance");
    let of_instance = |name: &str| -> f64 {
        let points = export.points(name);
        assert_eq!(points.len(), 1, "{name}: {points:?}");
        assert_eq!(point_attribute(points[0], "instance.id").as_deref(), Some(instance.as_str()), "{name}");
        point_value(points[0]).unwrap()
    };
    assert_eq!(of_instance("bcd.instance.vcpu"), 2.0);
    assert_eq!(of_instance("bcd.instance.memory"), (4u64 << 30) as f64);
    assert_eq!(of_instance("bcd.instance.memory.used"), (2u64 << 30) as f64, "half its memory, as fakehw says");
    assert!(of_instance("bcd.instance.cpu.time") >= 1.0, "a CPU second per boot");
    for name in [
        "bcd.instance.io.read",
        "bcd.instance.io.write",
        "bcd.instance.network.receive",
        "bcd.instance.network.transmit",
    ] {
        assert_eq!(of_instance(name), 0.0, "{name}");
    }
    let count: Vec<f64> = export.points("bcd.instances").iter().filter_map(|p| point_value(p)).collect();
    assert_eq!(count, vec![1.0]);
    // The host's own series: every state of its CPU time, its memory, its NICs.
    let states: BTreeSet<String> =
        export.points("bcd.host.cpu.time").iter().filter_map(|p| point_attribute(p, "state")).collect();
    assert_eq!(states, ["idle", "iowait", "system", "user"].map(String::from).into());
    assert_eq!(export.points("bcd.host.memory.limit").len(), 1);
    let devices: BTreeSet<String> =
        export.points("bcd.host.network.io").iter().filter_map(|p| point_attribute(p, "device")).collect();
    assert!(devices.contains("eth0"), "{devices:?}");
    assert_eq!(export.points("bcd.gpu.utilization").len(), 8, "the GPU series beside them");
    node.stop().await;
    env.report();
}

/// A section exporting to the stack every `interval_ms` with the headers of `headers_ref`.
fn authenticated(env: &Env, interval_ms: u32, headers_ref: &str) -> SpecUpdate {
    let telemetry = proto::TelemetrySection {
        otlp_endpoint: env.stack.otlp_url(),
        export_interval_ms: interval_ms,
        headers_ref: headers_ref.to_string(),
        ..Default::default()
    };
    SpecUpdate { telemetry: Some(telemetry), ..Default::default() }
}

/// Authenticated exports (docs/protocol.md, "Telemetry"): the headers of
/// the section's `headers_ref` come through the secret broker, sealed to
/// the node, and every export carries them (the receiver takes none
/// without them); a changed interval restarts the schedule with them, a
/// restarted bcd fetches them again before it exports; neither side logs
/// them; a `headers_ref` naming no secret is FAILED `HeadersRefused`.
#[tokio::test(flavor = "multi_thread")]
async fn authenticated_exports_carry_the_headers_of_their_secret_across_restarts() {
    const TOKEN: &str = "e2e-0tlp-t0ken";
    let logs = LogCapture::global();
    let scenario = "authenticated_exports_carry_the_headers_of_their_secret_across_restarts";
    let Some(env) = Env::start(scenario).await else { return };
    let pool = env.must_create_pool("any", None).await;
    let mut node = env.must_make_node("authenticated", "cpu").await;
    let id = env.must_join_and_adopt(&mut node, &pool).await;
    let secret = format!("Authorization=Bearer%20{TOKEN},X-Scope-OrgID=acme");
    let headers_ref = env.stack.put_secret(secret.as_bytes()).await.unwrap();
    let names = vec!["authorization".to_string(), "x-scope-orgid".to_string()];

    let generation = env.stack.publish_spec(&id, authenticated(&env, 5000, &headers_ref)).await.unwrap();
    let first = env.stack.await_export(&id, DEADLINE, |_| true).await.unwrap();
    assert_eq!(first.headers, names, "the receiver checked both headers");
    let status = env
        .stack
        .await_until("the telemetry section APPLIED", DEADLINE, |v| {
            v.section_status(&id, "telemetry")
                .filter(|s| s.generation == generation && s.is(SectionState::Applied, "Applied"))
        })
        .await
        .unwrap();
    assert!(status.message.contains(&format!("with the 2 header(s) of {headers_ref}")), "{status:?}");

    // A changed interval restarts the schedule with the headers it has.
    let mark = env.stack.otlp_exports(&id).len();
    let changed = env.stack.publish_spec(&id, authenticated(&env, 6000, &headers_ref)).await.unwrap();
    assert_eq!(after(&env, &id, mark).await.headers, names, "after the schedule restarted");
    assert!(await_section(&env, &id, changed).await.message.contains("every 6s"));
    assert_eq!(node.logs().text().matches("telemetry.headers_received").count(), 1, "fetched once");

    // bcd restarts: it fetches them again before its first export.
    node.stop().await;
    let mark = env.stack.otlp_exports(&id).len();
    node.start().unwrap();
    assert_eq!(after(&env, &id, mark).await.headers, names, "after a restart of bcd");
    assert_eq!(node.logs().text().matches("telemetry.headers_received").count(), 2, "fetched again");
    assert!(env.stack.otlp_exports(&id).iter().all(|e| e.headers == names), "every export carried them");

    // A headers_ref naming no secret: the broker refuses, the section FAILS.
    let refused = env.stack.publish_spec(&id, authenticated(&env, 5000, "sec_none")).await.unwrap();
    env.stack
        .await_until("the telemetry section FAILED HeadersRefused", DEADLINE, |v| {
            v.section_status(&id, "telemetry")
                .filter(|s| s.generation == refused && s.is(SectionState::Failed, "HeadersRefused"))
        })
        .await
        .unwrap();
    assert!(!logs.contains("otlp-unauthenticated"), "bcd never exported without its headers");
    node.assert_never_printed(TOKEN, "the export's token");
    assert!(!logs.contains(TOKEN), "the export's token appears in the dev stack's log");
    node.stop().await;
    env.report();
}
