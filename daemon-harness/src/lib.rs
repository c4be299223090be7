//! The daemon harness (docs/harness.md): builds the fakehw bcd once per run
//! ([`build`], the `bcd-build` crate, which `devstack serve --sim` shares),
//! runs it through a [`runner`] (native, [`netns`] or
//! [`wsl_runner`]) under a [`supervisor`] that restarts it as systemd would,
//! and gives scenarios a [`node::Node`] handle whose output is captured
//! ([`logs`]) and checked for secrets. Missing prerequisites skip a scenario
//! locally and fail it under `CI=true` ([`prereq`]). Scenarios of several
//! gateways run each as a process of its own ([`gateways`]). The real-guest
//! scenarios run bcd's host build in a [`vps_host`] of their own, with its
//! libvirt, booting the cached [`guest`] image.
//!
//! The scenarios themselves live in `tests/e2e` (feature `bcd-e2e`) and
//! drive the dev stack in process.

pub use bcd_build as build;
pub mod gateways;
#[cfg(target_os = "linux")]
pub mod guest;
pub mod logs;
#[cfg(target_os = "linux")]
pub mod netns;
pub mod node;
pub mod prereq;
pub mod runner;
pub mod supervisor;
#[cfg(target_os = "linux")]
pub mod vps_host;
pub mod wsl_runner;
