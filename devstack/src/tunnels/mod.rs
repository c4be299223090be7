//! Node consoles through a tunnel (docs/protocol.md, "Tunnels";
//! docs/devstack.md, "Consoles"): [`DevStack::open_console`] mints an exec
//! ticket (`ticket`), books the tunnel (`registry`: at most
//! [`TunnelOptions::max_per_node`] opening or open per node, refused
//! `tunnel-limit`), sends `OpenTunnel` on the node's session and returns the
//! caller's [`Console`] (`console`); `Gateway.Tunnel` pairs the node's
//! stream with it and relays (`relay`). A node that does not dial within
//! [`TunnelOptions::open_timeout`] ends the console `tunnel-timeout`.
//!
//! The caller side is a pair of channels, so a test drives it in process
//! and a WebSocket or HTTP-upgrade route can drive it the same way.

use std::time::Duration;

use proto::gateway_frame::Frame as Out;
use tracing::{info, warn};

use crate::clock::now_ms;
use crate::commands::frame;
use crate::error::{Error, Result};
use crate::hub::Control;
use crate::ids;
use crate::stack::DevStack;
use crate::status::Code;

mod console;
pub(crate) mod registry;
pub(crate) mod relay;
mod ticket;

pub use console::{Console, ConsoleEnd, ConsoleEvent, ConsoleReader, ConsoleSize, ConsoleWriter};
pub use ticket::TicketChoice;

/// The tunnels' settings of a stack.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TunnelOptions {
    /// At most this many tunnels opening or open per node (default 4); the
    /// next console is refused `tunnel-limit`.
    pub max_per_node: usize,
    /// How long the node may take to dial Tunnel after an OpenTunnel
    /// (default 10 s) before the console ends `tunnel-timeout`.
    pub open_timeout: Duration,
    /// How long a minted exec ticket is valid (default 60 s).
    pub ticket_ttl: Duration,
}

impl Default for TunnelOptions {
    fn default() -> Self {
        TunnelOptions { max_per_node: 4, open_timeout: Duration::from_secs(10), ticket_ttl: Duration::from_secs(60) }
    }
}

/// How to open a console.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsoleOptions {
    /// The caller's terminal.
    pub size: ConsoleSize,
    /// The caller's TERM (default `xterm-256color`).
    pub term: String,
    /// Who opens it: the ticket's `sub` (default `devstack`).
    pub subject: String,
    /// The ticket (a fresh valid one by default).
    pub ticket: TicketChoice,
}

impl Default for ConsoleOptions {
    fn default() -> Self {
        ConsoleOptions {
            size: ConsoleSize::default(),
            term: "xterm-256color".into(),
            subject: "devstack".into(),
            ticket: TicketChoice::Fresh,
        }
    }
}

impl DevStack {
    /// Opens a console on a node's shell with a fresh exec ticket: the
    /// console's events say when the node opened it (or why not), carry
    /// the terminal's output, and end with the shell's exit status.
    pub async fn open_console(&self, node_id: &str, size: ConsoleSize) -> Result<Console> {
        self.open_console_with(node_id, ConsoleOptions { size, ..ConsoleOptions::default() }).await
    }

    /// Opens a console as `options` say (the ticket among them). Errors:
    /// no signed intent (no tunnels issuer), no live session, or
    /// [`Error::Refused`] `tunnel-limit`.
    pub async fn open_console_with(&self, node_id: &str, options: ConsoleOptions) -> Result<Console> {
        let shared = self.shared().clone();
        let no_session = || Error::NoSession { node_id: node_id.to_string() };
        if shared.hub.live_epoch(node_id).is_none() {
            return Err(no_session());
        }
        let ttl = shared.tunnels.options().ticket_ttl;
        let (ticket, jti) = ticket::mint(&shared, node_id, &options.subject, ttl, &options.ticket, now_ms())?;
        let tunnel_id = ids::tunnel_id();
        let (console, caller) = console::pair(&tunnel_id, node_id, &ticket);
        if let Err((code, detail)) = shared.tunnels.book(&tunnel_id, node_id, &ticket, caller) {
            warn!(node_id, tunnel_id, %code, detail, "tunnel: console refused");
            return Err(Error::Refused { code, detail });
        }
        let size = proto::TerminalSize { rows: options.size.rows, cols: options.size.cols };
        let open = proto::OpenTunnel { tunnel_id: tunnel_id.clone(), ticket, size: Some(size), term: options.term };
        if !shared.hub.send(node_id, Control::Raw(Box::new(frame(Out::OpenTunnel(open))))) {
            shared.tunnels.end(&tunnel_id);
            return Err(no_session());
        }
        info!(node_id, tunnel_id, sub = options.subject, jti, "tunnel: console requested");
        let timeout = shared.tunnels.options().open_timeout;
        shared.bump();
        let stack = std::sync::Arc::downgrade(&shared);
        tokio::spawn(async move {
            tokio::time::sleep(timeout).await;
            let Some(shared) = stack.upgrade() else { return };
            if let Some(caller) = shared.tunnels.expire(&tunnel_id) {
                warn!(tunnel_id, "tunnel: the node did not dial Tunnel in time");
                let why =
                    format!("{}: the node did not dial Tunnel within {} ms", Code::TunnelTimeout, timeout.as_millis());
                caller.end(ConsoleEnd::Closed(why)).await;
                shared.bump();
            }
        });
        Ok(console)
    }

    /// How many tunnels of a node are opening or open now.
    pub fn open_tunnels(&self, node_id: &str) -> usize {
        self.shared().tunnels.of_node(node_id)
    }
}
