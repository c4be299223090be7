//! The client of the console route (docs/devstack.md, "The console
//! route"): [`AdminClient::console`] opens a console on a node over a
//! WebSocket to the admin endpoint (the bearer token in the upgrade
//! request) and gives a [`ConsoleConnection`], which splits into a
//! [`ConsoleSender`] (typed bytes, resizes, the hang-up) and a
//! [`ConsoleReceiver`] (the terminal's output, then exactly one end), to be
//! driven from two futures at once so that neither direction waits for the
//! other. A refusal before the upgrade is the endpoint's sentence, as for
//! every other route.

use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{SinkExt as _, StreamExt as _};
use http::{HeaderValue, StatusCode, header};
use tokio::net::TcpStream;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;
use tokio_tungstenite::tungstenite::{self, Message};

use super::api::{self, CONSOLE_NODE_HEADER, CONSOLE_TUNNEL_HEADER, ConsoleControl};
use super::client::{AdminClient, ClientError};
use super::query::encode as segment;
use crate::status::Code;
use crate::tunnels::{ConsoleEnd, ConsoleEvent, ConsoleSize};

type Socket = WebSocketStream<TcpStream>;

/// What console to open.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsoleRequest {
    /// The node: its id, a unique prefix of it, or its unique hostname.
    pub node: String,
    /// The caller's terminal.
    pub size: ConsoleSize,
    /// The caller's TERM (the stack's default when None).
    pub term: Option<String>,
}

/// An open console: what the endpoint named, and the socket.
pub struct ConsoleConnection {
    node_id: String,
    tunnel_id: String,
    socket: Socket,
}

/// The sending half of a console.
pub struct ConsoleSender {
    sink: SplitSink<Socket, Message>,
}

/// The receiving half of a console.
pub struct ConsoleReceiver {
    stream: SplitStream<Socket>,
    ended: bool,
}

/// The route's path and query for `request`.
fn path(request: &ConsoleRequest) -> String {
    let size = request.size;
    let mut path =
        format!("{}/nodes/{}/console?rows={}&cols={}", api::PREFIX, segment(&request.node), size.rows, size.cols);
    if let Some(term) = &request.term {
        path.push_str(&format!("&term={}", segment(term)));
    }
    path
}

impl AdminClient {
    /// Opens a console as `request` says. Fails with the endpoint's words
    /// for an unknown node, a node without a live session, a stack without
    /// signed intent, `tunnel-limit`, or a refused token.
    pub async fn console(&self, request: &ConsoleRequest) -> Result<ConsoleConnection, ClientError> {
        let url = format!("ws://{}{}", self.authority(), path(request));
        let mut upgrade = url.into_client_request().map_err(|e| self.protocol(e))?;
        let bearer = HeaderValue::from_str(&self.bearer()).map_err(|e| self.protocol(e))?;
        upgrade.headers_mut().insert(header::AUTHORIZATION, bearer);
        let stream = TcpStream::connect(self.authority()).await.map_err(|e| self.unreachable(e))?;
        let (socket, response) = match tokio_tungstenite::client_async(upgrade, stream).await {
            Ok(answer) => answer,
            Err(tungstenite::Error::Http(refused)) => {
                let status = StatusCode::from_u16(refused.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
                return Err(self.refusal(status, refused.body().as_deref().unwrap_or_default()));
            }
            Err(e) => return Err(self.protocol(format!("the console's upgrade: {e}"))),
        };
        let named = |name: &str| {
            response.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_string).unwrap_or_default()
        };
        Ok(ConsoleConnection { node_id: named(CONSOLE_NODE_HEADER), tunnel_id: named(CONSOLE_TUNNEL_HEADER), socket })
    }
}

impl ConsoleConnection {
    /// The node's id.
    pub fn node_id(&self) -> &str {
        &self.node_id
    }

    /// The tunnel's id (the stack's log names the console by it).
    pub fn tunnel_id(&self) -> &str {
        &self.tunnel_id
    }

    /// The two halves.
    pub fn split(self) -> (ConsoleSender, ConsoleReceiver) {
        let (sink, stream) = self.socket.split();
        (ConsoleSender { sink }, ConsoleReceiver { stream, ended: false })
    }
}

/// A send on a socket that is gone.
fn gone(e: tungstenite::Error) -> ClientError {
    ClientError::Protocol { url: "the console's WebSocket".into(), reason: e.to_string() }
}

impl ConsoleSender {
    /// Types `bytes` into the console.
    pub async fn write(&mut self, bytes: impl Into<Vec<u8>>) -> Result<(), ClientError> {
        self.sink.send(Message::binary(bytes.into())).await.map_err(gone)
    }

    /// Resizes the console's terminal.
    pub async fn resize(&mut self, size: ConsoleSize) -> Result<(), ClientError> {
        let control = ConsoleControl::Resize { rows: size.rows, cols: size.cols };
        let text = serde_json::to_string(&control).unwrap_or_default();
        self.sink.send(Message::text(text)).await.map_err(gone)
    }

    /// Hangs the console up: a close, after which the stack ends the tunnel
    /// and bcd hangs the shell up.
    pub async fn close(&mut self) -> Result<(), ClientError> {
        self.sink.close().await.map_err(gone)
    }
}

impl ConsoleReceiver {
    /// The next event: output, then exactly one `Ended`; None after it. A
    /// connection that ends without the end is `Closed("tunnel-gone: …")`.
    /// Cancel-safe.
    pub async fn next(&mut self) -> Option<ConsoleEvent> {
        if self.ended {
            return None;
        }
        let event = loop {
            match self.stream.next().await {
                Some(Ok(Message::Binary(bytes))) => break ConsoleEvent::Output(bytes.to_vec()),
                Some(Ok(Message::Text(text))) => match serde_json::from_str::<ConsoleControl>(&text) {
                    Ok(ConsoleControl::Exit(code)) => break ConsoleEvent::Ended(ConsoleEnd::Exited(code)),
                    Ok(ConsoleControl::Closed(reason)) => break ConsoleEvent::Ended(ConsoleEnd::Closed(reason)),
                    // A message this client does not know is skipped.
                    _ => continue,
                },
                Some(Ok(Message::Close(_))) | None => {
                    let why = format!(
                        "{}: the admin endpoint closed the console without saying how it ended",
                        Code::TunnelGone
                    );
                    break ConsoleEvent::Ended(ConsoleEnd::Closed(why));
                }
                Some(Ok(_)) => continue,
                Some(Err(e)) => {
                    let why =
                        format!("{}: the console's connection to the admin endpoint broke: {e}", Code::TunnelGone);
                    break ConsoleEvent::Ended(ConsoleEnd::Closed(why));
                }
            }
        };
        self.ended = matches!(event, ConsoleEvent::Ended(_));
        Some(event)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_names_the_node_size_and_terminal_in_the_path() {
        let request = ConsoleRequest {
            node: "fakehw 41/x".into(),
            size: ConsoleSize { rows: 30, cols: 100 },
            term: Some("tmux-256color".into()),
        };
        assert_eq!(path(&request), "/v1/nodes/fakehw%2041%2Fx/console?rows=30&cols=100&term=tmux-256color");
        let plain = ConsoleRequest { node: "node_ab".into(), size: ConsoleSize::default(), term: None };
        assert_eq!(path(&plain), "/v1/nodes/node_ab/console?rows=24&cols=80");
    }
}
