//! What a host's StatusReport says of its instances and volumes: each
//! `InstanceStatus` moves its instance to the state the host reports (with
//! the host's message as the reason), an instance or volume out of the
//! spec is `deleted` once a report at or after the generation that removed
//! it no longer lists it, and the pool's unschedulable instances are placed
//! again (a host joined, announced a runtime, or freed room).

use std::collections::HashSet;

use crate::store::Db;
use tracing::{info, warn};

use crate::error::Result;
use crate::gateway::handlers::{Effects, Event, EventHandler};
use crate::store::rows::{InstanceDesired, InstanceState, VolumeState};
use crate::store::{instances as rows, nodes, volumes};

/// The report part that records instance and volume statuses.
pub struct Reports;

impl EventHandler<proto::StatusReport> for Reports {
    fn record(&self, event: &Event<'_>, report: &proto::StatusReport) -> Result<Effects> {
        let node_id = event.node_id();
        let now = event.now_ms;
        instances(event.c, node_id, report, now)?;
        volumes_of(event.c, node_id, report, now)?;
        let Some(node) = nodes::get(event.c, node_id)? else { return Ok(Effects::default()) };
        let specs = super::reschedule(event.c, event.shared, &node.pool_id)?;
        Ok(Effects { specs, ..Effects::default() })
    }
}

/// Applies the report's instance statuses and confirms deletions.
fn instances(c: &Db<'_>, node_id: &str, report: &proto::StatusReport, now: i64) -> Result<()> {
    let placed = rows::on_node(c, node_id)?;
    let mut listed = HashSet::new();
    for st in &report.instances {
        listed.insert(st.id.as_str());
        let Some(row) = placed.iter().find(|r| r.id == st.id) else {
            warn!(node_id, instance_id = %st.id, "instance: status of an instance not placed on this node");
            continue;
        };
        let Some(state) = InstanceState::reported(&st.state) else {
            warn!(node_id, instance_id = %st.id, state = %st.state, "instance: unknown reported state");
            continue;
        };
        if rows::report(c, &row.id, state, &st.message, now)? {
            info!(node_id, instance_id = %row.id, %state, reason = %st.message, "instance: state");
        }
        if st.current_memory_bytes != 0 && rows::report_memory(c, &row.id, st.current_memory_bytes)? {
            info!(node_id, instance_id = %row.id, current_memory_bytes = st.current_memory_bytes, "instance: memory");
        }
    }
    for row in &placed {
        let removed = row.desired == InstanceDesired::Deleted
            && row.delete_generation.is_some_and(|g| g <= report.applied_generation);
        if removed && !listed.contains(row.id.as_str()) && rows::finish_delete(c, &row.id, now)? {
            info!(node_id, instance_id = %row.id, "instance: deleted on its host");
        }
    }
    Ok(())
}

/// Applies the report's volume statuses and confirms deletions.
fn volumes_of(c: &Db<'_>, node_id: &str, report: &proto::StatusReport, now: i64) -> Result<()> {
    let held = volumes::on_node(c, node_id)?;
    let mut listed = HashSet::new();
    for st in &report.volumes {
        listed.insert(st.id.as_str());
        let Some(row) = held.iter().find(|v| v.id == st.id) else { continue };
        let state = match st.state.as_str() {
            "ready" => VolumeState::Ready,
            "failed" => VolumeState::Failed,
            other => {
                warn!(node_id, volume_id = %st.id, state = other, "volume: unknown reported state");
                continue;
            }
        };
        if volumes::report(c, &row.id, state, &st.message)? {
            info!(node_id, volume_id = %row.id, %state, reason = %st.message, "volume: state");
        }
    }
    for row in &held {
        let removed = row.deleting && row.delete_generation.is_some_and(|g| g <= report.applied_generation);
        if removed && !listed.contains(row.id.as_str()) && volumes::finish_delete(c, &row.id, now)? {
            info!(node_id, volume_id = %row.id, "volume: deleted on its host");
        }
    }
    Ok(())
}
