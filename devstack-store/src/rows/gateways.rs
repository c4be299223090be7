//! The rows of the gateways of a store.

/// One gateway process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GatewayRow {
    /// Its id (`g1`, …).
    pub id: String,
    /// The gRPC gateway URL nodes dial.
    pub grpc_url: String,
    /// Its HTTPS listener's base URL (the WebSocket session, renewal, OTLP).
    pub https_url: String,
    /// When it started (its own clock).
    pub started_at_ms: i64,
    /// How long ago it last beat, by the store's clock.
    pub beat_ms_ago: i64,
    /// Whether it drains (or stopped): nodes are not sent to it.
    pub draining: bool,
    /// How many of its session-scoped writes the store fenced.
    pub fenced_writes: u64,
}
