//! `Gateway.Tunnel` (docs/protocol.md, "Tunnels"): the node's first frame
//! names its tunnel and carries either the ticket (bcd took it and started
//! its shell: the stream is paired with the console's caller and relayed
//! both ways) or a close reason (bcd refused the ticket: the caller is told
//! `"<code>: …"` and the stream ends). A tunnel ends on the shell's exit
//! status, on either side going away (the other side is told at once), or
//! on the stack's shutdown. Neither the ticket nor a relayed byte is ever
//! logged.

use std::sync::Arc;
use std::time::Duration;

use proto::tunnel_frame::Frame as Tf;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Status, Streaming};
use tracing::{debug, info, warn};

use super::Registry;
use super::console::{CallerSide, ConsoleEnd, ConsoleEvent, ConsoleInput};
use crate::gateway::auth::AuthedNode;
use crate::gateway::handlers::{TunnelHandler, TunnelStream};
use crate::status::{Code, refuse};

/// How long the gateway waits for a Tunnel call's first frame.
const FIRST_FRAME_WAIT: Duration = Duration::from_secs(10);
/// How many frames may wait for a slow node.
const OUTBOUND_BUFFER: usize = 64;

/// The response stream of a Tunnel call.
pub(crate) type Outbound = ReceiverStream<Result<proto::TunnelFrame, Status>>;

/// `Gateway.Tunnel` over the stack's tunnels.
pub struct Relay(pub Arc<Registry>);

#[tonic::async_trait]
impl TunnelHandler for Relay {
    async fn accept(&self, node: AuthedNode, inbound: Streaming<proto::TunnelFrame>) -> Result<TunnelStream, Status> {
        Ok(Box::pin(accept(self.0.clone(), node, inbound).await?))
    }
}

/// Answers a node's Tunnel call: pairs it by its first frame, then relays
/// it in its own task.
async fn accept(
    tunnels: Arc<Registry>,
    node: AuthedNode,
    mut inbound: Streaming<proto::TunnelFrame>,
) -> Result<Outbound, Status> {
    let first = match tokio::time::timeout(FIRST_FRAME_WAIT, inbound.message()).await {
        Err(_) => return Err(refuse(Code::TunnelUnknown, "no first frame in time")),
        Ok(Err(status)) => return Err(status),
        Ok(Ok(None)) => return Err(refuse(Code::TunnelUnknown, "the stream ended before its first frame")),
        Ok(Ok(Some(first))) => first,
    };
    let node_id = node.node_id.as_str();
    let tunnel_id = first.tunnel_id;
    let (tx, rx) = mpsc::channel(OUTBOUND_BUFFER);
    match first.frame {
        Some(Tf::CloseReason(reason)) => {
            let caller = tunnels.claim(&tunnel_id, node_id, None).map_err(refusal)?;
            let code = reason.split(':').next().unwrap_or_default();
            warn!(node_id, tunnel_id, code, "tunnel: the node refused to open it");
            caller.end(ConsoleEnd::Closed(reason)).await;
            Ok(ReceiverStream::new(rx))
        }
        Some(Tf::Ticket(ticket)) => {
            let caller = match tunnels.claim(&tunnel_id, node_id, Some(&ticket)) {
                Ok(caller) => caller,
                Err(unpaired) => {
                    let status = refuse(unpaired.code, &unpaired.detail);
                    if let Some(caller) = unpaired.caller {
                        caller.end(ConsoleEnd::Closed(status.message().to_string())).await;
                    }
                    warn!(node_id, tunnel_id, message = status.message(), "tunnel: refused");
                    return Err(status);
                }
            };
            info!(node_id, tunnel_id, "tunnel: opened");
            let _ = caller.events.send(ConsoleEvent::Opened).await;
            tokio::spawn(run(tunnels, node.node_id.clone(), tunnel_id, inbound, tx, caller));
            Ok(ReceiverStream::new(rx))
        }
        _ => Err(refuse(Code::TunnelUnknown, "the first frame carries neither ticket nor close reason")),
    }
}

fn refusal(unpaired: super::registry::Unpaired) -> Status {
    refuse(unpaired.code, unpaired.detail)
}

/// Why a relay ended: what the caller is told, and what the node is told
/// (None when the node's side is the one that ended).
struct Ending {
    caller: ConsoleEnd,
    node: Option<String>,
}

/// Relays an open tunnel until it ends, then forgets it.
async fn run(
    tunnels: Arc<Registry>,
    node_id: String,
    tunnel_id: String,
    inbound: Streaming<proto::TunnelFrame>,
    out: mpsc::Sender<Result<proto::TunnelFrame, Status>>,
    caller: CallerSide,
) {
    let ending = relay(&tunnels, &tunnel_id, inbound, &out, caller.input, &caller.events).await;
    if let Some(reason) = &ending.node {
        let f = proto::TunnelFrame { tunnel_id: tunnel_id.clone(), frame: Some(Tf::CloseReason(reason.clone())) };
        let _ = out.send(Ok(f)).await;
    }
    match &ending.caller {
        ConsoleEnd::Exited(code) => info!(node_id, tunnel_id, exit_code = code, "tunnel: closed"),
        ConsoleEnd::Closed(reason) => info!(node_id, tunnel_id, reason, "tunnel: closed"),
    }
    let _ = caller.events.send(ConsoleEvent::Ended(ending.caller)).await;
    tunnels.end(&tunnel_id);
}

/// The relay loop: the node's data to the caller, the caller's input to
/// the node, until an exit status, a close reason, or either side's end.
async fn relay(
    tunnels: &Registry,
    tunnel_id: &str,
    mut inbound: Streaming<proto::TunnelFrame>,
    out: &mpsc::Sender<Result<proto::TunnelFrame, Status>>,
    mut input: mpsc::Receiver<ConsoleInput>,
    events: &mpsc::Sender<ConsoleEvent>,
) -> Ending {
    let gone = |what: &str| format!("{}: {what}", Code::TunnelGone);
    let caller_gone = || Ending {
        caller: ConsoleEnd::Closed(gone("the caller went away")),
        node: Some(gone("the caller went away")),
    };
    let mut closing = tunnels.closing();
    let frame = |f: Tf| Ok(proto::TunnelFrame { tunnel_id: tunnel_id.to_string(), frame: Some(f) });
    loop {
        tokio::select! {
            message = inbound.message() => match message {
                Ok(Some(f)) => match f.frame {
                    Some(Tf::Data(data)) => {
                        if events.send(ConsoleEvent::Output(data)).await.is_err() {
                            return caller_gone();
                        }
                    }
                    Some(Tf::ExitCode(code)) => return Ending { caller: ConsoleEnd::Exited(code), node: None },
                    Some(Tf::CloseReason(reason)) => return Ending { caller: ConsoleEnd::Closed(reason), node: None },
                    _ => debug!(tunnel_id, "tunnel: a node frame without meaning here ignored"),
                },
                Ok(None) => {
                    let what = "the node ended the stream without an exit status";
                    return Ending { caller: ConsoleEnd::Closed(gone(what)), node: None };
                }
                Err(status) => {
                    let what = format!("the node's stream broke: {}", status.code());
                    return Ending { caller: ConsoleEnd::Closed(gone(&what)), node: None };
                }
            },
            typed = input.recv() => {
                let f = match typed {
                    Some(ConsoleInput::Data(data)) => Tf::Data(data),
                    Some(ConsoleInput::Resize(size)) => Tf::Resize(proto::TerminalSize { rows: size.rows, cols: size.cols }),
                    None => return caller_gone(),
                };
                if out.send(frame(f)).await.is_err() {
                    return Ending { caller: ConsoleEnd::Closed(gone("the node's stream closed")), node: None };
                }
            }
            _ = events.closed() => return caller_gone(),
            _ = out.closed() => {
                return Ending { caller: ConsoleEnd::Closed(gone("the node's stream closed")), node: None };
            }
            _ = async { closing.wait_for(|c| *c).await.is_ok() } => {
                let why = format!("{}: the dev stack is shutting down", Code::Draining);
                return Ending { caller: ConsoleEnd::Closed(why.clone()), node: Some(why) };
            }
        }
    }
}
