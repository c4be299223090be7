//! The end-to-end scenarios (feature `bcd-e2e`): the fakehw bcd, built once
//! per run, against the dev stack under signed intent over real mTLS.
//! `BCD_E2E_RUNNER` picks where bcd runs (native, netns, wsl);
//! `BCD_E2E_LOG=1` streams every daemon's log.

mod access;
mod adoption;
mod bench;
mod chaos;
mod cold_start;
mod common;
mod console;
mod faults;
mod fleet_ops;
mod gateways;
mod guests;
mod guests_bench;
mod holds;
mod host;
mod intent;
mod invariants;
mod join;
mod knobs;
mod lifecycle;
mod placement;
mod plane;
mod real_vps;
mod runners;
mod scale;
mod telemetry;
mod tpm;
mod transports;
mod update;
mod vps;
mod vps_bench;
