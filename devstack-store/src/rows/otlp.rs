//! The rows of the OTLP exports the receiver kept, as received (they are
//! decoded when read).

/// One export, as received.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OtlpExportRow {
    /// The order of receipt.
    pub seq: i64,
    /// The node that sent it.
    pub node_id: String,
    /// When the stack received it.
    pub received_at_ms: i64,
    /// `json` or `protobuf`.
    pub encoding: String,
    /// The body exactly as received.
    pub body: Vec<u8>,
    /// The names of the headers the receiver checked against the node's
    /// `headers_ref` (lowercase; never their values).
    pub headers: Vec<String>,
}
