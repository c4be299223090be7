//! Hold scenarios of issue 13 (docs/harness.md, "Scenarios"): a GPU hold
//! with a booked share runs in `bcd-alloc-<id>.slice` under the fake root
//! with its env file beside its CDI spec,
//! reported as its AllocationBound's `cgroup_parent` and stored with the
//! reservation, and removed on release; a Kubernetes hold's CDI spec
//! carries `bcd.dev/binding: kubernetes` and the booked limits and no
//! `NVIDIA_VISIBLE_DEVICES`, a plain hold's sets it once, a release is
//! fail-closed (`reservation-overlap` until the node reports it), and a pool
//! without `policy.kubernetes` refuses the binding with a stable code.

use std::path::PathBuf;

use daemon_harness::node::Node;
use devstack::{Acceptance, Binding, Error, PoolPolicy, PoolSpec, ReservationRequest, ReservationState};

use crate::common::{DEADLINE, Env};

/// A GPU pool (diag.nvml acceptance, 8 GPUs) with `policy`.
async fn must_create_gpu_pool(env: &Env, name: &str, policy: PoolPolicy) -> String {
    let spec = PoolSpec {
        name: name.into(),
        expect_gpu_count: Some(8),
        acceptance: Acceptance::DiagNvml,
        policy,
        ..PoolSpec::default()
    };
    env.stack.create_pool(spec).await.expect("the pool is created")
}

fn cdi(node: &Node, id: &str) -> PathBuf {
    node.data_dir().join(format!("fakehw-root/etc/cdi/bcd-alloc-{id}.json"))
}

/// The hold's env file, beside its CDI spec.
fn env_file(node: &Node, id: &str) -> PathBuf {
    node.data_dir().join(format!("fakehw-root/etc/cdi/bcd-alloc-{id}.env"))
}

fn slice_dir(node: &Node, id: &str) -> PathBuf {
    node.data_dir().join(format!("fakehw-root/sys/fs/cgroup/bcd.slice/bcd-alloc.slice/bcd-alloc-{id}.slice"))
}

fn slice_unit(node: &Node, id: &str) -> PathBuf {
    node.data_dir().join(format!("fakehw-root/run/systemd/system/bcd-alloc-{id}.slice"))
}

fn read(path: &PathBuf) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The one device of a CDI spec, as JSON.
fn device(node: &Node, id: &str) -> serde_json::Value {
    let spec: serde_json::Value = serde_json::from_str(&read(&cdi(node, id))).unwrap();
    spec["devices"][0].clone()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_gpu_hold_with_a_booked_share_runs_in_its_slice_until_released() {
    let scenario = "a_gpu_hold_with_a_booked_share_runs_in_its_slice_until_released";
    let Some(env) = Env::start(scenario).await else { return };
    let pool = must_create_gpu_pool(&env, "gpu", PoolPolicy::default()).await;
    let mut node = env.must_make_node("holder", "hgx-h100").await;
    let node_id = env.must_join_and_adopt(&mut node, &pool).await;

    let request = ReservationRequest { gpus: 2, vcpus: 16, memory_bytes: 128 << 30, binding: Binding::Plain };
    let id = env.stack.reserve_with(&node_id, request).await.unwrap();
    let active = env.stack.await_reservation(&id, ReservationState::Active, DEADLINE).await.unwrap();
    let slice = format!("bcd-alloc-{id}.slice");
    assert_eq!(active.cgroup_parent, slice, "the stack stores the slice the node reported: {active:?}");
    assert_eq!((active.vcpus, active.memory_bytes, active.binding.as_str()), (16, 128 << 30, ""));
    assert_eq!(read(&slice_dir(&node, &id).join("cpu.max")), "1600000 100000\n");
    assert_eq!(read(&slice_dir(&node, &id).join("memory.max")), format!("{}\n", 128u64 << 30));
    let unit = read(&slice_unit(&node, &id));
    assert!(unit.contains("[Slice]\nCPUQuota=1600%\nMemoryMax=137438953472\n"), "{unit}");
    // The hold's devices: NVIDIA_VISIBLE_DEVICES once, for both GPUs.
    let dev = device(&node, &id);
    assert_eq!(dev["containerEdits"]["env"], serde_json::json!(["NVIDIA_VISIBLE_DEVICES=0,1"]), "{dev}");
    // Beside the CDI spec, the hold's env file.
    let written = read(&env_file(&node, &id));
    let want = format!(
        "BCD_ALLOCATION_ID={id}\nBCD_CDI_DEVICE=bcd.dev/alloc={id}\nBCD_GPU_INDEXES=0,1\nNVIDIA_VISIBLE_DEVICES=0,1\n\
         BCD_VCPUS=16\nBCD_MEMORY_BYTES=137438953472\nBCD_CGROUP_PARENT={slice}\n"
    );
    assert_eq!(written, want);

    // More than the node has left is refused with a stable code, and books nothing.
    let greedy = ReservationRequest { gpus: 1, vcpus: 100, ..ReservationRequest::default() };
    let err = env.stack.reserve_with(&node_id, greedy).await.unwrap_err();
    assert!(matches!(err, Error::ReservationRoom { .. }) && err.to_string().starts_with("reservation-room: "), "{err}");

    env.stack.release(&id).await.unwrap();
    env.stack.await_reservation(&id, ReservationState::Released, DEADLINE).await.unwrap();
    for gone in [cdi(&node, &id), env_file(&node, &id), slice_dir(&node, &id), slice_unit(&node, &id)] {
        assert!(!gone.exists(), "{} left after the release", gone.display());
    }
    node.stop().await;
    env.report();
}

#[tokio::test(flavor = "multi_thread")]
async fn kubernetes_bindings_carry_the_annotation_and_release_fail_closed() {
    let scenario = "kubernetes_bindings_carry_the_annotation_and_release_fail_closed";
    let Some(env) = Env::start(scenario).await else { return };
    let pool = must_create_gpu_pool(&env, "k8s", PoolPolicy { kubernetes: true, ..PoolPolicy::default() }).await;
    let plain_pool = must_create_gpu_pool(&env, "plain", PoolPolicy::default()).await;
    let mut node = env.must_make_node("kube", "hgx-h100").await;
    let node_id = env.must_join_and_adopt(&mut node, &pool).await;
    let mut other = env.must_make_node("plain", "hgx-h100").await;
    let other_id = env.must_join_and_adopt(&mut other, &plain_pool).await;

    let k8s = ReservationRequest { gpus: 4, vcpus: 32, memory_bytes: 256 << 30, binding: Binding::Kubernetes };
    let kube = env.stack.reserve_with(&node_id, k8s).await.unwrap();
    let plain = env
        .stack
        .reserve_with(&node_id, ReservationRequest { gpus: 2, ..ReservationRequest::default() })
        .await
        .unwrap();
    let kube_row = env.stack.await_reservation(&kube, ReservationState::Active, DEADLINE).await.unwrap();
    env.stack.await_reservation(&plain, ReservationState::Active, DEADLINE).await.unwrap();

    let dev = device(&node, &kube);
    assert_eq!(dev["annotations"]["bcd.dev/binding"], "kubernetes", "{dev}");
    assert_eq!(dev["annotations"]["bcd.dev/vcpus"], "32", "the booked limits are in the assignment: {dev}");
    assert_eq!(dev["annotations"]["bcd.dev/memory-bytes"], (256u64 << 30).to_string(), "{dev}");
    assert!(!read(&cdi(&node, &kube)).contains("NVIDIA_VISIBLE_DEVICES"), "{dev}");
    assert_eq!(kube_row.binding, "kubernetes");
    assert_eq!(kube_row.cgroup_parent, "", "the kubelet enforces a kubernetes hold's share: no slice");
    assert!(!slice_unit(&node, &kube).exists());
    let plain_spec = read(&cdi(&node, &plain));
    assert_eq!(plain_spec.matches("NVIDIA_VISIBLE_DEVICES").count(), 1, "{plain_spec}");
    assert!(plain_spec.contains("NVIDIA_VISIBLE_DEVICES=4,5"), "{plain_spec}");
    assert!(!plain_spec.contains("bcd.dev/binding"), "{plain_spec}");

    // Fail-closed: with the node away, the released GPUs stay claimed.
    node.stop().await;
    env.stack.release(&kube).await.unwrap();
    assert_eq!(env.stack.reservation(&kube).unwrap().unwrap().state, ReservationState::Releasing);
    let again = ReservationRequest { gpus: 6, ..ReservationRequest::default() };
    let err = env.stack.reserve_with(&node_id, again).await.unwrap_err();
    assert!(matches!(err, Error::ReservationOverlap { .. }), "{err}");
    assert!(err.to_string().starts_with("reservation-overlap: "), "{err}");
    assert!(err.to_string().contains(&kube), "{err}");
    node.start().expect("bcd node starts again");
    env.stack.await_reservation(&kube, ReservationState::Released, DEADLINE).await.unwrap();
    assert!(!cdi(&node, &kube).exists(), "the released hold's CDI spec is gone");
    let after = env.stack.reserve_with(&node_id, again).await.unwrap();
    env.stack.await_reservation(&after, ReservationState::Active, DEADLINE).await.unwrap();

    // A pool without policy.kubernetes refuses the binding.
    let refused = ReservationRequest { gpus: 1, binding: Binding::Kubernetes, ..ReservationRequest::default() };
    let err = env.stack.reserve_with(&other_id, refused).await.unwrap_err();
    assert!(matches!(err, Error::BindingUnsupported { .. }), "{err}");
    assert!(err.to_string().starts_with("binding-unsupported: "), "{err}");
    assert!(env.stack.reservations(&other_id).unwrap().is_empty(), "nothing was booked");
    node.stop().await;
    other.stop().await;
    env.report();
}
