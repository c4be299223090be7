//! Minting exec tickets (docs/formats.md, "Exec ticket"): compact JWS
//! ES256 by the tunnels issuer named in the trust bundle, claims `iss`
//! (`https://<trust domain>/tunnels`), `aud` (`bcd:<node id>`), `sub`,
//! `op` (`console`), `iat`, `exp` and a fresh `jti`; and, for refusal
//! tests, tickets with one chosen defect.

use std::time::Duration;

use pki::jws::{self, ExecTicket};

use crate::error::{Error, Result};
use crate::ids;
use crate::shared::Shared;

/// Which ticket a console is opened with.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum TicketChoice {
    /// A fresh, valid ticket.
    #[default]
    Fresh,
    /// One that expired a minute ago (`token-expired`).
    Expired,
    /// One for another node (`token-audience`).
    ForNode(String),
    /// One for another operation than `console` (`ticket-op`).
    Op(String),
    /// One signed by a key the trust bundle does not name
    /// (`jws-unknown-kid`).
    Outsider,
    /// This ticket again, as a replay (`ticket-replayed` once bcd took it).
    Reuse(String),
}

/// A ticket for `node_id` as `choice` says, and its jti.
pub(crate) fn mint(
    shared: &Shared,
    node_id: &str,
    subject: &str,
    ttl: Duration,
    choice: &TicketChoice,
    now_ms: i64,
) -> Result<(String, String)> {
    let intent = shared.keys.intent.as_ref().ok_or(Error::NoSignedIntent)?;
    if let TicketChoice::Reuse(ticket) = choice {
        return Ok((ticket.clone(), "(reused)".to_string()));
    }
    let now = now_ms.div_euclid(1000);
    let mut claims = ExecTicket {
        iss: jws::tunnels_issuer(&shared.settings.options.trust_domain),
        aud: jws::ticket_audience(node_id),
        sub: subject.to_string(),
        op: jws::OP_CONSOLE.to_string(),
        iat: now,
        exp: now + ttl.as_secs().max(1) as i64,
        jti: ids::ticket_id(),
    };
    let outsider = pki::keys::random_p256();
    let mut key = &intent.tunnels_issuer;
    match choice {
        TicketChoice::Fresh | TicketChoice::Reuse(_) => {}
        TicketChoice::Expired => (claims.iat, claims.exp) = (now - 120, now - 60),
        TicketChoice::ForNode(other) => claims.aud = jws::ticket_audience(other),
        TicketChoice::Op(op) => claims.op = op.clone(),
        TicketChoice::Outsider => key = &outsider,
    }
    let jti = claims.jti.clone();
    Ok((jws::sign(key, &claims), jti))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shared::testing::shared_with_intent;

    #[test]
    fn tickets_verify_under_the_bundles_issuer_or_fail_with_their_defect() {
        let shared = shared_with_intent();
        let issuer = pki::Signer::public_key(&shared.keys.intent.as_ref().unwrap().tunnels_issuer);
        let pki::PublicKey::P256(issuer) = issuer else { panic!("the tunnels issuer is a P-256 key") };
        let now = 1_800_000_000_000;
        let ttl = Duration::from_secs(60);
        let verify = |choice: &TicketChoice| {
            let (token, _) = mint(&shared, "node_1", "alice", ttl, choice, now).unwrap();
            let iss = jws::tunnels_issuer(&shared.settings.options.trust_domain);
            jws::verify_exec_ticket(&token, &[issuer], &iss, "node_1", now).map_err(|e| e.code())
        };
        let fresh = verify(&TicketChoice::Fresh).unwrap();
        assert_eq!((fresh.sub.as_str(), fresh.op.as_str(), fresh.exp - fresh.iat), ("alice", "console", 60));
        assert!(fresh.jti.starts_with("tkt_"), "{}", fresh.jti);
        assert_eq!(verify(&TicketChoice::Expired).unwrap_err(), "token-expired");
        assert_eq!(verify(&TicketChoice::ForNode("node_2".into())).unwrap_err(), "token-audience");
        assert_eq!(verify(&TicketChoice::Op("exec".into())).unwrap_err(), "ticket-op");
        assert_eq!(verify(&TicketChoice::Outsider).unwrap_err(), "jws-unknown-kid");
        let (a, _) = mint(&shared, "node_1", "alice", ttl, &TicketChoice::Fresh, now).unwrap();
        let (b, _) = mint(&shared, "node_1", "alice", ttl, &TicketChoice::Reuse(a.clone()), now).unwrap();
        assert_eq!(a, b);
    }
}
