//! The admin endpoint (docs/devstack.md, "The admin endpoint"): HTTP on
//! loopback only, every request authenticated with a bearer token that lives
//! in a file readable by the owner only, both found through a discovery
//! file ([`discovery`]). `devstack serve` runs it; the CLI's subcommands
//! (`devstack nodes`, `command`, `events --watch`, …) talk to it through
//! [`client`]. The wire types are [`api`].
//!
//! Each resource has its own module of routes (`nodes`, `tokens`,
//! `commands`, `reservations`, `pools`, `instances`, `events`,
//! `stack_info`, `console`, `cordon`, `ssh`), merged
//! in [`router`]; a feature that adds an admin subcommand adds its module
//! there and its client call beside the others (the console's is
//! [`console_client`]). Routes call the in-process API ([`DevStack`]) only.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use proto::refusal::Code;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{info, warn};

use crate::DevStack;
use crate::clock::now_ms;
use crate::error::Error;

pub mod api;
mod auth;
pub mod client;
mod commands;
mod console;
pub mod console_client;
mod cordon;
pub mod discovery;
mod events;
mod instances;
pub mod kinds;
mod nodes;
mod pools;
pub mod query;
mod refusal;
pub mod releases;
mod reservations;
mod ssh;
mod stack_info;
mod tokens;

pub(crate) use refusal::ApiError;

/// How long the endpoint's shutdown waits for open requests (an `events
/// --watch` stream ends at once) before it drops them.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// The longest wait one request may ask for.
pub(crate) const MAX_WAIT: Duration = Duration::from_secs(600);

/// How to run the endpoint.
#[derive(Clone, Debug)]
pub struct AdminOptions {
    /// The discovery file to write ([`discovery::path`]).
    pub discovery: PathBuf,
    /// The stack's data directory: minted join tokens go to
    /// `<data_dir>/join-tokens/<token id>`.
    pub data_dir: PathBuf,
    /// The pool a token request without one joins nodes into (by name or id).
    pub default_pool: String,
    /// The release directory (`devstack serve --releases`), rescanned
    /// before a `daemon.upgrade` to a version ([`releases`]).
    pub releases: Option<PathBuf>,
}

/// What every route sees.
pub(crate) struct AdminState {
    pub stack: Arc<DevStack>,
    pub options: AdminOptions,
    /// The endpoint's own URL.
    pub url: String,
    /// Turns true when the endpoint stops: streams and waits end.
    pub stop: watch::Receiver<bool>,
}

/// The shared state of the routes.
pub(crate) type State = Arc<AdminState>;

/// A running admin endpoint; [`Admin::shutdown`] stops it and removes its
/// files (dropping it removes the files too).
pub struct Admin {
    url: String,
    files: discovery::Published,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

/// The routes, each resource's merged, behind the token check.
fn router(state: State, token_sha256: [u8; 32]) -> Router {
    Router::new()
        .merge(stack_info::routes())
        .merge(nodes::routes())
        .merge(tokens::routes())
        .merge(commands::routes())
        .merge(reservations::routes())
        .merge(events::routes())
        .merge(console::routes())
        .merge(pools::routes())
        .merge(instances::routes())
        .merge(cordon::routes())
        .merge(ssh::routes())
        .fallback(|| async { ApiError::not_found(Code::RouteUnknown, "no such admin route") })
        // The token is checked first (a request without it is 401 whatever
        // its Host), then the Host (with the token, a non-loopback one is 421).
        .layer(axum::middleware::from_fn(auth::require_loopback_host))
        .layer(axum::middleware::from_fn_with_state(Arc::new(token_sha256), auth::require_token))
        .with_state(state)
}

impl Admin {
    /// Serves the endpoint for `stack` on a kernel-picked loopback port, with
    /// a fresh token written (0600) beside the discovery file, then the
    /// discovery file.
    pub async fn serve(stack: Arc<DevStack>, options: AdminOptions) -> Result<Admin, Error> {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| Error::Bind { addr: addr.to_string(), source })?;
        let local = listener.local_addr().map_err(|source| Error::Bind { addr: addr.to_string(), source })?;
        let url = format!("http://{local}");
        let token = auth::fresh_token();
        let what = discovery::Discovery {
            url: url.clone(),
            token_file: PathBuf::new(),
            pid: std::process::id(),
            data_dir: options.data_dir.clone(),
            started_at_ms: now_ms(),
        };
        let files = discovery::Published::write(&options.discovery, what, &token)
            .map_err(|source| Error::Io { path: options.discovery.clone(), source })?;
        let (stop, stopped) = watch::channel(false);
        let state = Arc::new(AdminState { stack, options, url: url.clone(), stop: stopped.clone() });
        let app = router(state, auth::digest(&token));
        drop(token);
        let task = tokio::spawn(async move {
            let mut signal = stopped;
            let shutdown = async move {
                let _ = signal.wait_for(|s| *s).await;
            };
            if let Err(e) = axum::serve(listener, app).with_graceful_shutdown(shutdown).await {
                warn!(error = %e, "admin endpoint stopped");
            }
        });
        info!(url = %url, discovery = %files.path().display(), "admin endpoint serving");
        Ok(Admin { url, files, stop, task })
    }

    /// The endpoint's URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The discovery file.
    pub fn discovery_path(&self) -> &std::path::Path {
        self.files.path()
    }

    /// Stops serving (open streams end, open requests get
    /// [`SHUTDOWN_GRACE`]) and removes the discovery and token files.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let mut task = self.task;
        if tokio::time::timeout(SHUTDOWN_GRACE, &mut task).await.is_err() {
            warn!("admin endpoint: requests still open after the grace period; dropped");
            task.abort();
            let _ = task.await;
        }
        drop(self.files);
    }
}

/// The refusal of a wait or stream the endpoint's stop cut short (503 `draining`).
pub(crate) fn stopping() -> ApiError {
    ApiError::new(StatusCode::SERVICE_UNAVAILABLE, Code::Draining, "the dev stack is stopping")
}

/// A route's answer: JSON, or a refusal.
pub(crate) type Answer<T> = Result<axum::Json<T>, ApiError>;

/// Resolves the node a person named: its id, a unique prefix of its id, or
/// its unique hostname. An empty name or one with a control character is
/// refused before anything is looked up.
pub(crate) fn resolve_node(stack: &DevStack, name: &str) -> Result<crate::NodeRow, ApiError> {
    check_name("node", name)?;
    let nodes = stack.view(|v| v.nodes())?;
    if let Some(exact) = nodes.iter().find(|n| n.id == name) {
        return Ok(exact.clone());
    }
    let matching: Vec<&crate::NodeRow> =
        nodes.iter().filter(|n| n.id.starts_with(name) || n.hostname == name).collect();
    match matching.as_slice() {
        [one] => Ok((*one).clone()),
        [] => Err(ApiError::not_found(
            Code::NodeUnknown,
            format!("no node is named {name:?} (by id, id prefix or hostname)"),
        )),
        many => Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            Code::NodeAmbiguous,
            format!(
                "{name:?} names {} nodes ({}): give more of the id",
                many.len(),
                many.iter().map(|n| n.id.as_str()).collect::<Vec<_>>().join(", ")
            ),
        )),
    }
}

/// The longest name (of a node, command, pool…) a request may carry.
pub const MAX_NAME: usize = 256;

/// Refuses a name no stack object has: empty, longer than [`MAX_NAME`], or
/// with a control character (`request-invalid`).
pub(crate) fn check_name(what: &str, name: &str) -> Result<(), ApiError> {
    if name.is_empty() {
        return Err(ApiError::bad_request(format!("the {what} name is empty")));
    }
    if name.len() > MAX_NAME || name.chars().any(char::is_control) {
        return Err(ApiError::bad_request(format!(
            "{name:?} is no {what} name (at most {MAX_NAME} bytes, no control character)"
        )));
    }
    Ok(())
}
