//! TLS session tickets sealed with keys the store keeps (docs/devstack.md,
//! "TLS session resumption"), so that a node reconnecting after a restart,
//! a Drain or a failover to another gateway of the same store resumes its
//! TLS session: no certificate and no signature on either side, only the
//! key exchange.
//!
//! rustls asks a [`ProducesTickets`] to seal and open its session state
//! (which holds the client's certificate chain: a resumed connection
//! carries the peer identity of the handshake that began it). rustls' own
//! ticketers make their keys at random in the process, which a restart
//! loses; this one takes them from the store's `tls_ticket_keys`, one key
//! per [`PERIOD_SECS`] (6 hours) that whichever gateway comes first makes.
//! A ticket is sealed with the current period's key and opened with the
//! key of its period while that is the previous, current or next one by
//! this gateway's clock: every ticket opens for at least one period after
//! it was issued and for at most two (gateways whose clocks differ by less
//! than a period agree), and a key is deleted from the store once its
//! tickets no longer open, which bounds what a stolen store reveals of past
//! sessions. The sealing is ring's ChaCha20-Poly1305, as rustls' own
//! ticketer seals: a random nonce per ticket and the key's name as the
//! authenticated data. [`TicketKeys::refresh`] makes the current and the next
//! period's keys if the store lacks them, reads them and forgets older
//! ones; the stack runs it at start and every [`REFRESH`].

use std::sync::RwLock;
use std::time::Duration;

use ring::aead::{Aad, CHACHA20_POLY1305, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use ring::rand::{SecureRandom, SystemRandom};
use rustls::server::ProducesTickets;

use crate::clock::now_ms;
use crate::error::Result;
use crate::ledger::Ledger;
use crate::store::ticket_keys;

/// How long a ticket key seals tickets.
pub const PERIOD_SECS: u32 = 6 * 3600;

/// How often the stack reads the store's keys again (and makes the next
/// period's, if no gateway has).
pub const REFRESH: Duration = Duration::from_secs(600);

/// A key's name: this prefix, then its period (8 bytes, big-endian).
const NAME_PREFIX: [u8; 8] = *b"bcd-tk01";

/// The longest ticket opened: a session's state with a node's chain is
/// about 1.5 KiB. Longer ones are not even tried (as rustls' own ticketer
/// refuses what is longer than what it sealed), nor sealed.
const MAX_TICKET_BYTES: usize = 8 << 10;

/// The AEAD's tag.
const TAG_LEN: usize = 16;

/// One period's key, ready to seal and open.
struct PeriodKey {
    period: i64,
    name: [u8; 16],
    key: LessSafeKey,
}

impl PeriodKey {
    fn new(k: &ticket_keys::TicketKey) -> Option<Self> {
        let unbound = UnboundKey::new(&CHACHA20_POLY1305, &k.key).ok()?;
        Some(PeriodKey { period: k.period, name: name(k.period), key: LessSafeKey::new(unbound) })
    }
}

/// The name of a period's key.
fn name(period: i64) -> [u8; 16] {
    let mut name = [0u8; 16];
    name[..8].copy_from_slice(&NAME_PREFIX);
    name[8..].copy_from_slice(&period.to_be_bytes());
    name
}

/// The period a Unix time in ms falls in.
pub fn period_at(unix_ms: i64) -> i64 {
    unix_ms.div_euclid(i64::from(PERIOD_SECS) * 1000)
}

/// The store's ticket keys as this gateway last read them; rustls' ticketer.
pub struct TicketKeys {
    keys: RwLock<Vec<PeriodKey>>,
    rng: SystemRandom,
    /// The clock the periods are read on (the stack's; tests move it).
    clock: fn() -> i64,
}

impl std::fmt::Debug for TicketKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never a key.
        let periods: Vec<i64> = self.read().iter().map(|k| k.period).collect();
        f.debug_struct("TicketKeys").field("periods", &periods).finish_non_exhaustive()
    }
}

impl TicketKeys {
    /// The store's keys, made first where the current and the next period
    /// have none.
    pub fn load(ledger: &Ledger) -> Result<Self> {
        Self::load_on(ledger, now_ms)
    }

    /// [`TicketKeys::load`] on another clock (tests).
    pub fn load_on(ledger: &Ledger, clock: fn() -> i64) -> Result<Self> {
        let keys = TicketKeys { keys: RwLock::new(Vec::new()), rng: SystemRandom::new(), clock };
        keys.refresh(ledger)?;
        Ok(keys)
    }

    /// Makes the current and the next period's keys where the store has
    /// none (from the OS random number generator; a key another gateway
    /// made first stays), forgets the keys before the previous period, and
    /// takes the previous, current and next periods' keys.
    pub fn refresh(&self, ledger: &Ledger) -> Result<()> {
        let now = (self.clock)();
        let current = period_at(now);
        let mut fresh = [[0u8; 32]; 2];
        for key in &mut fresh {
            self.rng
                .fill(key)
                .map_err(|_| crate::error::Error::Tls { reason: "no random bytes for a ticket key".into() })?;
        }
        let stored = ledger.write(|c| {
            for (period, key) in [current, current + 1].into_iter().zip(&fresh) {
                ticket_keys::offer(c, period, key, now)?;
            }
            ticket_keys::forget_before(c, current - 1)?;
            Ok(ticket_keys::since(c, current - 1)?)
        })?;
        let keys: Vec<PeriodKey> = stored.iter().filter_map(PeriodKey::new).collect();
        *self.keys.write().unwrap_or_else(|p| p.into_inner()) = keys;
        Ok(())
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Vec<PeriodKey>> {
        self.keys.read().unwrap_or_else(|p| p.into_inner())
    }
}

impl ProducesTickets for TicketKeys {
    fn enabled(&self) -> bool {
        true
    }

    /// The hint to the client: a ticket opens for at least a period.
    fn lifetime(&self) -> u32 {
        PERIOD_SECS
    }

    /// Seals with the current period's key: the key's name, a random
    /// nonce, the sealed state and its tag. `None` (rustls then sends no
    /// ticket) without that key or random bytes.
    fn encrypt(&self, plain: &[u8]) -> Option<Vec<u8>> {
        let current = period_at((self.clock)());
        let keys = self.read();
        let key = keys.iter().find(|k| k.period == current)?;
        let mut nonce = [0u8; NONCE_LEN];
        self.rng.fill(&mut nonce).ok()?;
        let mut ticket = Vec::with_capacity(key.name.len() + NONCE_LEN + plain.len() + TAG_LEN);
        ticket.extend_from_slice(&key.name);
        ticket.extend_from_slice(&nonce);
        ticket.extend_from_slice(plain);
        let at = key.name.len() + NONCE_LEN;
        let tag = key
            .key
            .seal_in_place_separate_tag(Nonce::assume_unique_for_key(nonce), Aad::from(key.name), &mut ticket[at..])
            .ok()?;
        ticket.extend_from_slice(tag.as_ref());
        (ticket.len() <= MAX_TICKET_BYTES).then_some(ticket)
    }

    /// Opens a ticket whose key is the previous, current or next period's;
    /// `None` for anything else (rustls then makes a full handshake). The
    /// ticket is the client's bytes: lengths are checked before any slice,
    /// and the AEAD authenticates the name, the nonce and the state.
    fn decrypt(&self, ticket: &[u8]) -> Option<Vec<u8>> {
        if ticket.len() > MAX_TICKET_BYTES || ticket.len() < 16 + NONCE_LEN + TAG_LEN {
            return None;
        }
        let (name, rest) = ticket.split_at(16);
        let (nonce, sealed) = rest.split_at(NONCE_LEN);
        let period = i64::from_be_bytes(name[8..].try_into().ok()?);
        let current = period_at((self.clock)());
        if name[..8] != NAME_PREFIX || period < current - 1 || period > current + 1 {
            return None;
        }
        let keys = self.read();
        let key = keys.iter().find(|k| k.period == period)?;
        let nonce = Nonce::try_assume_unique_for_key(nonce).ok()?;
        let mut out = sealed.to_vec();
        let plain_len = key.key.open_in_place(nonce, Aad::from(key.name), &mut out).ok()?.len();
        out.truncate(plain_len);
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicI64, Ordering};

    use super::*;

    const PERIOD_MS: i64 = PERIOD_SECS as i64 * 1000;

    /// The tests' clock, which they move (one test at a time uses it).
    static NOW: AtomicI64 = AtomicI64::new(0);
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

    fn now() -> i64 {
        NOW.load(Ordering::SeqCst)
    }

    fn ledger() -> Ledger {
        crate::shared::testing::shared_with_node("none").ledger
    }

    #[test]
    fn a_ticket_opens_on_another_gateway_of_the_store_and_after_a_restart() {
        let _one = LOCK.lock().unwrap();
        NOW.store(100 * PERIOD_MS + 5, Ordering::SeqCst);
        let ledger = ledger();
        let first = TicketKeys::load_on(&ledger, now).unwrap();
        let ticket = first.encrypt(b"a session's state").expect("a ticket");
        assert_ne!(&ticket[16 + NONCE_LEN..ticket.len() - TAG_LEN], b"a session's state", "sealed");
        // Another gateway (or this one started again) on the same store.
        let second = TicketKeys::load_on(&ledger, now).unwrap();
        assert_eq!(second.decrypt(&ticket).as_deref(), Some(&b"a session's state"[..]));
        // A store of its own opens nothing.
        let other = TicketKeys::load_on(&self::ledger(), now).unwrap();
        assert_eq!(other.decrypt(&ticket), None);
    }

    #[test]
    fn a_ticket_opens_for_a_period_at_least_and_two_at_most() {
        let _one = LOCK.lock().unwrap();
        let start = 200 * PERIOD_MS + PERIOD_MS - 1;
        NOW.store(start, Ordering::SeqCst);
        let ledger = ledger();
        let keys = TicketKeys::load_on(&ledger, now).unwrap();
        let ticket = keys.encrypt(b"state").unwrap();
        // The next period: the key was made ahead, and the ticket opens.
        NOW.store(start + PERIOD_MS, Ordering::SeqCst);
        keys.refresh(&ledger).unwrap();
        assert!(keys.decrypt(&ticket).is_some(), "a period later");
        assert!(keys.encrypt(b"state").is_some(), "the next period's key seals");
        // Two periods on, the key is gone from the store and from here.
        NOW.store(start + 2 * PERIOD_MS, Ordering::SeqCst);
        keys.refresh(&ledger).unwrap();
        assert_eq!(keys.decrypt(&ticket), None, "two periods later");
        let stored = ledger.read(|c| ticket_keys::since(c, 0)).unwrap();
        assert!(stored.iter().all(|k| k.period >= period_at(now()) - 1), "{stored:?}");
        // Even before a refresh forgets it, a ticket of a period two back
        // does not open.
        NOW.store(start, Ordering::SeqCst);
        let fresh = TicketKeys::load_on(&self::ledger(), now).unwrap();
        let old = fresh.encrypt(b"state").unwrap();
        NOW.store(start + 2 * PERIOD_MS, Ordering::SeqCst);
        assert_eq!(fresh.decrypt(&old), None);
    }

    #[test]
    fn a_ticket_changed_in_any_byte_or_cut_does_not_open() {
        let _one = LOCK.lock().unwrap();
        NOW.store(300 * PERIOD_MS, Ordering::SeqCst);
        let keys = TicketKeys::load_on(&ledger(), now).unwrap();
        let ticket = keys.encrypt(b"state").unwrap();
        for i in 0..ticket.len() {
            let mut bad = ticket.clone();
            bad[i] ^= 1;
            assert_eq!(keys.decrypt(&bad), None, "byte {i} flipped");
        }
        for len in 0..ticket.len() {
            assert_eq!(keys.decrypt(&ticket[..len]), None, "cut to {len}");
        }
        assert_eq!(keys.decrypt(&vec![0u8; MAX_TICKET_BYTES + 1]), None);
        assert_eq!(keys.encrypt(&vec![0u8; MAX_TICKET_BYTES]), None, "too long to seal");
    }
}
