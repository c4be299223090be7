//! Fleet scenarios of issue 33 (docs/harness.md, "Scenarios"): capability
//! labels from real Hellos (an older bcd's set, by the fakehw knob, gets
//! neither host-resource nor Kubernetes reservations: `capability-missing`
//! naming what it lacks); pool-level reservations placed on the node with
//! the most free GPUs, one that ends itself at its duration, and one no
//! node can take (`reservation-unplaceable`); cordon (`node-cordoned`, the
//! `node.cordoned` event, what runs stays); and a Kubernetes release that
//! is fail-closed on the node: its pods keep the devices
//! (BCD_FAKEHW_KUBE_POD_RELEASE_MS), so the CDI spec goes at once, a
//! rebook at once is refused, and one after the pods let go is accepted.

use std::time::{Duration, Instant};

use devstack::{Binding, Error, PoolPolicy, PoolSpec, ReservationRequest, ReservationState, StackEvent};

use crate::common::{DEADLINE, Env};

/// A GPU pool expecting 8 GPUs, with `policy`.
async fn gpu_pool(env: &Env, name: &str, policy: PoolPolicy) -> String {
    let spec = PoolSpec { name: name.into(), expect_gpu_count: Some(8), policy, ..PoolSpec::default() };
    env.stack.create_pool(spec).await.expect("the pool is created")
}

fn gpus(n: u32) -> ReservationRequest {
    ReservationRequest { gpus: n, ..ReservationRequest::default() }
}

fn labels(env: &Env, id: &str) -> Vec<String> {
    env.stack.node_labels(id).unwrap().into_iter().map(|l| l.label).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn capabilities_pool_reservations_and_cordon() {
    let scenario = "capabilities_pool_reservations_and_cordon";
    let Some(env) = Env::start(scenario).await else { return };
    let pool = gpu_pool(&env, "fleet", PoolPolicy { kubernetes: true, ..PoolPolicy::default() }).await;
    let mut current = env.must_make_node("current", "hgx-h100").await;
    let current_id = env.must_join_and_adopt(&mut current, &pool).await;
    let mut older = env.must_make_node_seeded("older", "hgx-h100", "42").await;
    older.set_env("BCD_FAKEHW_CAPABILITIES", "events.v1,cdi,signed-intent");
    let older_id = env.must_join_and_adopt(&mut older, &pool).await;

    // The labels of each Hello.
    let caps = labels(&env, &current_id);
    for cap in ["cdi", "nvml", "devices.limits", "binding.kubernetes"] {
        assert!(caps.contains(&format!("bc.dev/cap.{cap}")), "{cap} in {caps:?}");
    }
    assert!(!labels(&env, &older_id).iter().any(|l| l.contains("devices.limits") || l.contains("kubernetes")));
    // An older bcd gets neither a booked share nor a Kubernetes binding.
    let share = ReservationRequest { gpus: 1, vcpus: 4, ..ReservationRequest::default() };
    let err = env.stack.reserve_with(&older_id, share).await.unwrap_err().to_string();
    assert!(err.starts_with("capability-missing: devices.limits"), "{err}");
    let kube = ReservationRequest { gpus: 1, binding: Binding::Kubernetes, ..ReservationRequest::default() };
    let err = env.stack.reserve_with(&older_id, kube).await.unwrap_err().to_string();
    assert!(err.starts_with("capability-missing: binding.kubernetes"), "{err}");
    let held = env.stack.reserve_with(&current_id, share).await.unwrap();
    env.stack.await_reservation(&held, ReservationState::Active, DEADLINE).await.unwrap();

    // The pool picks the node with the most free GPUs: the older one (8 free).
    let (first, on) = env.stack.reserve_in_pool("fleet", gpus(6), None).await.unwrap();
    assert_eq!(on, older_id, "the node with the most free GPUs");
    env.stack.await_reservation(&first, ReservationState::Active, DEADLINE).await.unwrap();
    // Then the current one (7 free), for a while: it ends itself.
    let started = Instant::now();
    let (brief, on) = env.stack.reserve_in_pool(&pool, gpus(2), Some(Duration::from_secs(2))).await.unwrap();
    assert_eq!(on, current_id);
    env.stack.await_reservation(&brief, ReservationState::Active, DEADLINE).await.unwrap();
    env.stack.await_reservation(&brief, ReservationState::Released, DEADLINE).await.unwrap();
    assert!(started.elapsed() >= Duration::from_secs(2), "ended after {:?}", started.elapsed());

    // Cordon: the event, no new booking there, what runs stays.
    let mut events = env.stack.events(env.stack.recent_events().last().map_or(0, |e| e.seq));
    assert!(env.stack.cordon(&current_id, "disk swap").await.unwrap());
    loop {
        let next = tokio::time::timeout(DEADLINE, events.next()).await.expect("an event").expect("the stream");
        if let devstack::Received::Event(e) = next
            && e.event == (StackEvent::Cordoned { node_id: current_id.clone(), reason: "disk swap".into() })
        {
            assert_eq!(e.to_json()["event"], "node.cordoned");
            break;
        }
    }
    let err = env.stack.reserve(&current_id, 1).await.unwrap_err().to_string();
    assert!(err.starts_with("node-cordoned: "), "{err}");
    let err = env.stack.reserve_in_pool("fleet", gpus(3), None).await.unwrap_err().to_string();
    assert!(err.starts_with("reservation-unplaceable: no node of pool \"fleet\" can take 3 GPU(s)"), "{err}");
    assert!(err.contains("node-cordoned") && err.contains(&older_id), "why of each node: {err}");
    assert_eq!(env.stack.reservation(&held).unwrap().unwrap().state, ReservationState::Active, "what runs stays");
    assert!(env.stack.uncordon(&current_id).await.unwrap());
    let (after, on) = env.stack.reserve_in_pool("fleet", gpus(3), None).await.unwrap();
    assert_eq!(on, current_id);
    env.stack.await_reservation(&after, ReservationState::Active, DEADLINE).await.unwrap();
    current.stop().await;
    older.stop().await;
    env.report();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_kubernetes_release_is_fail_closed_on_the_node() {
    let scenario = "a_kubernetes_release_is_fail_closed_on_the_node";
    let Some(env) = Env::start(scenario).await else { return };
    let pool = gpu_pool(&env, "kube", PoolPolicy { kubernetes: true, ..PoolPolicy::default() }).await;
    let mut node = env.must_make_node("pods", "hgx-h100").await;
    node.set_env("BCD_FAKEHW_KUBE_POD_RELEASE_MS", "4000");
    let id = env.must_join_and_adopt(&mut node, &pool).await;
    let kube = ReservationRequest { gpus: 4, binding: Binding::Kubernetes, ..ReservationRequest::default() };
    let hold = env.stack.reserve_with(&id, kube).await.unwrap();
    env.stack.await_reservation(&hold, ReservationState::Active, DEADLINE).await.unwrap();
    let cdi = node.data_dir().join(format!("fakehw-root/etc/cdi/bcd-alloc-{hold}.json"));
    assert!(cdi.exists());

    let released_at = Instant::now();
    env.stack.release(&hold).await.unwrap();
    // Not offered at once: the CDI spec goes with the generation.
    node.logs().await_line(DEADLINE, &format!("converge.releasing allocation_id={hold}")).await.unwrap();
    assert!(!cdi.exists(), "the released hold is still offered");
    // Still claimed: a rebook at once is refused.
    let err = env.stack.reserve_with(&id, gpus(6)).await.unwrap_err();
    assert!(matches!(err, Error::ReservationOverlap { .. }) && err.to_string().contains(&hold), "{err}");
    let section = env
        .stack
        .await_until("the holds section waiting for the pods", DEADLINE, |v| {
            v.section_status(&id, "holds").filter(|s| s.is(devstack::SectionState::Progressing, "PodsReleasing"))
        })
        .await
        .unwrap();
    assert!(section.message.contains(&hold), "{section:?}");
    // Released once the pods let go, then the rebook is accepted.
    env.stack.await_reservation(&hold, ReservationState::Released, DEADLINE).await.unwrap();
    assert!(released_at.elapsed() >= Duration::from_secs(4), "released after {:?}", released_at.elapsed());
    let again = env.stack.reserve_with(&id, gpus(6)).await.unwrap();
    env.stack.await_reservation(&again, ReservationState::Active, DEADLINE).await.unwrap();
    node.stop().await;
    env.report();
}
