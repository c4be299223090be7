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

use std::sync::Arc;

use proto::gateway_frame::Frame as Out;
use tracing::{info, warn};

use crate::clock::now_ms;
use crate::error::{Error, Result};
use crate::frames::frame;
use crate::hub::Control;
use crate::ids;
use crate::shared::Shared;
use crate::status::Code;
use registry::Registry;

mod console;
pub(crate) mod registry;
pub(crate) mod relay;
mod ticket;

pub use console::{Console, ConsoleEnd, ConsoleEvent, ConsoleReader, ConsoleSize, ConsoleWriter};
pub use ticket::TicketChoice;

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

/// Opens a console as `options` say (the ticket among them). Errors:
/// no signed intent (no tunnels issuer), no live session, or
/// [`Error::Refused`] `tunnel-limit`.
pub fn open_console_with(
    shared: &Shared,
    tunnels: &Arc<Registry>,
    node_id: &str,
    options: ConsoleOptions,
) -> Result<Console> {
    let no_session = || Error::NoSession { node_id: node_id.to_string() };
    shared.ledger.read(|c| crate::nodes::refuse_revoked(c, node_id))?;
    if shared.hub.live_epoch(node_id).is_none() {
        return Err(no_session());
    }
    let ttl = tunnels.options().ticket_ttl;
    let (ticket, jti) = ticket::mint(shared, node_id, &options.subject, ttl, &options.ticket, now_ms())?;
    let tunnel_id = ids::tunnel_id();
    let (console, caller) = console::pair(&tunnel_id, node_id, &ticket);
    if let Err((code, detail)) = tunnels.book(&tunnel_id, node_id, &ticket, caller) {
        warn!(node_id, tunnel_id, %code, detail, "tunnel: console refused");
        return Err(Error::Refused { code, detail });
    }
    let size = proto::TerminalSize { rows: options.size.rows, cols: options.size.cols };
    let open = proto::OpenTunnel { tunnel_id: tunnel_id.clone(), ticket, size: Some(size), term: options.term };
    if !shared.hub.send(node_id, Control::Raw(Box::new(frame(Out::OpenTunnel(open))))) {
        tunnels.end(&tunnel_id);
        return Err(no_session());
    }
    info!(node_id, tunnel_id, sub = options.subject, jti, "tunnel: console requested");
    let timeout = tunnels.options().open_timeout;
    let registry = Arc::downgrade(tunnels);
    tokio::spawn(async move {
        tokio::time::sleep(timeout).await;
        let Some(tunnels) = registry.upgrade() else { return };
        if let Some(caller) = tunnels.expire(&tunnel_id) {
            warn!(tunnel_id, "tunnel: the node did not dial Tunnel in time");
            let why =
                format!("{}: the node did not dial Tunnel within {} ms", Code::TunnelTimeout, timeout.as_millis());
            caller.end(ConsoleEnd::Closed(why)).await;
        }
    });
    Ok(console)
}
