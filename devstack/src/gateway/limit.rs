//! The decoding cap (1 MiB) and its refusal: tonic refuses an oversized
//! unary request with its own `OutOfRange` message before any handler runs;
//! this layer rewrites that answer into the contract's
//! `InvalidArgument` `frame-too-large: …`. Streams (Session) see the same
//! error in their inbound stream and answer it themselves.

use std::task::{Context, Poll};

use tonic::{Code, Status};
use tower::{Layer, Service};

/// The largest message the gateway decodes.
pub const MAX_MESSAGE_BYTES: usize = 1024 * 1024;

/// Whether a status is tonic's "message too large" refusal.
pub fn is_too_large(status: &Status) -> bool {
    status.code() == Code::OutOfRange && status.message().contains("message length too large")
}

/// The contract's refusal of an oversized message.
pub fn too_large(detail: &str) -> Status {
    crate::status::refuse(
        crate::status::Code::FrameTooLarge,
        format!("a message above {MAX_MESSAGE_BYTES} bytes: {detail}"),
    )
}

/// The layer.
#[derive(Clone, Copy, Debug, Default)]
pub struct FrameLimitLayer;

impl<S> Layer<S> for FrameLimitLayer {
    type Service = FrameLimit<S>;
    fn layer(&self, inner: S) -> Self::Service {
        FrameLimit { inner }
    }
}

/// The service the layer wraps.
#[derive(Clone, Debug)]
pub struct FrameLimit<S> {
    inner: S,
}

impl<S, ReqBody, ResBody> Service<http::Request<ReqBody>> for FrameLimit<S>
where
    S: Service<http::Request<ReqBody>, Response = http::Response<ResBody>>,
    S::Future: Send + 'static,
    ResBody: Send + 'static,
{
    type Response = http::Response<ResBody>;
    type Error = S::Error;
    type Future = std::pin::Pin<Box<dyn std::future::Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<ReqBody>) -> Self::Future {
        let path = request.uri().path().to_string();
        let future = self.inner.call(request);
        Box::pin(async move {
            let mut response = future.await?;
            if let Some(status) = Status::from_header_map(response.headers()).filter(is_too_large) {
                let refusal = too_large(status.message());
                tracing::warn!(path = %path, message = refusal.message(), "gateway: request refused");
                // Replacing the two grpc headers cannot fail: the message is
                // plain ASCII, which add_header percent-encodes as needed.
                let _ = refusal.add_header(response.headers_mut());
            }
            Ok(response)
        })
    }
}
