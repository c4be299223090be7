//! The OTLP/HTTP receiver of node metrics (docs/protocol.md, "Telemetry"):
//! `POST /v1/metrics` on the HTTPS listener, from a node that presents its
//! certificate (the plain HTTP side refuses every export `cert-unknown`), an
//! `ExportMetricsServiceRequest` in its OTLP/JSON form (or binary protobuf)
//! whose every resource names that node in `bcd.node.id` (another node is
//! `node-mismatch`), checked against the metrics model and bounded in what
//! it decodes to (`validate`), then decoded with the `opentelemetry-proto`
//! crate's own types, never by hand. A node whose telemetry section names
//! a `headers_ref` must send that secret's headers (`headers`:
//! `otlp-unauthenticated` otherwise, before the body is read).
//!
//! Every export that decodes is kept in the store as the bytes received
//! (the newest `NodeLimits::otlp_exports_per_node` of a node, the newest
//! `NodeLimits::otlp_total_bytes` in all) and decoded again when read
//! ([`StackView::otlp_exports`]); it names its node by the resource
//! attribute `bcd.node.id`. One that does not decode is
//! answered HTTP 400 with an OTLP `Status` (`otlp-malformed: …`) and logged
//! by its size and where it broke, never with its body.

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, to_bytes};
use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use opentelemetry_proto::tonic::collector::metrics::v1::{ExportMetricsServiceRequest, ExportMetricsServiceResponse};
use opentelemetry_proto::tonic::common::v1::AnyValue as AnyValueMessage;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::metrics::v1::{Metric, NumberDataPoint, metric, number_data_point};
use prost::Message as _;
use tracing::{info, warn};

use crate::clock::now_ms;
use crate::error::Result;
use crate::gateway::auth;
use crate::shared::Shared;
use crate::status::Code;
use crate::store::otlp;
use crate::store::rows::OtlpExportRow;
use crate::tls::PeerInfo;
use crate::view::StackView;

mod headers;
mod validate;

/// The receiver's path (OTLP/HTTP's default for metrics).
pub const PATH: &str = "/v1/metrics";
/// The largest export the receiver reads (bcd's are a few KiB).
pub const MAX_EXPORT_BYTES: usize = 1024 * 1024;
/// The resource attribute that names the exporting node.
pub const NODE_ID_ATTRIBUTE: &str = "bcd.node.id";

/// How an export was encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    /// OTLP/JSON (`application/json`).
    Json,
    /// Binary protobuf (`application/x-protobuf`).
    Protobuf,
}

/// One export the receiver took.
#[derive(Clone, Debug)]
pub struct OtlpExport {
    /// The node its first resource names (`bcd.node.id`; empty when none).
    pub node_id: String,
    /// When the stack received it.
    pub received_at_ms: i64,
    /// How it was encoded.
    pub encoding: Encoding,
    /// The body exactly as received (for a second, independent decoder).
    pub body: Vec<u8>,
    /// The names of the headers it carried for its node's `headers_ref`
    /// (lowercase; empty without one). Their values are never kept.
    pub headers: Vec<String>,
    /// The decoded request.
    pub request: ExportMetricsServiceRequest,
}

impl OtlpExport {
    /// The attributes of the first resource, as `(key, value)` strings
    /// (non-string values in their JSON-ish form).
    pub fn resource_attributes(&self) -> Vec<(String, String)> {
        let Some(resource) = self.request.resource_metrics.first().and_then(|r| r.resource.as_ref()) else {
            return Vec::new();
        };
        resource.attributes.iter().map(|kv| (kv.key.clone(), any_to_string(kv.value.as_ref()))).collect()
    }

    /// Every metric of the export named `name`.
    pub fn metrics(&self, name: &str) -> Vec<&Metric> {
        self.request
            .resource_metrics
            .iter()
            .flat_map(|r| &r.scope_metrics)
            .flat_map(|s| &s.metrics)
            .filter(|m| m.name == name)
            .collect()
    }

    /// The names of every metric of the export, in order.
    pub fn metric_names(&self) -> Vec<String> {
        let all = self.request.resource_metrics.iter().flat_map(|r| &r.scope_metrics).flat_map(|s| &s.metrics);
        all.map(|m| m.name.clone()).collect()
    }

    /// The number data points of the gauge or sum `name`.
    pub fn points(&self, name: &str) -> Vec<&NumberDataPoint> {
        self.metrics(name)
            .into_iter()
            .flat_map(|m| match &m.data {
                Some(metric::Data::Gauge(g)) => g.data_points.iter().collect::<Vec<_>>(),
                Some(metric::Data::Sum(s)) => s.data_points.iter().collect(),
                _ => Vec::new(),
            })
            .collect()
    }
}

/// A data point's value as a float (an int as its value).
pub fn point_value(point: &NumberDataPoint) -> Option<f64> {
    match point.value? {
        number_data_point::Value::AsDouble(d) => Some(d),
        number_data_point::Value::AsInt(i) => Some(i as f64),
    }
}

/// A data point's attribute `key`, as a string.
pub fn point_attribute(point: &NumberDataPoint, key: &str) -> Option<String> {
    point.attributes.iter().find(|kv| kv.key == key).map(|kv| any_to_string(kv.value.as_ref()))
}

fn any_to_string(value: Option<&opentelemetry_proto::tonic::common::v1::AnyValue>) -> String {
    match value.and_then(|v| v.value.as_ref()) {
        Some(AnyValue::StringValue(s)) => s.clone(),
        Some(AnyValue::IntValue(i)) => i.to_string(),
        Some(AnyValue::DoubleValue(d)) => d.to_string(),
        Some(AnyValue::BoolValue(b)) => b.to_string(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}

impl Encoding {
    /// The value stored in `otlp_exports.encoding`.
    fn as_str(self) -> &'static str {
        match self {
            Encoding::Json => "json",
            Encoding::Protobuf => "protobuf",
        }
    }
}

/// A kept export, decoded again.
fn decoded(row: OtlpExportRow) -> Result<OtlpExport> {
    let encoding = if row.encoding == "protobuf" { Encoding::Protobuf } else { Encoding::Json };
    let request = decode(encoding, &row.body)
        .map_err(|m| crate::store::Error::corrupt("otlp_exports", "body", row.seq.to_string(), m.log))?;
    Ok(OtlpExport {
        node_id: row.node_id,
        received_at_ms: row.received_at_ms,
        encoding,
        body: row.body,
        headers: row.headers,
        request,
    })
}

impl StackView<'_> {
    /// The OTLP exports of a node the stack keeps, in the order received.
    pub fn otlp_exports(&self, node_id: &str) -> Vec<Arc<OtlpExport>> {
        self.read(|c| otlp::of_node(c, node_id)?.into_iter().map(|row| decoded(row).map(Arc::new)).collect())
    }
}

/// Why an export was refused.
struct Malformed {
    /// The answer's message (`otlp-malformed: …`).
    message: String,
    /// What the log says: where it broke, never the body.
    log: String,
}

fn decode(encoding: Encoding, body: &[u8]) -> std::result::Result<ExportMetricsServiceRequest, Malformed> {
    let not_json = |e: serde_json::Error| Malformed {
        message: format!("{}: not an OTLP/JSON ExportMetricsServiceRequest: {e}", Code::OtlpMalformed),
        log: format!("{:?} error at line {} column {}", e.classify(), e.line(), e.column()),
    };
    let invalid = |e: validate::Invalid| Malformed {
        message: format!("{}: not an OTLP/JSON ExportMetricsServiceRequest: {e}", Code::OtlpMalformed),
        log: e.to_string(),
    };
    match encoding {
        Encoding::Json => {
            let value: serde_json::Value = serde_json::from_slice(body).map_err(not_json)?;
            validate::check(&value, validate::LIMITS).map_err(invalid)?;
            serde_json::from_value(value).map_err(not_json)
        }
        Encoding::Protobuf => {
            let request = ExportMetricsServiceRequest::decode(body).map_err(|e| Malformed {
                message: format!("{}: not a protobuf ExportMetricsServiceRequest: {e}", Code::OtlpMalformed),
                log: "a protobuf decode error".to_string(),
            })?;
            bounded(&request).map_err(invalid)?;
            Ok(request)
        }
    }
}

/// A decoded protobuf export within the receiver's limits (a JSON one was
/// checked before it was decoded).
fn bounded(request: &ExportMetricsServiceRequest) -> std::result::Result<(), validate::Invalid> {
    let metrics = request.resource_metrics.iter().flat_map(|r| &r.scope_metrics).flat_map(|s| &s.metrics);
    let points: usize = metrics
        .map(|m| match &m.data {
            Some(metric::Data::Gauge(g)) => g.data_points.len(),
            Some(metric::Data::Sum(s)) => s.data_points.len(),
            Some(metric::Data::Histogram(h)) => h.data_points.len(),
            Some(metric::Data::ExponentialHistogram(h)) => h.data_points.len(),
            Some(metric::Data::Summary(s)) => s.data_points.len(),
            None => 0,
        })
        .sum();
    if points > validate::LIMITS.points {
        return Err(validate::Invalid {
            path: "resourceMetrics".into(),
            what: "more data points than the receiver takes",
        });
    }
    Ok(())
}

/// Whether every resource of an export names `node_id` in `bcd.node.id`:
/// the refusal (and its HTTP status) when one names another node or none.
fn names_only(request: &ExportMetricsServiceRequest, node_id: &str) -> std::result::Result<(), (StatusCode, String)> {
    for (i, resource) in request.resource_metrics.iter().enumerate() {
        let attributes = resource.resource.as_ref().map(|r| r.attributes.as_slice()).unwrap_or_default();
        let named = attributes.iter().rev().find(|kv| kv.key == NODE_ID_ATTRIBUTE);
        match named.map(|kv| kv.value.as_ref()) {
            None => {
                let what = format!("{}: resource {i} names no {NODE_ID_ATTRIBUTE}", Code::OtlpMalformed);
                return Err((StatusCode::BAD_REQUEST, what));
            }
            Some(Some(AnyValueMessage { value: Some(AnyValue::StringValue(named)) })) if named == node_id => {}
            Some(_) => {
                let what = format!(
                    "{}: resource {i} is not that of node {node_id}, whose certificate sent it",
                    Code::NodeMismatch
                );
                return Err((StatusCode::FORBIDDEN, what));
            }
        }
    }
    Ok(())
}

/// An OTLP `Status` answer (OTLP/HTTP's error body) with `status`.
fn refusal(status: StatusCode, message: String) -> Response {
    let body = serde_json::json!({ "code": 3, "message": message });
    (status, [(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
}

/// The HTTP status of a refusal's gRPC status, for the receiver's answers.
fn http_status(status: &tonic::Status) -> StatusCode {
    match status.code() {
        tonic::Code::Unauthenticated => StatusCode::UNAUTHORIZED,
        tonic::Code::PermissionDenied => StatusCode::FORBIDDEN,
        _ => StatusCode::SERVICE_UNAVAILABLE,
    }
}

/// `POST /v1/metrics` on the plain HTTP side: refused, since no node is
/// authenticated there.
pub async fn refuse_unauthenticated() -> Response {
    let message = format!(
        "{}: exports go to the HTTPS listener, with the node's certificate (docs/protocol.md, \"Telemetry\")",
        Code::CertUnknown
    );
    refusal(StatusCode::UNAUTHORIZED, message)
}

/// `POST /v1/metrics` on the HTTPS listener.
pub async fn receive(
    State(shared): State<Arc<Shared>>,
    ConnectInfo(peer): ConnectInfo<PeerInfo>,
    request_headers: HeaderMap,
    body: Body,
) -> Response {
    let node = match auth::authenticate_peer(&shared, Some(&peer)) {
        Ok(node) => node,
        Err(status) => {
            warn!(peer = %peer.remote_addr, code = crate::status::code_of(&status), "otlp: export refused");
            return refusal(http_status(&status), status.message().to_string());
        }
    };
    let header_names = match authenticated(&shared, &node.node_id, &request_headers) {
        Ok(names) => names,
        Err((status, message)) => return refusal(status, message),
    };
    let content_type = request_headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    let encoding = match content_type.split(';').next().unwrap_or("").trim() {
        "application/json" => Encoding::Json,
        "application/x-protobuf" => Encoding::Protobuf,
        other => {
            warn!(content_type = other, "otlp: export refused: neither application/json nor application/x-protobuf");
            let message = format!("{}: content type {other:?} is not an OTLP encoding", Code::OtlpMalformed);
            return refusal(StatusCode::UNSUPPORTED_MEDIA_TYPE, message);
        }
    };
    let Ok(bytes) = to_bytes(body, MAX_EXPORT_BYTES).await else {
        warn!(limit = MAX_EXPORT_BYTES, "otlp: export refused: unreadable or above the size limit");
        let message = format!("{}: an export above {MAX_EXPORT_BYTES} bytes", Code::OtlpMalformed);
        return refusal(StatusCode::PAYLOAD_TOO_LARGE, message);
    };
    let request = match decode(encoding, &bytes) {
        Ok(request) => request,
        Err(malformed) => {
            warn!(size = bytes.len(), ?encoding, error = %malformed.log, "otlp: malformed export refused");
            return refusal(StatusCode::BAD_REQUEST, malformed.message);
        }
    };
    let node_id = node.node_id;
    if let Err((status, message)) = names_only(&request, &node_id) {
        warn!(node_id = %node_id, %status, "otlp: export refused: it names another node, or none");
        return refusal(status, message);
    }
    let metrics: usize = request.resource_metrics.iter().flat_map(|r| &r.scope_metrics).map(|s| s.metrics.len()).sum();
    info!(node_id = %node_id, size = bytes.len(), metrics, ?encoding, "otlp: export received");
    let limits = &shared.settings.options.limits;
    let bounds = otlp::Bounds { per_node: limits.otlp_exports_per_node, total_bytes: limits.otlp_total_bytes };
    let kept = shared
        .ledger
        .write(|c| Ok(otlp::insert(c, &node_id, now_ms(), encoding.as_str(), &bytes, &header_names, bounds)?));
    if let Err(e) = kept {
        warn!(error = %e, "otlp: the export could not be kept");
        return (StatusCode::SERVICE_UNAVAILABLE, "the export could not be kept").into_response();
    }
    let reply = ExportMetricsServiceResponse { partial_success: None };
    match encoding {
        Encoding::Json => ([(header::CONTENT_TYPE, "application/json")], "{}").into_response(),
        Encoding::Protobuf => {
            ([(header::CONTENT_TYPE, "application/x-protobuf")], reply.encode_to_vec()).into_response()
        }
    }
}

/// The names of the headers an export of `node_id` carried for its
/// `headers_ref`, or the refusal's status and message
/// (`otlp-unauthenticated`, or 503 when the store cannot say).
fn authenticated(
    shared: &Shared,
    node_id: &str,
    sent: &HeaderMap,
) -> std::result::Result<Vec<String>, (StatusCode, String)> {
    let checked = match headers::required(shared, node_id) {
        Ok(None) => return Ok(Vec::new()),
        Ok(Some(required)) => required.and_then(|required| headers::check(&required, sent)),
        Err(e) => {
            warn!(node_id = %node_id, error = %e, "otlp: the node's headers_ref could not be read");
            return Err((StatusCode::SERVICE_UNAVAILABLE, "the export could not be checked".to_string()));
        }
    };
    checked.map_err(|why| {
        warn!(node_id = %node_id, code = %Code::OtlpUnauthenticated, why = %why.0, "otlp: export refused");
        (StatusCode::UNAUTHORIZED, format!("{}: {}", Code::OtlpUnauthenticated, why.0))
    })
}

/// Waits for an export of `node_id` for which `matches` holds (the first
/// such, in the order received), for at most `timeout`.
pub async fn await_export(
    shared: &Shared,
    node_id: &str,
    timeout: Duration,
    matches: impl Fn(&OtlpExport) -> bool + Send + Sync,
) -> Result<Arc<OtlpExport>> {
    shared
        .await_until(format!("an OTLP export of node {node_id}"), timeout, |v| {
            let received = v.otlp_exports(node_id);
            v.note(format_args!("{} exports", received.len()));
            received.into_iter().find(|e| matches(e))
        })
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXPORT: &str = r#"{"resourceMetrics":[{"resource":{"attributes":[
        {"key":"service.name","value":{"stringValue":"bcd"}},
        {"key":"bcd.node.id","value":{"stringValue":"node_1"}}]},
      "scopeMetrics":[{"scope":{"name":"bcd"},"metrics":[
        {"name":"bcd.gpu.utilization","unit":"1","gauge":{"dataPoints":[
          {"attributes":[{"key":"gpu.index","value":{"intValue":"3"}}],"timeUnixNano":"1700000000000000000","asDouble":0.5}]}},
        {"name":"bcd.gpu.memory.used","unit":"By","gauge":{"dataPoints":[
          {"timeUnixNano":"1700000000000000000","asInt":"1073741824"}]}},
        {"name":"bcd.instance.cpu.time","unit":"s","sum":{"aggregationTemporality":2,"isMonotonic":true,"dataPoints":[
          {"startTimeUnixNano":"1","timeUnixNano":"2","asDouble":1.5}]}}]}]}]}"#;

    #[test]
    fn an_otlp_json_export_decodes_with_the_crates_types() {
        let request = decode(Encoding::Json, EXPORT.as_bytes()).ok().expect("the export decodes");
        assert!(names_only(&request, "node_1").is_ok());
        assert_eq!(names_only(&request, "node_2").unwrap_err().0, StatusCode::FORBIDDEN);
        let export = OtlpExport {
            node_id: "node_1".into(),
            received_at_ms: 0,
            encoding: Encoding::Json,
            body: EXPORT.as_bytes().to_vec(),
            headers: Vec::new(),
            request,
        };
        assert_eq!(export.metric_names(), ["bcd.gpu.utilization", "bcd.gpu.memory.used", "bcd.instance.cpu.time"]);
        let gpu = export.points("bcd.gpu.utilization");
        assert_eq!((point_value(gpu[0]), point_attribute(gpu[0], "gpu.index")), (Some(0.5), Some("3".into())));
        assert_eq!(gpu[0].time_unix_nano, 1_700_000_000_000_000_000);
        assert_eq!(point_value(export.points("bcd.gpu.memory.used")[0]), Some(1073741824.0));
        let Some(metric::Data::Sum(sum)) = &export.metrics("bcd.instance.cpu.time")[0].data else { panic!("a sum") };
        assert!(sum.is_monotonic && sum.aggregation_temporality == 2);
        assert_eq!(export.resource_attributes()[0], ("service.name".into(), "bcd".into()));
    }

    #[test]
    fn a_malformed_export_is_refused_and_logged_without_its_body() {
        let body = br#"{"resourceMetrics":[{"scopeMetrics":"SECRET-LOOKING-BODY"}]}"#;
        let Err(malformed) = decode(Encoding::Json, body) else { panic!("refused") };
        assert!(malformed.message.starts_with("otlp-malformed: "), "{}", malformed.message);
        assert!(!malformed.log.contains("SECRET"), "{}", malformed.log);
        assert!(decode(Encoding::Protobuf, b"\xff\xff\xff").is_err());
    }
}
