//! The wall clock, in Unix milliseconds (the protocol's unit of time).

use std::time::{SystemTime, UNIX_EPOCH};

/// Now, in Unix milliseconds. A clock before 1970 reads as 0.
pub fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

/// A `SystemTime` in Unix milliseconds (0 before 1970).
pub fn to_ms(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}
