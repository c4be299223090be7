//! A Rust client that plays a node over real mTLS: it joins with a sealed
//! token, opens sessions, answers commands with node-signed results.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use devstack::DevStack;
use prost::Message as _;
use proto::gateway_frame::Frame as Out;
use proto::node_frame::Frame as In;
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Status, Streaming};

/// How long a test waits for anything.
pub const WAIT: Duration = Duration::from_secs(10);

pub use devstack::client::{ClientCert, channel, channel_with, client_config, dial, now_ms as devstack_now_ms, seal};

/// A fresh node key and its CSR.
pub fn key_and_csr() -> (p256::SecretKey, Vec<u8>, String) {
    let key = pki::keys::random_p256();
    let csr = pki::x509::csr(&key, "bcd").unwrap();
    let pin = pki::x509::parse_csr(&csr).unwrap().pin;
    (key, csr, pin)
}

/// Sends a JoinRequest without a client certificate.
pub async fn join_raw(stack: &DevStack, sealed: String, csr_der: Vec<u8>) -> Result<proto::JoinReply, Status> {
    let channel = channel(stack, None).await.expect("dial the gateway");
    let mut client = proto::join_client::JoinClient::new(channel);
    let request = proto::JoinRequest {
        method: Some(proto::join_request::Method::Token(proto::TokenJoin { sealed_token: sealed, csr_der })),
        claims: Some(proto::NodeClaims {
            hostname: "test-host".into(),
            daemon_version: "0.0.0-test".into(),
            hardware_id: "hw-1".into(),
            capabilities: vec![],
        }),
    };
    client.join(request).await.map(|r| r.into_inner())
}

/// A node that joined.
pub struct TestNode {
    pub id: String,
    pub key: p256::SecretKey,
    pub response: proto::JoinResponse,
    pub cert: ClientCert,
    pub journal_id: String,
    pub boot_id: String,
    seq: Arc<AtomicU64>,
}

impl TestNode {
    /// Joins with a token: a fresh key and CSR, the token sealed to the
    /// stack's join-encryption key, the response verified against its
    /// join-signing key and the CSR pin.
    pub async fn join(stack: &DevStack, token: &str) -> Result<TestNode, Status> {
        let (key, csr, pin) = key_and_csr();
        let reply = join_raw(stack, seal(stack, token, &pin), csr).await?;
        let Some(proto::join_reply::Reply::Response(env)) = reply.reply else { panic!("no response") };
        let env = pki::dsse::Envelope::from_proto(&env);
        let response = pki::join::verify_response(&env, &stack.join_signing_key(), &pin).expect("a valid response");
        Ok(TestNode::from_response(key, response))
    }

    /// A node that joined some other way (TPM): its key and verified response.
    pub fn from_response(key: p256::SecretKey, response: proto::JoinResponse) -> TestNode {
        let cert = ClientCert { chain: response.certificate_chain.clone(), key: key.clone() };
        TestNode {
            id: response.node_id.clone(),
            key,
            response,
            cert,
            journal_id: format!("journal-{}", hex::encode(&pki::keys::random_p256().to_bytes()[..4])),
            boot_id: "boot-1".into(),
            seq: Arc::new(AtomicU64::new(0)),
        }
    }

    /// The same node with a renewed key and certificate chain.
    pub fn renewed(self, key: p256::SecretKey, chain: Vec<Vec<u8>>) -> TestNode {
        TestNode { cert: ClientCert { chain, key: key.clone() }, key, ..self }
    }

    /// The Hello of this node.
    pub fn hello(&self, applied_generation: u64) -> proto::NodeFrame {
        proto::NodeFrame {
            seq: 0,
            frame: Some(In::Hello(proto::Hello {
                node_id: self.id.clone(),
                journal_id: self.journal_id.clone(),
                boot_id: self.boot_id.clone(),
                daemon_version: "0.0.0-test".into(),
                capabilities: vec!["diag.nvml".into()],
                drivers: vec![],
                applied_generation,
                server_time_mark_ms: 0,
                last_acked_seq: 0,
            })),
        }
    }

    /// Opens a session: Hello, then the Welcome.
    pub async fn connect(&self, stack: &DevStack, applied_generation: u64) -> Result<Session, Status> {
        self.connect_with(stack, self.hello(applied_generation)).await
    }

    /// Opens a session with this node's Hello changed by `edit` (another
    /// daemon version, say).
    pub async fn connect_as(
        &self,
        stack: &DevStack,
        applied_generation: u64,
        edit: impl FnOnce(&mut proto::Hello),
    ) -> Result<Session, Status> {
        let mut first = self.hello(applied_generation);
        if let Some(In::Hello(hello)) = &mut first.frame {
            edit(hello);
        }
        self.connect_with(stack, first).await
    }

    async fn connect_with(&self, stack: &DevStack, first: proto::NodeFrame) -> Result<Session, Status> {
        let mut session = Session::open(stack, Some(self.cert.clone()), first).await?;
        session.node_id = self.id.clone();
        session.key = Some(self.key.clone());
        session.boot_id = self.boot_id.clone();
        session.seq = self.seq.clone();
        let welcome = session.next_frame(WAIT).await.map_err(Status::unavailable)?;
        match welcome.frame {
            Some(Out::Welcome(w)) => session.welcome = w,
            other => panic!("expected a Welcome, got {other:?}"),
        }
        Ok(session)
    }
}

/// A live session seen from the node.
pub struct Session {
    tx: mpsc::Sender<proto::NodeFrame>,
    rx: Streaming<proto::GatewayFrame>,
    pending: VecDeque<proto::GatewayFrame>,
    pub welcome: proto::Welcome,
    pub acked: u64,
    pub node_id: String,
    key: Option<p256::SecretKey>,
    boot_id: String,
    seq: Arc<AtomicU64>,
}

impl Session {
    /// Opens the stream and sends `first`; no Welcome is awaited.
    pub async fn open(stack: &DevStack, cert: Option<ClientCert>, first: proto::NodeFrame) -> Result<Session, Status> {
        let channel = channel(stack, cert).await.map_err(|e| Status::unavailable(e.to_string()))?;
        Self::open_on(channel, first).await
    }

    /// Opens the stream on `channel` and sends `first`; no Welcome is awaited.
    pub async fn open_on(channel: tonic::transport::Channel, first: proto::NodeFrame) -> Result<Session, Status> {
        let mut client =
            proto::gateway_client::GatewayClient::new(channel).max_decoding_message_size(devstack::MAX_MESSAGE_BYTES);
        let (tx, rx) = mpsc::channel(16);
        tx.send(first).await.unwrap();
        let rx = client.session(ReceiverStream::new(rx)).await?.into_inner();
        Ok(Session {
            tx,
            rx,
            pending: VecDeque::new(),
            welcome: proto::Welcome::default(),
            acked: 0,
            node_id: String::new(),
            key: None,
            boot_id: String::new(),
            seq: Arc::new(AtomicU64::new(0)),
        })
    }

    /// The next frame from the stream (pings answered, acks noted, both kept).
    async fn next_frame(&mut self, wait: Duration) -> Result<proto::GatewayFrame, String> {
        match tokio::time::timeout(wait, self.rx.message()).await {
            Err(_) => Err("timed out".into()),
            Ok(Err(status)) => Err(format!("status {:?}: {}", status.code(), status.message())),
            Ok(Ok(None)) => Err("the stream ended".into()),
            Ok(Ok(Some(f))) => {
                match &f.frame {
                    Some(Out::Ping(p)) => {
                        let _ = self.tx.send(control(In::Pong(proto::Pong { nonce: p.nonce }))).await;
                    }
                    Some(Out::EventAck(a)) => self.acked = self.acked.max(a.up_to_seq),
                    _ => {}
                }
                Ok(f)
            }
        }
    }

    /// The next frame that is not a Ping nor an EventAck and matches `pred`;
    /// other such frames are kept for later calls.
    pub async fn wait_for(
        &mut self,
        pred: impl Fn(&proto::GatewayFrame) -> bool,
    ) -> Result<proto::GatewayFrame, String> {
        if let Some(i) = self.pending.iter().position(&pred) {
            return Ok(self.pending.remove(i).unwrap());
        }
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let f = self.next_frame(left).await?;
            if matches!(f.frame, Some(Out::Ping(_)) | Some(Out::EventAck(_))) {
                continue;
            }
            if pred(&f) {
                return Ok(f);
            }
            self.pending.push_back(f);
        }
    }

    /// Reads until the stream ends; returns its final status (Ok for a
    /// clean end) and the frames seen.
    pub async fn until_end(&mut self) -> (Result<(), Status>, Vec<proto::GatewayFrame>) {
        let mut seen: Vec<_> = self.pending.drain(..).collect();
        loop {
            match tokio::time::timeout(WAIT, self.rx.message()).await.expect("the stream ends in time") {
                Ok(Some(f)) => seen.push(f),
                Ok(None) => return (Ok(()), seen),
                Err(status) => return (Err(status), seen),
            }
        }
    }

    /// Sends a heartbeat every 50 ms for `span`, answering pings and keeping
    /// other frames; returns how many pings arrived.
    pub async fn keep_alive(&mut self, span: Duration) -> u64 {
        let until = tokio::time::Instant::now() + span;
        let mut tick = tokio::time::interval(Duration::from_millis(50));
        let mut pings = 0;
        while tokio::time::Instant::now() < until {
            tokio::select! {
                _ = tick.tick() => self.heartbeat(0).await,
                f = self.next_frame(span) => match f.expect("the session stays open") {
                    proto::GatewayFrame { frame: Some(Out::Ping(_)), .. } => pings += 1,
                    proto::GatewayFrame { frame: Some(Out::EventAck(_)), .. } => {}
                    other => self.pending.push_back(other),
                },
            }
        }
        pings
    }

    /// Waits for an EventAck covering `seq`.
    pub async fn await_ack(&mut self, seq: u64) {
        let deadline = tokio::time::Instant::now() + WAIT;
        while self.acked < seq {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let f = self.next_frame(left).await.expect("an ack");
            if !matches!(f.frame, Some(Out::Ping(_)) | Some(Out::EventAck(_))) {
                self.pending.push_back(f);
            }
        }
    }

    /// Sends a frame as is.
    pub async fn send(&self, f: proto::NodeFrame) {
        self.tx.send(f).await.expect("the session is open");
    }

    /// Sends an event with the next journal seq; returns the seq.
    pub async fn send_event(&self, frame: In) -> u64 {
        let seq = self.seq.fetch_add(1, Ordering::SeqCst) + 1;
        self.send(proto::NodeFrame { seq, frame: Some(frame) }).await;
        seq
    }

    /// Re-sends an event with a given seq (a duplicate).
    pub async fn resend_event(&self, seq: u64, frame: In) {
        self.send(proto::NodeFrame { seq, frame: Some(frame) }).await;
    }

    /// The last seq this node used.
    pub fn last_seq(&self) -> u64 {
        self.seq.load(Ordering::SeqCst)
    }

    /// Waits for the next delivered command.
    pub async fn expect_command(&mut self) -> (proto::Command, proto::Envelope) {
        let f = self.wait_for(|f| matches!(f.frame, Some(Out::Command(_)))).await.expect("a command");
        let Some(Out::Command(delivery)) = f.frame else { unreachable!() };
        let env = delivery.command.expect("an envelope");
        (proto::Command::decode(env.payload.as_slice()).expect("a Command payload"), env)
    }

    /// Waits for the next command delivery, whole.
    pub async fn expect_delivery(&mut self) -> proto::CommandDelivery {
        let f = self.wait_for(|f| matches!(f.frame, Some(Out::Command(_)))).await.expect("a command");
        let Some(Out::Command(delivery)) = f.frame else { unreachable!() };
        delivery
    }

    /// Waits for the Welcome.
    pub async fn expect_welcome(&mut self) -> proto::Welcome {
        let f = self.wait_for(|f| matches!(f.frame, Some(Out::Welcome(_)))).await.expect("a Welcome");
        let Some(Out::Welcome(welcome)) = f.frame else { unreachable!() };
        welcome
    }

    /// Waits for the next DesiredState.
    pub async fn expect_desired_state(&mut self) -> (proto::NodeSpec, proto::Envelope) {
        let f = self.wait_for(|f| matches!(f.frame, Some(Out::DesiredState(_)))).await.expect("a desired state");
        let Some(Out::DesiredState(ds)) = f.frame else { unreachable!() };
        let env = ds.spec.expect("an envelope");
        (proto::NodeSpec::decode(env.payload.as_slice()).expect("a NodeSpec payload"), env)
    }

    /// A node-signed result for a command, signed with `key`.
    pub fn signed_result(
        &self,
        key: &p256::SecretKey,
        cmd: &proto::Command,
        state: proto::CommandState,
        reason: &str,
        output: &str,
    ) -> proto::Envelope {
        let statement = proto::NodeStatement {
            node_id: self.node_id.clone(),
            boot_id: self.boot_id.clone(),
            at_ms: devstack_now_ms(),
            body: Some(proto::node_statement::Body::CommandResult(proto::CommandResult {
                command_id: cmd.id.clone(),
                kind: cmd.kind.clone(),
                state: state as i32,
                reason: reason.to_string(),
                output: output.as_bytes().to_vec(),
            })),
        };
        pki::statement::sign(key, &statement).to_proto()
    }

    /// A CommandUpdate event.
    pub fn update(cmd_id: &str, state: proto::CommandState, result: Option<proto::Envelope>) -> In {
        In::CommandUpdate(proto::CommandUpdate {
            command_id: cmd_id.to_string(),
            state: state as i32,
            reason: String::new(),
            result,
            at_ms: devstack_now_ms(),
        })
    }

    /// ACCEPTED, RUNNING, then SUCCEEDED with a node-signed result; returns
    /// the seq of the last event after it is acknowledged.
    pub async fn complete(&mut self, cmd: &proto::Command, output: &str) -> u64 {
        use proto::CommandState::*;
        self.send_event(Self::update(&cmd.id, Accepted, None)).await;
        self.send_event(Self::update(&cmd.id, Running, None)).await;
        let key = self.key.clone().expect("a node key");
        let result = self.signed_result(&key, cmd, Succeeded, "", output);
        let seq = self.send_event(Self::update(&cmd.id, Succeeded, Some(result))).await;
        self.await_ack(seq).await;
        seq
    }

    /// A heartbeat.
    pub async fn heartbeat(&self, applied_generation: u64) {
        self.send(control(In::Heartbeat(proto::Heartbeat { at_ms: devstack_now_ms(), applied_generation }))).await;
    }
}

/// A control frame (seq 0).
pub fn control(frame: In) -> proto::NodeFrame {
    proto::NodeFrame { seq: 0, frame: Some(frame) }
}

/// The diag.nvml output of a machine with `gpus` GPUs.
pub fn diag_output(gpus: u32) -> String {
    format!(r#"{{"gpus":{gpus},"healthy":{gpus},"driver":"550.54.15"}}"#)
}

/// Joins with `token`, answers the acceptance check (`gpus` GPUs) and
/// applies generation 1: an adopted node and its live session.
pub async fn adopted(stack: &DevStack, token: &str, gpus: u32) -> (TestNode, Session) {
    let node = TestNode::join(stack, token).await.unwrap();
    let mut session = node.connect(stack, 0).await.unwrap();
    let (diag, _) = session.expect_command().await;
    session.complete(&diag, &diag_output(gpus)).await;
    session.expect_desired_state().await;
    session.heartbeat(1).await;
    stack.await_adopted(&node.id, WAIT).await.unwrap();
    (node, session)
}

/// A `gpus` inventory section with GPUs 0..n.
pub fn gpus_section(n: u32) -> proto::InventorySection {
    use sha2::Digest as _;
    let gpus = proto::GpuInventory {
        driver_version: "550.54.15".into(),
        fabric: "nvswitch".into(),
        gpus: (0..n)
            .map(|i| proto::Gpu { index: i, uuid: format!("GPU-{i}"), model: "H100".into(), ..Default::default() })
            .collect(),
        ..Default::default()
    };
    let content = gpus.encode_to_vec();
    proto::InventorySection { name: "gpus".into(), sha256: hex::encode(sha2::Sha256::digest(&content)), content }
}

/// A node-signed AllocationBound.
pub fn allocation_bound(
    node: &TestNode,
    key: &dyn pki::Signer,
    allocation_id: &str,
    gpu_indexes: &[u32],
    generation: u64,
) -> proto::Envelope {
    let statement = proto::NodeStatement {
        node_id: node.id.clone(),
        boot_id: node.boot_id.clone(),
        at_ms: devstack_now_ms(),
        body: Some(proto::node_statement::Body::AllocationBound(proto::AllocationBound {
            allocation_id: allocation_id.to_string(),
            gpu_indexes: gpu_indexes.to_vec(),
            cdi_devices: gpu_indexes.iter().map(|i| format!("nvidia.com/gpu={i}")).collect(),
            generation,
            ..Default::default()
        })),
    };
    pki::statement::sign(key, &statement).to_proto()
}

/// `GET path` on the stack's HTTP listener: the status code and the body.
pub async fn http_get(stack: &DevStack, path: &str) -> (u16, Vec<u8>) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut tcp = TcpStream::connect(stack.http_url().trim_start_matches("http://")).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    tcp.write_all(request.as_bytes()).await.unwrap();
    let mut response = Vec::new();
    tcp.read_to_end(&mut response).await.unwrap();
    let split = response.windows(4).position(|w| w == b"\r\n\r\n").expect("a header block");
    let head = String::from_utf8_lossy(&response[..split]).into_owned();
    let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).expect("a status code");
    assert!(!head.to_ascii_lowercase().contains("transfer-encoding: chunked"), "{head}");
    (status, response[split + 4..].to_vec())
}
