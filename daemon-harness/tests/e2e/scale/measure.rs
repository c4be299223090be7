//! What a scale run measures besides the fleet's counts: the crypto floor
//! (the operations one node's join and first session cost, timed on this
//! machine), processes' CPU time and resident memory, fakehw's execution
//! counters and the agents' node ids.

use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use daemon_harness::node::Node;

/// The crypto floor: the P-256, X25519 and Ed25519 operations one node's
/// join and first session cost (as counted in docs/harness.md, "The scale
/// benchmark"), each timed with the implementation that does it: bcd's
/// with Go's crypto (`bcd sim --crypto-floor`), the stack's TLS with ring
/// (rustls's provider) and the rest with pki's crates; times N, over the
/// cores.
pub async fn crypto_floor(node: &Node, nodes: usize) -> Floor {
    let out = node.run(&["sim", "--crypto-floor"], None, Duration::from_secs(60)).await.unwrap();
    assert!(out.success(), "{out:?}");
    let go: serde_json::Value = serde_json::from_str(out.stdout.trim()).unwrap();
    let go = |k: &str| go[k].as_u64().unwrap_or_else(|| panic!("{k} in {go}")) as f64;
    let stack = StackCrypto::measure();
    let node_side = 3.0 * go("p256_sign_ns")
        + 3.0 * go("p256_verify_ns")
        + go("p256_keygen_ns")
        + go("p256_ecdh_ns")
        + 2.0 * go("x25519_ns")
        + 3.0 * go("ed25519_verify_ns");
    let stack_side = 2.0 * stack.tls_sign
        + stack.pki_sign
        + 4.0 * stack.verify
        + 2.0 * stack.tls_x25519
        + stack.pki_ecdh
        + 2.0 * stack.ed25519_sign;
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1) as f64;
    let ns = |f: f64| Duration::from_nanos(f as u64);
    Floor {
        total: ns((node_side + stack_side) * nodes as f64 / cores),
        node: ns(node_side),
        stack: ns(stack_side),
        // A resumed reconnection: the key exchange alone.
        resumed: [ns(go("x25519_ns")), ns(stack.tls_x25519)],
        // A full one: the handshake's signatures and verifications, and the
        // gateway's check of the node certificate.
        full: [
            ns(go("p256_sign_ns") + go("p256_verify_ns") + go("x25519_ns")),
            ns(stack.tls_sign + 2.0 * stack.verify + stack.tls_x25519),
        ],
    }
}

/// The crypto floor of a run, and what one node costs each side; and the
/// floor of one reconnection, resumed and full, on bcd and on the stack.
#[derive(Debug)]
pub struct Floor {
    pub total: Duration,
    pub node: Duration,
    pub stack: Duration,
    pub resumed: [Duration; 2],
    pub full: [Duration; 2],
}

/// How many of the `session.connected` lines in a bcd sim log say the
/// connection resumed a TLS session, and how many there are.
pub fn resumed_sessions(log: &str) -> [usize; 2] {
    let connected: Vec<&str> = log.lines().filter(|l| l.contains("session.connected")).collect();
    [connected.iter().filter(|l| l.contains("resumed=true")).count(), connected.len()]
}

/// The stack's operations, timed here (ns each).
struct StackCrypto {
    /// A TLS CertificateVerify signature (ring, P-256).
    tls_sign: f64,
    /// A certificate signature (pki: p256, RFC 6979).
    pki_sign: f64,
    /// A P-256 verification (pki and rustls both use ring's).
    verify: f64,
    /// A TLS key share: an X25519 key and the shared secret (ring).
    tls_x25519: f64,
    /// A JWE ECDH-ES open (p256).
    pki_ecdh: f64,
    /// An Ed25519 signature (ed25519-dalek).
    ed25519_sign: f64,
}

impl StackCrypto {
    fn measure() -> Self {
        use pki::Signer;
        const ROUNDS: u32 = 200;
        let msg = b"bcd crypto floor";
        let p256 = pki::keys::random_p256();
        let public_key = pki::PublicKey::P256(p256.public_key());
        let sig = Signer::sign(&p256, msg);
        let ed = pki::keys::random_ed25519();
        let peer = pki::keys::random_p256().public_key();
        let rng = ring::rand::SystemRandom::new();
        let alg = &ring::signature::ECDSA_P256_SHA256_ASN1_SIGNING;
        let pkcs8 = ring::signature::EcdsaKeyPair::generate_pkcs8(alg, &rng).unwrap();
        let tls_key = ring::signature::EcdsaKeyPair::from_pkcs8(alg, pkcs8.as_ref(), &rng).unwrap();
        let x25519_peer = ring::agreement::EphemeralPrivateKey::generate(&ring::agreement::X25519, &rng)
            .and_then(|k| k.compute_public_key())
            .unwrap();
        let time = |f: &mut dyn FnMut()| {
            let start = Instant::now();
            for _ in 0..ROUNDS {
                f();
            }
            start.elapsed().as_nanos() as f64 / f64::from(ROUNDS)
        };
        StackCrypto {
            tls_sign: time(&mut || {
                std::hint::black_box(tls_key.sign(&rng, msg).unwrap());
            }),
            pki_sign: time(&mut || drop(std::hint::black_box(Signer::sign(&p256, msg)))),
            verify: time(&mut || assert!(public_key.verify(msg, &sig))),
            tls_x25519: time(&mut || {
                let k = ring::agreement::EphemeralPrivateKey::generate(&ring::agreement::X25519, &rng).unwrap();
                let theirs = ring::agreement::UnparsedPublicKey::new(&ring::agreement::X25519, x25519_peer.as_ref());
                std::hint::black_box(ring::agreement::agree_ephemeral(k, &theirs, |s| s[0]).unwrap());
            }),
            pki_ecdh: time(&mut || {
                let e = pki::keys::random_p256();
                let shared = p256::ecdh::diffie_hellman(e.to_nonzero_scalar(), peer.as_affine());
                std::hint::black_box(shared);
            }),
            ed25519_sign: time(&mut || drop(std::hint::black_box(Signer::sign(&ed, msg)))),
        }
    }
}

/// How many times fakehw executed `command` under an agent's `dir`.
pub fn executions(dir: &Path, command: &str) -> u64 {
    let path = dir.join("fakehw-root/var/lib/fakehw/executions").join(command);
    match std::fs::read_to_string(&path) {
        Ok(text) => text.trim().parse().unwrap_or_else(|_| panic!("{} holds {text:?}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
        Err(e) => panic!("reading {}: {e}", path.display()),
    }
}

/// The node id an agent's config.toml names.
pub fn config_node_id(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .filter_map(|l| l.split_once('='))
        .find(|(k, _)| k.trim() == "node_id")
        .map(|(_, v)| v.trim().trim_matches('"').to_string())
        .filter(|id| !id.is_empty())
        .unwrap_or_else(|| panic!("{} names no node", path.display()))
}

/// Where the agents' directories go: `/dev/shm` when it is there (the
/// agents are simulated machines, each with its files, journal and fake
/// root: on this machine's shared disk, creating and fsyncing them is what
/// bcd sim spent its time on), else the temporary directory. The stack's
/// store stays on the disk.
pub fn agents_parent() -> std::path::PathBuf {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() { shm.to_path_buf() } else { std::env::temp_dir() }
}

/// The quantiles `qs` of milliseconds (nearest rank; 1.0 is the largest).
pub fn quantiles<const N: usize>(mut ms: Vec<i64>, qs: [f64; N]) -> [Duration; N] {
    ms.sort_unstable();
    qs.map(|q| Duration::from_millis(ms[((ms.len() - 1) as f64 * q).round() as usize].max(0) as u64))
}

pub fn unix_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

/// A process's resident memory (VmRSS), in bytes.
pub fn rss(pid: u32) -> Option<u64> {
    status_kib(&format!("/proc/{pid}/status"), "VmRSS:").map(|k| k * 1024)
}

/// The CPU time used so far by the control plane (this process and the
/// gateway processes `stack`) and by the bcd sim processes, in total.
pub fn cpu_times(stack: &[u32], sims: &[u32]) -> [Duration; 2] {
    let of = |pids: &[u32]| pids.iter().filter_map(|pid| cpu_time(&pid.to_string())).sum::<Duration>();
    [cpu_time("self").unwrap_or_default() + of(stack), of(sims)]
}

/// The CPU time (user and system) a process has used: `pid` or "self".
fn cpu_time(pid: &str) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command's ")": utime and stime are the 14th and
    // 15th of the line, in clock ticks.
    let mut rest = stat.rsplit_once(')')?.1.split_whitespace().skip(11);
    let ticks: u64 = rest.next()?.parse::<u64>().ok()? + rest.next()?.parse::<u64>().ok()?;
    // SAFETY: sysconf has no preconditions.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    Some(Duration::from_secs_f64(ticks as f64 / per_second))
}

/// The peak resident memory (VmHWM) of the control plane: this process's
/// and the gateway processes' `stack`, in bytes.
pub fn peak_rss(stack: &[u32]) -> Option<u64> {
    let own = status_kib("/proc/self/status", "VmHWM:")?;
    let others: u64 = stack.iter().filter_map(|pid| status_kib(&format!("/proc/{pid}/status"), "VmHWM:")).sum();
    Some((own + others) * 1024)
}

fn status_kib(path: &str, key: &str) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines().find_map(|l| l.strip_prefix(key)).and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}
