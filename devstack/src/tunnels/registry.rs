//! The tunnels of a running stack, by tunnel id: each is *opening* (the
//! OpenTunnel was sent, the node has not called Tunnel yet) or *open*
//! (paired with its caller), at most `max_per_node` per node. The registry
//! is what pairs a node's Tunnel stream with its caller: by the node's
//! certificate (the tunnel must be that node's) and by the ticket (its
//! SHA-256 must be the one minted for the tunnel, so its jti is too). Every
//! change of the registry bumps the change notification.

use std::collections::HashMap;
use std::sync::Mutex;

use sha2::{Digest, Sha256};
use tokio::sync::watch;

use super::console::CallerSide;
use crate::changes::Changes;
use crate::options::TunnelOptions;
use crate::status::Code;

/// One tunnel.
struct Entry {
    node_id: String,
    ticket_sha256: [u8; 32],
    /// The caller's side, until the node's first frame takes it.
    caller: Option<CallerSide>,
}

/// Why the node's first frame pairs with nothing.
pub(crate) struct Unpaired {
    /// The refusal's code.
    pub code: Code,
    /// For people.
    pub detail: String,
    /// The caller of the tunnel, when it must be told (a wrong ticket).
    pub caller: Option<CallerSide>,
}

/// The registry.
pub(crate) struct Registry {
    options: TunnelOptions,
    tunnels: Mutex<HashMap<String, Entry>>,
    closing: watch::Sender<bool>,
    changes: Changes,
}

fn digest(ticket: &str) -> [u8; 32] {
    Sha256::digest(ticket.as_bytes()).into()
}

impl Registry {
    /// An empty registry.
    pub fn new(options: TunnelOptions, changes: Changes) -> Self {
        Registry { options, tunnels: Mutex::new(HashMap::new()), closing: watch::channel(false).0, changes }
    }

    /// Runs `f` on the map, then announces the change.
    fn change<T>(&self, f: impl FnOnce(&mut HashMap<String, Entry>) -> T) -> T {
        let value = f(&mut self.lock());
        self.changes.bump();
        value
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        // Entries are inserted, taken or removed whole under the lock, so a
        // poisoned lock still holds a consistent map.
        self.tunnels.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The options.
    pub fn options(&self) -> &TunnelOptions {
        &self.options
    }

    /// Books an opening tunnel for `node_id`, or refuses it `tunnel-limit`
    /// when the node has `max_per_node` already (opening or open).
    pub fn book(&self, tunnel_id: &str, node_id: &str, ticket: &str, caller: CallerSide) -> Result<(), (Code, String)> {
        self.change(|map| {
            let count = map.values().filter(|e| e.node_id == node_id).count();
            if count >= self.options.max_per_node {
                let max = self.options.max_per_node;
                return Err((
                    Code::TunnelLimit,
                    format!("node {node_id} has {count} tunnels opening or open (at most {max})"),
                ));
            }
            let entry = Entry { node_id: node_id.to_string(), ticket_sha256: digest(ticket), caller: Some(caller) };
            map.insert(tunnel_id.to_string(), entry);
            Ok(())
        })
    }

    /// Pairs the node's first frame with the caller of its opening tunnel.
    /// With the ticket (`Some`) the tunnel becomes open and stays booked
    /// until [`Registry::end`]; with a close reason (`None`) it is removed.
    pub fn claim(&self, tunnel_id: &str, node_id: &str, ticket: Option<&str>) -> Result<CallerSide, Unpaired> {
        let unknown = |detail: String| Unpaired { code: Code::TunnelUnknown, detail, caller: None };
        self.change(|map| {
            let Some(entry) = map.get_mut(tunnel_id).filter(|e| e.node_id == node_id) else {
                return Err(unknown(format!("no tunnel {tunnel_id:?} is opening for node {node_id}")));
            };
            let Some(caller) = entry.caller.take() else {
                return Err(unknown(format!("tunnel {tunnel_id} is already open")));
            };
            match ticket {
                Some(t) if digest(t) != entry.ticket_sha256 => {
                    map.remove(tunnel_id);
                    let detail = format!("the ticket presented for tunnel {tunnel_id} is not the one minted for it");
                    Err(Unpaired { code: Code::TunnelTicket, detail, caller: Some(caller) })
                }
                Some(_) => Ok(caller),
                None => {
                    map.remove(tunnel_id);
                    Ok(caller)
                }
            }
        })
    }

    /// Removes a tunnel that is still opening and returns its caller (the
    /// node never dialed).
    pub fn expire(&self, tunnel_id: &str) -> Option<CallerSide> {
        self.change(|map| {
            let caller = map.get_mut(tunnel_id)?.caller.take()?;
            map.remove(tunnel_id);
            Some(caller)
        })
    }

    /// Forgets a tunnel.
    pub fn end(&self, tunnel_id: &str) {
        self.change(|map| map.remove(tunnel_id));
    }

    /// How many tunnels of `node_id` are opening or open.
    pub fn of_node(&self, node_id: &str) -> usize {
        self.lock().values().filter(|e| e.node_id == node_id).count()
    }

    /// Turns true when the stack shuts down: every relay ends.
    pub fn closing(&self) -> watch::Receiver<bool> {
        self.closing.subscribe()
    }

    /// Ends every tunnel: the open ones through their relays, the opening
    /// ones here (their callers are told the stack is draining).
    pub fn close_all(&self) -> Vec<CallerSide> {
        self.closing.send_replace(true);
        self.change(|map| {
            let opening: Vec<String> =
                map.iter().filter(|(_, e)| e.caller.is_some()).map(|(id, _)| id.clone()).collect();
            opening.iter().filter_map(|id| map.remove(id)).filter_map(|e| e.caller).collect()
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::tunnels::console::pair;

    fn registry(max: usize) -> Registry {
        Registry::new(
            TunnelOptions { max_per_node: max, open_timeout: Duration::from_secs(1), ..TunnelOptions::default() },
            Changes::default(),
        )
    }

    #[test]
    fn a_node_gets_at_most_its_limit_of_tunnels() {
        let r = registry(2);
        for id in ["t1", "t2"] {
            assert!(r.book(id, "node_1", "ticket", pair(id, "node_1", "ticket").1).is_ok());
        }
        let (code, detail) = r.book("t3", "node_1", "ticket", pair("t3", "node_1", "ticket").1).unwrap_err();
        assert_eq!(code, Code::TunnelLimit, "{detail}");
        assert!(
            r.book("t4", "node_2", "ticket", pair("t4", "node_2", "ticket").1).is_ok(),
            "another node's are its own"
        );
        r.end("t1");
        assert!(
            r.book("t3", "node_1", "ticket", pair("t3", "node_1", "ticket").1).is_ok(),
            "an ended one frees its place"
        );
    }

    #[test]
    fn the_first_frame_pairs_by_node_and_ticket() {
        let r = registry(4);
        r.book("t1", "node_1", "ticket-1", pair("t1", "node_1", "ticket-1").1).unwrap();
        let code = |res: Result<CallerSide, Unpaired>| res.err().map(|u| u.code);
        assert_eq!(code(r.claim("t1", "node_2", Some("ticket-1"))), Some(Code::TunnelUnknown), "another node's");
        assert_eq!(code(r.claim("t9", "node_1", Some("ticket-1"))), Some(Code::TunnelUnknown), "an unknown id");
        assert!(r.claim("t1", "node_1", Some("ticket-1")).is_ok());
        assert_eq!(code(r.claim("t1", "node_1", Some("ticket-1"))), Some(Code::TunnelUnknown), "already open");
        assert_eq!(r.of_node("node_1"), 1, "an open tunnel stays booked");
        assert!(r.expire("t1").is_none(), "an open tunnel does not expire");

        r.book("t2", "node_1", "ticket-2", pair("t2", "node_1", "ticket-2").1).unwrap();
        let wrong = r.claim("t2", "node_1", Some("ticket-1")).err().unwrap();
        assert_eq!(wrong.code, Code::TunnelTicket);
        assert!(wrong.caller.is_some(), "the caller is told");
        r.book("t3", "node_1", "ticket-3", pair("t3", "node_1", "ticket-3").1).unwrap();
        assert!(r.claim("t3", "node_1", None).is_ok(), "a refusal pairs by id");
        assert_eq!(r.of_node("node_1"), 1, "a refused tunnel is gone");
    }
}
