//! This gateway among the gateways of its store (docs/devstack.md, "Several
//! gateways"): it registers itself, and while it runs it beats by the
//! store's clock, writes how long ago each of its sessions heard its node
//! (ages by its own monotonic clock, never its wall clock, so gateways
//! whose clocks disagree agree on who is heard), marks unreachable a node
//! no gateway heard for the liveness timeout (`node.unreachable`, cleared
//! on the next heard frame with `node.reachable`), meters the bookings'
//! usage windows that ended (docs/devstack.md, "Usage"), and wakes its sessions
//! whose node has a command waiting (the safety net under the pokes); the
//! beat and that sweep are two loops, the beat's writes on a store
//! connection of their own (the liveness lane). The
//! pokes themselves go between gateways as the store's notifications: a
//! wake, a new spec or a revocation for a node whose session another
//! gateway holds, and a change of the store that wakes this process's
//! waits.

use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tracing::{debug, info, warn};

use crate::connections::Phase;
use crate::error::Result;
use crate::events::StackEvent;
use crate::hub::{Control, Poke};
use crate::shared::Shared;
use crate::store::{Lane, commands, gateways, nodes, specs, usage};

/// A poke as the store carries it: `w:`, `s:` or `r:` and the node.
fn encode(poke: &Poke) -> String {
    match poke {
        Poke::Wake(node) => format!("w:{node}"),
        Poke::Spec(node) => format!("s:{node}"),
        Poke::Revoke(node) => format!("r:{node}"),
    }
}

/// Registers this gateway and, on a shared store, hands the hub the way to
/// other gateways and listens to them; then beats until `stop` says the
/// stack stopped.
pub fn join(shared: &Arc<Shared>, stop: watch::Receiver<Phase>) -> Result<()> {
    let settings = &shared.settings;
    let id = settings.options.gateway_id.clone();
    let started = crate::clock::now_ms();
    if settings.options.listed {
        shared
            .ledger
            .write(|c| Ok(gateways::register(c, &id, &settings.gateway_url, &settings.https_base_url, started)?))?;
    }
    if let Some(notifications) = shared.ledger.store().listen()? {
        let weak = Arc::downgrade(shared);
        shared.hub.set_remote(move |poke| {
            let Some(shared) = weak.upgrade() else { return };
            if let Err(e) = shared.ledger.store().notify(&encode(&poke)) {
                warn!(error = %e, ?poke, "cluster: a poke to the other gateways was lost (the sweep delivers)");
            }
        });
        tokio::spawn(listen(Arc::downgrade(shared), notifications));
    }
    tokio::spawn(beat(Arc::downgrade(shared), stop));
    info!(gateway = %id, store = shared.ledger.store().backend(), "cluster: gateway registered");
    Ok(())
}

/// Acts on what the other gateways notify.
async fn listen(shared: Weak<Shared>, mut notifications: mpsc::UnboundedReceiver<String>) {
    while let Some(payload) = notifications.recv().await {
        let Some(shared) = shared.upgrade() else { return };
        let (kind, node) = payload.split_once(':').unwrap_or((payload.as_str(), ""));
        match kind {
            "w" => {
                shared.hub.send_local(node, Control::Wake);
            }
            "r" => {
                shared.hub.send_local(node, Control::Revoke("the node's certificates were revoked".into()));
            }
            "s" if shared.hub.holds(node) => match shared.ledger.read(|c| specs::latest(c, node)) {
                Ok(Some(spec)) => {
                    shared.hub.push_spec(&spec);
                }
                Ok(None) => {}
                Err(e) => {
                    warn!(node_id = %node, error = %e, "cluster: a spec poked by another gateway could not be read")
                }
            },
            // The listener connected (again): pokes sent while it was away
            // are lost, so each held session gets its node's latest spec
            // (commands are the sweep's), and waits look again.
            "" => {
                resend_specs(&shared);
                shared.ledger.changes().bump();
            }
            // A commit elsewhere: what a wait here reads may have changed.
            _ => shared.ledger.changes().bump(),
        }
    }
}

/// Sends every session this gateway holds its node's latest spec.
fn resend_specs(shared: &Shared) {
    for node in shared.hub.held() {
        match shared.ledger.read(|c| specs::latest(c, &node)) {
            Ok(Some(spec)) => {
                shared.hub.push_spec(&spec);
            }
            Ok(None) => {}
            Err(e) => warn!(node_id = %node, error = %e, "cluster: a spec to send again could not be read"),
        }
    }
}

/// The beat and the sweep, each every heartbeat interval until the stack
/// stops, each its own loop: the sweep's store calls wait for a shared
/// connection behind the sessions' calls, and the beat, which keeps the
/// gateway and its nodes alive in the store, must never wait behind them.
async fn beat(shared: Weak<Shared>, stop: watch::Receiver<Phase>) {
    let sweep = every(shared.clone(), stop.clone(), "sweep", |shared, _| sweep_once(shared));
    let beat = every(shared, stop, "beat", |shared, serving_for| {
        let options = &shared.settings.options;
        liveness_once(shared, options.listed && serving_for >= options.liveness_timeout)
    });
    tokio::join!(sweep, beat);
}

/// Runs `f` every heartbeat interval, off the runtime's workers (a beat
/// writes for every session the gateway holds; a sweep reads every
/// pending command), until the stack stops; `f` is told how long the
/// gateway has served.
async fn every(
    shared: Weak<Shared>,
    mut stop: watch::Receiver<Phase>,
    what: &'static str,
    f: impl Fn(&Shared, Duration) -> Result<()> + Send + Sync + Copy + 'static,
) {
    let interval = match shared.upgrade() {
        Some(shared) => shared.settings.heartbeat_interval,
        None => return,
    };
    let mut tick = tokio::time::interval(interval.max(Duration::from_millis(100)));
    let serving_since = std::time::Instant::now();
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => return,
        }
        let Some(shared) = shared.upgrade() else { return };
        if *stop.borrow() != Phase::Serving {
            return;
        }
        let serving_for = serving_since.elapsed();
        match tokio::task::spawn_blocking(move || f(&shared, serving_for)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => warn!(error = %e, what, "cluster: a run failed (the next one tries again)"),
            Err(e) => warn!(error = %e, what, "cluster: a run did not finish"),
        }
    }
}

/// One beat: the gateway's, its sessions' heard ages, and the unreachable
/// marks (once `judges`), all on the store's liveness lane.
///
/// A gateway judges liveness only once it has served for the liveness
/// timeout: a node can be heard only by a gateway that listens, so after
/// the whole control plane was down (a restart, a power cut) every node
/// gets the full timeout to come back before it counts as unreachable. A
/// gateway that joins others that were serving leaves the judging to them
/// meanwhile, and one nodes are not sent to (not listed: it hears no node)
/// never judges: while the listed ones were all down, it marked the nodes
/// that had not come back within the timeout of their last heard time.
fn liveness_once(shared: &Shared, judges: bool) -> Result<()> {
    let id = &shared.settings.options.gateway_id;
    let heard = shared.hub.heard();
    let timeout = shared.settings.options.liveness_timeout;
    // Small transactions: the gateway's beat, then its sessions' heard
    // ages a chunk at a time (`nodes::heard`: one transaction of thousands
    // lost its races on PostgreSQL until its nodes looked unreachable),
    // then the marks.
    let marked = shared.ledger.write_on(Lane::Liveness, |c| {
        gateways::beat(c, id)?;
        Ok(nodes::marked(c)?)
    })?;
    let entries: Vec<(&str, u64, u64)> = heard.iter().map(|(n, e, age)| (n.as_str(), *e, *age)).collect();
    for chunk in entries.chunks(nodes::HEARD_CHUNK) {
        shared.ledger.write_on(Lane::Liveness, |c| {
            for node_id in nodes::heard(c, chunk, &marked)? {
                info!(node_id = %node_id, "cluster: node heard again");
                c.publish(StackEvent::Reachable { node_id });
            }
            Ok(())
        })?;
    }
    if judges {
        shared.ledger.write_on(Lane::Liveness, |c| {
            let timeout_ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
            for node_id in nodes::mark_unreachable(c, timeout_ms)? {
                warn!(node_id = %node_id, timeout_ms, "cluster: node unreachable: no gateway heard from it");
                c.publish(StackEvent::Unreachable { node_id });
            }
            Ok(())
        })?;
    }
    Ok(())
}

/// One sweep: the usage meter, and a wake for each session this gateway
/// holds whose node has a command waiting (a lost poke costs at most an
/// interval).
fn sweep_once(shared: &Shared) -> Result<()> {
    let window = i64::try_from(shared.settings.options.usage_window.as_millis()).unwrap_or(i64::MAX);
    shared.ledger.write(|c| Ok(usage::meter(c, window)?))?;
    let waiting = shared.ledger.read(commands::nodes_with_pending)?;
    for node_id in waiting.iter().filter(|n| shared.hub.holds(n)) {
        debug!(node_id = %node_id, "cluster: the sweep wakes a session with a command waiting");
        shared.hub.send_local(node_id, Control::Wake);
    }
    Ok(())
}

/// The gateways nodes may dial, this one first: those that beat within
/// three heartbeat intervals (at least 15 s) and do not drain.
pub fn live(shared: &Shared) -> Result<Vec<crate::store::rows::GatewayRow>> {
    let fresh = i64::try_from((shared.settings.heartbeat_interval * 3).max(Duration::from_secs(15)).as_millis())
        .unwrap_or(i64::MAX);
    let mut all = shared.ledger.read(gateways::all)?;
    all.retain(|g| !g.draining && g.beat_ms_ago <= fresh);
    let me = &shared.settings.options.gateway_id;
    all.sort_by_key(|g| (&g.id != me, g.id.clone()));
    Ok(all)
}

/// Marks this gateway draining: the well-known document stops listing it.
pub fn drain(shared: &Shared) {
    let id = &shared.settings.options.gateway_id;
    if let Err(e) = shared.ledger.write(|c| Ok(gateways::set_draining(c, id)?)) {
        warn!(gateway = %id, error = %e, "cluster: could not mark the gateway draining");
    }
}

/// The store's gateways as a view reads them.
impl crate::view::StackView<'_> {
    /// Every registered gateway, by id: its URLs, when it beat, whether it
    /// drains and how many of its session writes the store fenced.
    pub fn gateways(&self) -> Vec<crate::store::rows::GatewayRow> {
        self.read(gateways::all)
    }
}
