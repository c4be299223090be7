//! The wall clock, in Unix milliseconds (the protocol's unit of time), and
//! the test knob that runs a gateway process's clock off (`devstack gateway
//! --clock-offset`): what a skewed gateway stamps (its Welcome's server
//! time, the rows it writes) moves with it; liveness never reads it (the
//! store's clock and the gateways' monotonic ages decide who is heard).

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// How far this process's clock runs off (a test knob; 0 otherwise).
static OFFSET_MS: AtomicI64 = AtomicI64::new(0);

/// Runs this process's clock `offset_ms` off (a test knob).
pub fn set_offset_ms(offset_ms: i64) {
    OFFSET_MS.store(offset_ms, Ordering::Relaxed);
}

/// Now, in Unix milliseconds (with the test offset). A clock before 1970
/// reads as 0.
pub fn now_ms() -> i64 {
    to_ms(SystemTime::now()).saturating_add(OFFSET_MS.load(Ordering::Relaxed)).max(0)
}

/// A `SystemTime` in Unix milliseconds (0 before 1970).
pub fn to_ms(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}
