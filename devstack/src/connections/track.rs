//! What a connection has open: a tower layer that counts each request
//! from its arrival until its response body ends (a Session's stream for
//! its whole life), and bounds how long a request may take to be answered.
//! The connection's task watches the count to close it once idle.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http_body::{Body, Frame, SizeHint};
use tokio::sync::watch;
use tower::{Layer, Service};

/// The number of requests open on one connection.
#[derive(Clone)]
pub(crate) struct Open(Arc<watch::Sender<usize>>);

impl Open {
    pub(crate) fn new() -> (Open, watch::Receiver<usize>) {
        let (tx, rx) = watch::channel(0);
        (Open(Arc::new(tx)), rx)
    }

    fn enter(&self) -> Guard {
        self.0.send_modify(|n| *n += 1);
        Guard(self.0.clone())
    }
}

/// One open request; dropping it closes it.
pub(crate) struct Guard(Arc<watch::Sender<usize>>);

impl Drop for Guard {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n = n.saturating_sub(1));
    }
}

/// The layer: counts requests on `open`, answers `late()` for a request
/// not answered within `timeout`.
#[derive(Clone)]
pub(crate) struct TrackLayer<F> {
    pub open: Open,
    pub timeout: Duration,
    pub late: F,
}

impl<S, F: Clone> Layer<S> for TrackLayer<F> {
    type Service = Track<S, F>;
    fn layer(&self, inner: S) -> Self::Service {
        Track { inner, open: self.open.clone(), timeout: self.timeout, late: self.late.clone() }
    }
}

/// The service the layer wraps.
#[derive(Clone)]
pub(crate) struct Track<S, F> {
    inner: S,
    open: Open,
    timeout: Duration,
    late: F,
}

impl<S, F, Req, B> Service<Req> for Track<S, F>
where
    S: Service<Req, Response = http::Response<B>>,
    S::Future: Send + 'static,
    F: Fn() -> http::Response<B> + Clone + Send + 'static,
    B: Body + Unpin,
{
    type Response = http::Response<Tracked<B>>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Req) -> Self::Future {
        let guard = self.open.enter();
        let future = self.inner.call(request);
        let (timeout, late) = (self.timeout, self.late.clone());
        Box::pin(async move {
            let response = match tokio::time::timeout(timeout, future).await {
                Ok(response) => response?,
                Err(_) => late(),
            };
            Ok(response.map(|inner| Tracked { inner, _guard: guard }))
        })
    }
}

/// A response body that keeps its request open until it ends.
pub(crate) struct Tracked<B> {
    inner: B,
    _guard: Guard,
}

impl<B: Body + Unpin> Body for Tracked<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
