//! The rows of the store, one module per table group, as the in-process API
//! returns them; every row type of the dev stack lives here.

mod commands;
mod facts;
mod fleet;
mod gateways;
mod instances;
mod nodes;
mod otlp;
mod releases;
mod reservations;
mod sections;

pub use commands::{CommandRow, CommandStatus, CommandUpdateRow};
pub use facts::{
    CommandFact, FleetFacts, LivenessMark, ReleaseCause, ReservationFact, SessionFact, SpecDelivery, UsageWindow,
};
pub use fleet::FleetCounts;
pub use gateways::GatewayRow;
pub use instances::{InstanceDesired, InstanceRow, InstanceState, NodeLabelRow, VolumeRow, VolumeState};
pub use nodes::{
    InventoryRow, JoinMethod, JoinTokenRow, NodeBindingRow, NodeCertRow, NodeJoinRow, NodeKeyLevel, NodeRow,
    NodeSessionRow, NodeSpecRow, NodeState, PoolRow,
};
pub use otlp::OtlpExportRow;
pub use releases::{ReleaseArtifactRow, ReleaseRow};
pub use reservations::{ReservationRow, ReservationState};
pub use sections::{SectionState, SectionStatus};
