//! The fault proxy (docs/harness.md, "Chaos"): between each agent and each
//! gateway, a loopback listener of the agent's own (the agent's
//! configuration names it as that gateway), so that every fault is the
//! agent's and direction's alone. Each chunk a direction carries waits the
//! link's latency plus a jitter drawn for it (in order: a chunk never
//! passes the one before), and may reset its connection (RST) with the
//! link's probability. A fault changes an agent's [`LinkState`]:
//!
//! - a cut gateway (partition, isolate) carries nothing either way, and a
//!   new connection to it waits, unanswered, until it heals: bytes are held,
//!   never dropped, as TCP holds them, so a long cut ends in the peers'
//!   own timeouts;
//! - the node's bytes held (half-open) or the gateway's (stall: the node
//!   stops being read from);
//! - a reset: every connection of the agent is closed with RST.
//!
//! A stream is not a message link: reordering or duplicating bytes would
//! only corrupt TLS, so the proxy does neither. It records when each
//! agent's bytes last reached a gateway (at most once a second): the
//! witnesses of invariant I4.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::tcp::{ReadHalf, WriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::time::Instant;

use super::rng::Stream;
use super::schedule::LinkProfile;

/// The most chunks a direction holds before it stops reading.
const QUEUED_CHUNKS: usize = 64;
/// How much a direction reads at once.
const CHUNK: usize = 16 * 1024;
/// How long a connection to a cut gateway waits before it is dropped.
const CUT_WAIT: Duration = Duration::from_secs(120);

/// What faults do to one agent's links now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkState {
    /// The gateways cut off (bit g: gateway g).
    pub cut: u64,
    /// The node's bytes are held (half-open).
    pub up_held: bool,
    /// The gateways' bytes are held (stall).
    pub down_held: bool,
    /// Bumped to reset every connection of the agent.
    pub resets: u64,
}

impl LinkState {
    fn is_cut(&self, gateway: usize) -> bool {
        gateway < 64 && self.cut & (1 << gateway) != 0
    }
}

/// One agent's links.
pub struct AgentLinks {
    state: watch::Sender<LinkState>,
    listeners: Vec<SocketAddr>,
    heard: Mutex<Vec<i64>>,
}

impl AgentLinks {
    /// The addresses the agent dials for each gateway.
    pub fn addresses(&self) -> &[SocketAddr] {
        &self.listeners
    }

    /// Changes the agent's link state.
    pub fn update(&self, f: impl FnOnce(&mut LinkState)) {
        self.state.send_modify(f);
    }

    /// When the agent's bytes reached a gateway (Unix ms, at most one a second).
    pub fn heard(&self) -> Vec<i64> {
        self.heard.lock().expect("heard").clone()
    }

    fn record_heard(&self) {
        let now = crate::clock::now_ms();
        let mut heard = self.heard.lock().expect("heard");
        if heard.last().is_none_or(|&last| now - last >= 1_000) {
            heard.push(now);
        }
    }
}

/// The proxy: one [`AgentLinks`] per agent.
pub struct FaultProxy {
    agents: Vec<Arc<AgentLinks>>,
    stop: watch::Sender<bool>,
}

impl FaultProxy {
    /// Listens for `agents` agents in front of each of `gateways`.
    pub async fn start(
        agents: u32,
        gateways: &[SocketAddr],
        profile: LinkProfile,
        root: &Stream,
    ) -> std::io::Result<FaultProxy> {
        let (stop, _) = watch::channel(false);
        let mut links = Vec::with_capacity(agents as usize);
        for index in 0..agents {
            let mut bound = Vec::new();
            for _ in gateways {
                bound.push(TcpListener::bind("127.0.0.1:0").await?);
            }
            let listeners = bound.iter().map(TcpListener::local_addr).collect::<std::io::Result<_>>()?;
            let (state, _) = watch::channel(LinkState::default());
            let agent = Arc::new(AgentLinks { state, listeners, heard: Mutex::default() });
            for (gateway, (listener, target)) in bound.into_iter().zip(gateways).enumerate() {
                let seed = root.fork(&format!("link/{index}/{gateway}"));
                tokio::spawn(accept(listener, agent.clone(), gateway, *target, profile, seed, stop.subscribe()));
            }
            links.push(agent);
        }
        Ok(FaultProxy { agents: links, stop })
    }

    /// Agent `i`'s links.
    pub fn agent(&self, i: u32) -> &Arc<AgentLinks> {
        &self.agents[i as usize]
    }

    /// Every agent's links, by index.
    pub fn agents(&self) -> &[Arc<AgentLinks>] {
        &self.agents
    }

    /// Heals every link (the quiet period).
    pub fn heal_all(&self) {
        for a in &self.agents {
            a.update(|s| *s = LinkState { resets: s.resets, ..LinkState::default() });
        }
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

/// Accepts the agent's connections to one gateway until the proxy stops.
async fn accept(
    listener: TcpListener,
    agent: Arc<AgentLinks>,
    gateway: usize,
    target: SocketAddr,
    profile: LinkProfile,
    seed: Stream,
    mut stop: watch::Receiver<bool>,
) {
    let mut n = 0u64;
    loop {
        let client = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((client, _)) => client,
                Err(_) => continue,
            },
            _ = stop.changed() => return,
        };
        n += 1;
        let link = Link { agent: agent.clone(), gateway, target, profile };
        let streams = (seed.fork(&format!("{n}/up")), seed.fork(&format!("{n}/down")));
        tokio::spawn(link.relay(client, streams, stop.clone()));
    }
}

/// One connection's way through the proxy.
struct Link {
    agent: Arc<AgentLinks>,
    gateway: usize,
    target: SocketAddr,
    profile: LinkProfile,
}

/// How a relay ended.
enum End {
    /// Both sides closed.
    Closed,
    /// Reset: by a fault, or a chunk drew it.
    Reset,
}

impl Link {
    async fn relay(self, mut client: TcpStream, (up, down): (Stream, Stream), mut stop: watch::Receiver<bool>) {
        let mut state = self.agent.state.subscribe();
        // A cut gateway answers nothing: the connection waits for it to heal.
        let healed = state.wait_for(|s| !s.is_cut(self.gateway));
        let healed = tokio::select! {
            healed = tokio::time::timeout(CUT_WAIT, healed) => matches!(healed, Ok(Ok(_))),
            _ = stop.changed() => false,
        };
        if !healed {
            return;
        }
        let Ok(mut server) = TcpStream::connect(self.target).await else { return };
        let _ = (client.set_nodelay(true), server.set_nodelay(true));
        let resets = state.borrow().resets;
        let end = {
            let (cr, cw) = client.split();
            let (sr, sw) = server.split();
            let upward = self.pump(cr, sw, true, up);
            let downward = self.pump(sr, cw, false, down);
            let reset = state.wait_for(|s| s.resets != resets);
            tokio::pin!(upward, downward, reset);
            // A reset of either direction resets the connection at once; a
            // direction that ended (its reader's end) waits for the other.
            let (mut up_done, mut down_done) = (false, false);
            loop {
                let ended = tokio::select! {
                    end = &mut upward, if !up_done => {
                        up_done = true;
                        end
                    }
                    end = &mut downward, if !down_done => {
                        down_done = true;
                        end
                    }
                    _ = &mut reset => End::Reset,
                    _ = stop.changed() => End::Closed,
                };
                if matches!(ended, End::Reset) || *stop.borrow() {
                    break ended;
                }
                if up_done && down_done {
                    break End::Closed;
                }
            }
        };
        if matches!(end, End::Reset) {
            let _ = client.set_zero_linger();
            let _ = server.set_zero_linger();
        }
    }

    /// Carries one direction until its reader ends (then shuts the writer)
    /// or a chunk draws a reset.
    async fn pump(&self, mut r: ReadHalf<'_>, mut w: WriteHalf<'_>, up: bool, mut draw: Stream) -> End {
        let mut state = self.agent.state.subscribe();
        let held = |s: &LinkState| s.is_cut(self.gateway) || if up { s.up_held } else { s.down_held };
        let mut queue: VecDeque<(Instant, Vec<u8>)> = VecDeque::new();
        let mut buf = vec![0u8; CHUNK];
        let (mut eof, mut last_due) = (false, Instant::now());
        loop {
            if eof && queue.is_empty() {
                let _ = w.shutdown().await;
                return End::Closed;
            }
            let due = queue.front().map(|(at, _)| *at).filter(|_| !held(&state.borrow()));
            tokio::select! {
                n = r.read(&mut buf), if !eof && queue.len() < QUEUED_CHUNKS => match n {
                    Ok(0) | Err(_) => eof = true,
                    Ok(n) => {
                        if draw.chance(self.profile.reset_per_chunk) {
                            return End::Reset;
                        }
                        let jitter = draw.below(self.profile.jitter.as_millis() as u64 + 1);
                        let at = Instant::now() + self.profile.latency + Duration::from_millis(jitter);
                        last_due = last_due.max(at);
                        queue.push_back((last_due, buf[..n].to_vec()));
                    }
                },
                _ = tokio::time::sleep_until(due.unwrap_or_else(Instant::now)), if due.is_some() => {
                    let (_, chunk) = queue.pop_front().expect("a chunk is due");
                    if w.write_all(&chunk).await.is_err() {
                        return End::Closed;
                    }
                    if up {
                        self.agent.record_heard();
                    }
                }
                changed = state.changed() => if changed.is_err() { return End::Closed },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An echo server: what it reads it writes back.
    async fn echo() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let (mut r, mut w) = s.split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        });
        addr
    }

    fn profile(latency_ms: u64) -> LinkProfile {
        LinkProfile { latency: Duration::from_millis(latency_ms), jitter: Duration::ZERO, reset_per_chunk: 0.0 }
    }

    async fn round_trip(s: &mut TcpStream, bytes: &[u8]) -> std::io::Result<Vec<u8>> {
        s.write_all(bytes).await?;
        let mut back = vec![0; bytes.len()];
        s.read_exact(&mut back).await?;
        Ok(back)
    }

    #[tokio::test]
    async fn bytes_pass_late_in_order_and_are_heard() {
        let proxy = FaultProxy::start(1, &[echo().await], profile(30), &Stream::root("t")).await.unwrap();
        let mut s = TcpStream::connect(proxy.agent(0).addresses()[0]).await.unwrap();
        let started = Instant::now();
        assert_eq!(round_trip(&mut s, b"hello").await.unwrap(), b"hello");
        assert!(started.elapsed() >= Duration::from_millis(60), "latency both ways: {:?}", started.elapsed());
        assert_eq!(proxy.agent(0).heard().len(), 1);
    }

    #[tokio::test]
    async fn a_cut_holds_bytes_until_it_heals_and_a_reset_resets() {
        let proxy = FaultProxy::start(2, &[echo().await], profile(0), &Stream::root("t")).await.unwrap();
        let mut s = TcpStream::connect(proxy.agent(0).addresses()[0]).await.unwrap();
        assert_eq!(round_trip(&mut s, b"a").await.unwrap(), b"a");
        proxy.agent(0).update(|l| l.cut = 1);
        let held = tokio::time::timeout(Duration::from_millis(300), round_trip(&mut s, b"b")).await;
        assert!(held.is_err(), "a cut link carried bytes");
        let mut other = TcpStream::connect(proxy.agent(1).addresses()[0]).await.unwrap();
        assert_eq!(round_trip(&mut other, b"c").await.unwrap(), b"c", "another agent's link is not cut");
        proxy.agent(0).update(|l| l.cut = 0);
        let mut back = [0u8; 1];
        s.read_exact(&mut back).await.unwrap();
        assert_eq!(&back, b"b", "held, not dropped");
        proxy.agent(0).update(|l| l.resets += 1);
        let mut rest = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut rest)).await.unwrap();
        assert!(read.is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset), "a reset is a RST");
    }

    #[tokio::test]
    async fn a_chunk_that_draws_a_reset_resets_the_whole_connection_at_once() {
        let always = LinkProfile { reset_per_chunk: 1.0, ..profile(0) };
        let proxy = FaultProxy::start(1, &[echo().await], always, &Stream::root("t")).await.unwrap();
        let mut s = TcpStream::connect(proxy.agent(0).addresses()[0]).await.unwrap();
        s.write_all(b"x").await.unwrap();
        let mut rest = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut rest)).await;
        let read = read.expect("the connection ends: a reset one way never leaves the other hanging");
        assert!(read.is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset), "a reset is a RST");
    }

    #[tokio::test]
    async fn half_open_holds_only_the_nodes_bytes() {
        let proxy = FaultProxy::start(1, &[echo().await], profile(0), &Stream::root("t")).await.unwrap();
        let mut s = TcpStream::connect(proxy.agent(0).addresses()[0]).await.unwrap();
        proxy.agent(0).update(|l| l.up_held = true);
        let held = tokio::time::timeout(Duration::from_millis(300), round_trip(&mut s, b"x")).await;
        assert!(held.is_err());
        proxy.heal_all();
        let mut back = [0u8; 1];
        s.read_exact(&mut back).await.unwrap();
        assert_eq!(&back, b"x");
    }
}
