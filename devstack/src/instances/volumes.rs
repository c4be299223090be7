//! Volumes of a VPS host's store: created on an adopted host of a
//! `vps-host` pool, grown (never shrunk), deleted once no instance
//! attaches them; each change is the host's next spec generation, and the
//! host's StatusReports say whether it holds them (`ready`, `failed`) and
//! confirm them gone (`deleted`).

use crate::store::Db;
use std::time::Duration;

use tracing::info;

use crate::clock::now_ms;
use crate::error::{Error, Result};
use crate::ids;
use crate::pools::KIND_VPS_HOST;
use crate::shared::Shared;
use crate::store::rows::NodeState;
use crate::store::rows::{InstanceDesired, VolumeRow, VolumeState};
use crate::store::{instances as instance_rows, nodes, pools, volumes as rows};
use crate::view::StackView;

pub fn create(shared: &Shared, node_id: &str, size_bytes: u64) -> Result<String> {
    let id = ids::volume_id();
    let spec = shared.ledger.write(|c| {
        let node = nodes::get(c, node_id)?.ok_or_else(|| Error::UnknownNode { node_id: node_id.into() })?;
        let pool = pools::get(c, &node.pool_id)?.ok_or_else(|| Error::UnknownPool { pool_id: node.pool_id.clone() })?;
        if pool.kind != KIND_VPS_HOST || node.state != NodeState::Adopted || size_bytes == 0 {
            return Err(Error::InvalidVolume {
                reason: format!("{size_bytes} bytes on node {node_id} ({}, pool kind {})", node.state, pool.kind),
            });
        }
        rows::insert(c, &id, node_id, size_bytes, 0, now_ms())?;
        let spec = super::respec(c, shared, node_id)?;
        rows::set_generation(c, &id, spec.generation)?;
        Ok(spec)
    })?;
    info!(volume_id = %id, node_id, size_bytes, generation = spec.generation, "volume: created");
    shared.hub.push_spec(&spec);
    Ok(id)
}

pub fn resize(shared: &Shared, volume_id: &str, size_bytes: u64) -> Result<()> {
    let spec = shared.ledger.write(|c| {
        let v = live(c, volume_id)?;
        if size_bytes < v.size_bytes {
            return Err(Error::InvalidVolume {
                reason: format!("volume {volume_id} is {} bytes: volumes are never shrunk", v.size_bytes),
            });
        }
        rows::resize(c, volume_id, size_bytes)?;
        super::respec(c, shared, &v.node_id)
    })?;
    shared.hub.push_spec(&spec);
    Ok(())
}

pub fn delete(shared: &Shared, volume_id: &str) -> Result<()> {
    let spec = shared.ledger.write(|c| {
        let v = live(c, volume_id)?;
        let users = instance_rows::on_node(c, &v.node_id)?;
        if let Some(user) = users
            .iter()
            .find(|i| i.desired != InstanceDesired::Deleted && i.spec.volumes.iter().any(|a| a.volume_id == volume_id))
        {
            return Err(Error::VolumeInUse { volume_id: volume_id.into(), instance_id: user.id.clone() });
        }
        rows::start_delete(c, volume_id, 0)?;
        let spec = super::respec(c, shared, &v.node_id)?;
        rows::start_delete(c, volume_id, spec.generation)?;
        Ok(spec)
    })?;
    info!(volume_id, generation = spec.generation, "volume: deleted");
    shared.hub.push_spec(&spec);
    Ok(())
}

/// A volume that is not deleted.
fn live(c: &Db<'_>, volume_id: &str) -> Result<VolumeRow> {
    match rows::get(c, volume_id)? {
        Some(v) if !v.deleting => Ok(v),
        _ => Err(Error::UnknownVolume { volume_id: volume_id.into() }),
    }
}

impl StackView<'_> {
    /// A volume.
    pub fn volume(&self, volume_id: &str) -> Option<VolumeRow> {
        self.read(|c| rows::get(c, volume_id))
    }

    /// Every volume, oldest first (deleted ones too).
    pub fn volumes(&self) -> Vec<VolumeRow> {
        self.read(rows::all)
    }
}

/// Waits until a volume is in `state`.
pub async fn await_volume_state(
    shared: &Shared,
    volume_id: &str,
    state: VolumeState,
    timeout: Duration,
) -> Result<VolumeRow> {
    shared
        .await_until(format!("volume {volume_id} to be {state}"), timeout, |v| {
            let row = v.volume(volume_id)?;
            v.note(format_args!("state {}, reason {:?}", row.state, row.reason));
            (row.state == state).then_some(row)
        })
        .await
}
