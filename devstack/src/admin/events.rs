//! `GET /v1/events[?after=N][&watch=true]`: the stack's event stream as
//! newline-delimited JSON, one event a line (`StackEvent`'s JSON form). The
//! kept events numbered after N come first; with `watch` the response then
//! stays open and each new event follows as it happens, until the client
//! goes away or the stack stops. A watcher that fell behind gets one
//! `{"event":"missed","missed":K}` line.

use std::convert::Infallible;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{RawQuery, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use super::{ApiError, api};
use crate::events::Received;

pub(super) fn routes() -> Router<super::State> {
    Router::new().route(&format!("{}/events", api::PREFIX), get(events))
}

/// The query: `after` (a number) and `watch` (`true`, `1` or empty).
fn parse(query: Option<&str>) -> Result<(u64, bool), ApiError> {
    let (mut after, mut watch) = (0, false);
    for pair in query.unwrap_or_default().split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        match key {
            "after" => {
                after = value.parse().map_err(|_| ApiError::bad_request(format!("after={value:?} is not a number")))?
            }
            "watch" => watch = matches!(value, "" | "true" | "1"),
            other => return Err(ApiError::bad_request(format!("unknown query parameter {other:?}"))),
        }
    }
    Ok((after, watch))
}

fn line(value: &serde_json::Value) -> Result<Bytes, Infallible> {
    Ok(Bytes::from(format!("{value}\n")))
}

async fn events(State(s): State<super::State>, RawQuery(query): RawQuery) -> Result<Response, ApiError> {
    let (after, watch) = parse(query.as_deref())?;
    let mut subscription = s.stack.events(after);
    let (tx, rx) = mpsc::channel::<Result<Bytes, Infallible>>(64);
    let mut stop = s.stop.clone();
    let kept = if watch { usize::MAX } else { subscription.kept() };
    tokio::spawn(async move {
        for _ in 0..kept {
            let next = tokio::select! {
                next = subscription.next() => next,
                _ = stop.wait_for(|s| *s) => None,
            };
            let value = match next {
                Some(Received::Event(p)) => p.to_json(),
                Some(Received::Missed(n)) => serde_json::json!({ "event": "missed", "missed": n }),
                None => break,
            };
            if tx.send(line(&value)).await.is_err() {
                break;
            }
        }
    });
    let body = Body::from_stream(ReceiverStream::new(rx));
    Ok(([(header::CONTENT_TYPE, "application/x-ndjson")], body).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_query_names_where_to_start_and_whether_to_follow() {
        assert_eq!(parse(None).unwrap(), (0, false));
        assert_eq!(parse(Some("after=12&watch=true")).unwrap(), (12, true));
        assert_eq!(parse(Some("watch")).unwrap(), (0, true));
        assert!(parse(Some("after=x")).is_err());
        assert!(parse(Some("follow=1")).is_err());
    }
}
