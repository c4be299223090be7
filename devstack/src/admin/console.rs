//! `GET /v1/nodes/{node}/console?rows=R&cols=C&term=T`: a console on a
//! node's shell for `devstack console` (docs/devstack.md, "The console
//! route"). The route names the node, opens the console
//! ([`DevStack::open_console_with`]) before it upgrades, so that an unknown
//! node, a node without a live session, a stack without signed intent and
//! `tunnel-limit` are plain refusals (`{"error": …}`) the client prints;
//! then it upgrades to a WebSocket and pumps the console's two halves, each
//! in its own future: binary messages are the terminal's bytes both ways,
//! text messages the JSON [`ConsoleControl`]s (a resize from the client;
//! the end, `exit` or `closed`, from here, last). A client that goes away
//! hangs the console up. Neither the ticket nor a byte of the terminal is
//! logged.
//!
//! [`DevStack::open_console_with`]: crate::DevStack::open_console_with

use axum::Router;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, RawQuery, State};
use axum::http::HeaderValue;
use axum::response::Response;
use axum::routing::get;
use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{SinkExt as _, StreamExt as _};
use tokio::sync::watch;
use tracing::{debug, info};

use super::api::{self, CONSOLE_NODE_HEADER, CONSOLE_TUNNEL_HEADER, ConsoleControl};
use super::{ApiError, resolve_node};
use crate::error::Error;
use crate::status::Code;
use crate::tunnels::{Console, ConsoleEnd, ConsoleEvent, ConsoleOptions, ConsoleReader, ConsoleSize, ConsoleWriter};

/// The ticket's `sub` of a console opened here.
pub const SUBJECT: &str = "devstack-admin";
/// The largest terminal side the route takes.
const MAX_SIDE: u32 = 10_000;
/// The longest `term` the route takes.
const MAX_TERM: usize = 64;
/// How long the end waits for the client's close before the socket drops.
const CLOSE_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

pub(super) fn routes() -> Router<super::State> {
    Router::new().route(&format!("{}/nodes/{{node}}/console", api::PREFIX), get(console))
}

/// What the query asks for: the terminal's size and its TERM.
#[derive(Debug, PartialEq, Eq)]
struct Wanted {
    size: ConsoleSize,
    term: Option<String>,
}

/// Parses `rows`, `cols` (1 to 10000; 24 × 80 when absent) and `term`
/// (letters, digits and `.`, `_`, `+`, `-`; the stack's default when absent).
fn parse(query: Option<&str>) -> Result<Wanted, ApiError> {
    let mut wanted = Wanted { size: ConsoleSize::default(), term: None };
    for pair in query.unwrap_or_default().split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let side =
            || {
                value.parse::<u32>().ok().filter(|n| (1..=MAX_SIDE).contains(n)).ok_or_else(|| {
                    ApiError::bad_request(format!("{key}={value:?} is not a number from 1 to {MAX_SIDE}"))
                })
            };
        match key {
            "rows" => wanted.size.rows = side()?,
            "cols" => wanted.size.cols = side()?,
            "term" => {
                let ok = !value.is_empty()
                    && value.len() <= MAX_TERM
                    && value.bytes().all(|b| b.is_ascii_alphanumeric() || b"._+-".contains(&b));
                if !ok {
                    return Err(ApiError::bad_request(format!(
                        "term={value:?} is not a terminal type (letters, digits, `.`, `_`, `+`, `-`)"
                    )));
                }
                wanted.term = Some(value.to_string());
            }
            other => return Err(ApiError::bad_request(format!("unknown query parameter {other:?}"))),
        }
    }
    Ok(wanted)
}

/// Why the stack would not open the console, for the person who asked.
fn refused(e: Error) -> ApiError {
    match e {
        Error::NoSignedIntent => ApiError::conflict(
            Code::FeatureOff,
            "consoles need signed intent (the exec tickets are signed by its tunnels issuer): \
             restart the stack with `devstack serve --signed-intent`",
        ),
        Error::NoSession { node_id } => ApiError::conflict(
            Code::NodeOffline,
            format!("node {node_id} has no live session: a console opens only on a connected node"),
        ),
        other => other.into(),
    }
}

async fn console(
    State(s): State<super::State>,
    Path(node): Path<String>,
    RawQuery(query): RawQuery,
    upgrade: WebSocketUpgrade,
) -> Result<Response, ApiError> {
    let wanted = parse(query.as_deref())?;
    let row = resolve_node(&s.stack, &node)?;
    let defaults = ConsoleOptions::default();
    let options = ConsoleOptions {
        size: wanted.size,
        term: wanted.term.unwrap_or(defaults.term),
        subject: SUBJECT.to_string(),
        ..defaults
    };
    let console = s.stack.open_console_with(&row.id, options).await.map_err(refused)?;
    let tunnel_id = console.tunnel_id().to_string();
    info!(node_id = row.id, tunnel_id, "admin: console opened");
    let stop = s.stop.clone();
    let mut response = upgrade
        .on_failed_upgrade(|e| debug!(error = %e, "admin: a console's upgrade failed; it is hung up"))
        .on_upgrade(move |socket| pump(socket, console, stop));
    for (name, value) in [(CONSOLE_NODE_HEADER, &row.id), (CONSOLE_TUNNEL_HEADER, &tunnel_id)] {
        if let Ok(value) = HeaderValue::from_str(value) {
            response.headers_mut().insert(name, value);
        }
    }
    Ok(response)
}

/// Pumps both halves until the console ended (the end is sent, then a
/// close), the client went away, or the endpoint stops; the halves drop
/// with it, which hangs the console up if it still runs.
///
/// After the end the client's side is still read, for at most
/// [`CLOSE_WAIT`], until its close or its going away: a socket dropped with
/// the client's last frames unread is reset by the kernel, and a reset can
/// reach the client before it read the end (it then saw `tunnel-gone`
/// instead of the shell's status: a piped `echo … | devstack console`
/// failed so now and then).
async fn pump(socket: WebSocket, console: Console, stop: watch::Receiver<bool>) {
    let tunnel_id = console.tunnel_id().to_string();
    let (writer, reader) = console.split();
    let (sink, stream) = socket.split();
    let up = up(stream, &writer);
    tokio::pin!(up);
    let how = tokio::select! {
        end = down(reader, sink, stop) => {
            let _ = tokio::time::timeout(CLOSE_WAIT, &mut up).await;
            end.map_or("the client went away".to_string(), |e| e.to_string())
        }
        () = &mut up => "the client hung up".to_string(),
    };
    info!(tunnel_id, how, "admin: console ended");
}

/// The console's events to the client: output as binary messages, the end
/// as a [`ConsoleControl`], then a close. Returns the end (None when the
/// client was gone before it).
async fn down(
    mut reader: ConsoleReader,
    mut sink: SplitSink<WebSocket, Message>,
    mut stop: watch::Receiver<bool>,
) -> Option<ConsoleEnd> {
    let end = loop {
        let event = tokio::select! {
            event = reader.next() => event,
            _ = stop.wait_for(|s| *s) => {
                Some(ConsoleEvent::Ended(ConsoleEnd::Closed(format!("{}: the dev stack is stopping", Code::Draining))))
            }
        };
        match event {
            Some(ConsoleEvent::Output(bytes)) => {
                if sink.send(Message::Binary(bytes.into())).await.is_err() {
                    return None;
                }
            }
            Some(ConsoleEvent::Opened) => {}
            Some(ConsoleEvent::Ended(end)) => break end,
            // The reader says None only after its end, which breaks above.
            None => return None,
        }
    };
    let control = match &end {
        ConsoleEnd::Exited(code) => ConsoleControl::Exit(*code),
        ConsoleEnd::Closed(reason) => ConsoleControl::Closed(reason.clone()),
    };
    let text = serde_json::to_string(&control).unwrap_or_default();
    let _ = sink.send(Message::Text(text.into())).await;
    let close = CloseFrame { code: axum::extract::ws::close_code::NORMAL, reason: "console ended".into() };
    let _ = sink.send(Message::Close(Some(close))).await;
    Some(end)
}

/// The client's messages to the console: bytes typed, resizes. Returns when
/// the client closes or goes away; a console that ended meanwhile is
/// [`down`]'s to report, so a write to it is dropped here.
async fn up(mut stream: SplitStream<WebSocket>, writer: &ConsoleWriter) {
    while let Some(Ok(message)) = stream.next().await {
        match message {
            Message::Binary(bytes) => {
                let _ = writer.write(bytes.to_vec()).await;
            }
            Message::Text(text) => match serde_json::from_str::<ConsoleControl>(&text) {
                Ok(ConsoleControl::Resize { rows, cols })
                    if [rows, cols].iter().all(|n| (1..=MAX_SIDE).contains(n)) =>
                {
                    let _ = writer.resize(ConsoleSize { rows, cols }).await;
                }
                // The message may hold typed bytes by mistake: its text stays out of the log.
                _ => debug!(bytes = text.len(), "admin: a console text message that is no resize ignored"),
            },
            Message::Close(_) => return,
            Message::Ping(_) | Message::Pong(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_query_names_the_size_and_the_terminal() {
        let default = Wanted { size: ConsoleSize::default(), term: None };
        assert_eq!(parse(None).unwrap(), default);
        let asked = parse(Some("rows=30&cols=100&term=tmux-256color")).unwrap();
        assert_eq!(asked, Wanted { size: ConsoleSize { rows: 30, cols: 100 }, term: Some("tmux-256color".into()) });
        for bad in ["rows=0", "cols=x", "rows=10001", "term=", "term=a%20b", "term=$(id)", "shell=bash"] {
            assert!(parse(Some(bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_control_messages_are_small_json_objects() {
        let json = |c: &ConsoleControl| serde_json::to_string(c).unwrap();
        assert_eq!(json(&ConsoleControl::Resize { rows: 40, cols: 120 }), r#"{"resize":{"rows":40,"cols":120}}"#);
        assert_eq!(json(&ConsoleControl::Exit(5)), r#"{"exit":5}"#);
        assert_eq!(json(&ConsoleControl::Closed("tunnel-gone: x".into())), r#"{"closed":"tunnel-gone: x"}"#);
        let back: ConsoleControl = serde_json::from_str(r#"{"exit": 130}"#).unwrap();
        assert_eq!(back, ConsoleControl::Exit(130));
    }
}
