//! The gateway (tonic `Gateway`): Session, Renew and Tunnel, each only for a
//! caller whose client certificate belongs to a known, unrevoked node. What
//! a session's frames and a Tunnel call do is the features' ([`Handlers`]).

use std::pin::Pin;
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::{Stream, StreamExt as _};
use tonic::{Request, Response, Status, Streaming};
use tracing::warn;

use crate::shared::Shared;
use crate::status::{self, Code, refuse};
use handlers::Handlers;

pub mod auth;
mod fence;
pub mod handlers;
mod hello;
pub mod limit;
pub mod renew;
pub mod session;

/// How many frames may wait for a slow node before the session blocks.
const OUTBOUND_BUFFER: usize = 64;

/// The gateway service.
#[derive(Clone)]
pub struct GatewayService {
    /// The stack's shared state.
    pub shared: Arc<Shared>,
    /// What handles the sessions' frames and the Tunnel calls.
    pub handlers: Arc<Handlers>,
}

impl GatewayService {
    /// A gateway over the stack's shared state, its frames and calls handled
    /// by `handlers`.
    pub fn new(shared: Arc<Shared>, handlers: Arc<Handlers>) -> Self {
        GatewayService { shared, handlers }
    }

    fn authenticate<T>(&self, rpc: &str, request: &Request<T>) -> Result<auth::AuthedNode, Status> {
        auth::authenticate(&self.shared, request).inspect_err(|status| {
            let peer = request.extensions().get::<crate::tls::PeerInfo>().map(|p| p.remote_addr);
            warn!(rpc, peer = ?peer, code = status::code_of(status), message = status.message(), "gateway: refused");
        })
    }
}

type FrameStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

#[tonic::async_trait]
impl proto::gateway_server::Gateway for GatewayService {
    type SessionStream = FrameStream<proto::GatewayFrame>;
    type TunnelStream = FrameStream<proto::TunnelFrame>;

    async fn session(
        &self,
        request: Request<Streaming<proto::NodeFrame>>,
    ) -> Result<Response<Self::SessionStream>, Status> {
        let node = self.authenticate("Session", &request)?;
        if self.shared.is_draining() {
            return Err(refuse(Code::Draining, "the dev stack is shutting down"));
        }
        let (tx, rx) = mpsc::channel(OUTBOUND_BUFFER);
        let transport = crate::hub::Transport::Grpc;
        let (shared, handlers) = (self.shared.clone(), self.handlers.clone());
        tokio::spawn(session::run(shared, handlers, node, transport, request.into_inner(), tx));
        Ok(Response::new(Box::pin(ReceiverStream::new(rx).map(|item| item.map(|frame| *frame)))))
    }

    async fn renew(&self, request: Request<proto::RenewRequest>) -> Result<Response<proto::RenewReply>, Status> {
        let node = self.authenticate("Renew", &request)?;
        match renew::renew(&self.shared, &node, request.get_ref()) {
            Ok(reply) => Ok(Response::new(reply)),
            Err(status) => {
                warn!(
                    node_id = %node.node_id,
                    code = status::code_of(&status),
                    message = status.message(),
                    "gateway: renewal refused"
                );
                Err(status)
            }
        }
    }

    async fn tunnel(
        &self,
        request: Request<Streaming<proto::TunnelFrame>>,
    ) -> Result<Response<Self::TunnelStream>, Status> {
        let node = self.authenticate("Tunnel", &request)?;
        Ok(Response::new(self.handlers.tunnel.accept(node, request.into_inner()).await?))
    }
}
