//! The composition root: it opens the store, loads the keys, binds the
//! listeners, builds each feature's state and the handler list the gateway
//! routes node frames to, serves the three listeners, and stops them again
//! (Drain to every session) so that a stack can start again on the same
//! SQLite file. This is the one place that knows every feature.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

use crate::clock::now_ms;
use crate::connections::{self, Phase};
use crate::error::{Error, Result};
use crate::gateway::GatewayService;
use crate::gateway::handlers::Handlers;
use crate::gateway::limit;
use crate::hub::Control;
use crate::join::JoinService;
use crate::keys::{ServingNames, StackKeys};
use crate::options::DevStackOptions;
use crate::shared::{Settings, Shared};
use crate::store::{Store, sessions};
use crate::tickets::TicketKeys;
use crate::tpm::TpmJoin;
use crate::tunnels::ConsoleEnd;
use crate::tunnels::registry::Registry;
use crate::tunnels::relay::Relay;
use crate::{adoption, capabilities, commands, http, https, instances, inventory, nodes, reservations, sections};
use crate::{secrets, spec, tickets, tls, workload};

/// How long shutdown waits for the sessions to drain …
const DRAIN_GRACE: Duration = Duration::from_secs(4);
/// … and then for the servers to close their connections, before it cuts
/// what is left: a shutdown takes at most the two (docs/devstack.md).
const STOP_GRACE: Duration = Duration::from_secs(1);

/// A running stack's parts: what the facade serves from.
pub(crate) struct Running {
    /// The core.
    pub shared: Arc<Shared>,
    /// The TPM attestor, when the stack has one.
    pub tpm: Option<Arc<TpmJoin>>,
    /// The consoles' tunnels, opening and open.
    pub tunnels: Arc<Registry>,
    /// The listeners' addresses.
    pub gateway_addr: SocketAddr,
    pub http_addr: SocketAddr,
    pub https_addr: SocketAddr,
    /// The listeners' phase (closed, then stopped, at shutdown).
    stop: watch::Sender<Phase>,
    tasks: Vec<JoinHandle<()>>,
}

/// Which feature handles what a node sends, in order.
pub(crate) fn handlers(tunnels: &Arc<Registry>) -> Handlers {
    Handlers {
        hello: vec![
            Box::new(commands::journal::JournalLost),
            Box::new(instances::Drivers),
            Box::new(capabilities::Capabilities),
        ],
        welcomed: vec![Box::new(adoption::FirstSession)],
        status_report: vec![
            Box::new(inventory::Inventory),
            Box::new(nodes::AppliedGeneration),
            Box::new(reservations::Allocations),
            Box::new(sections::Sections),
            Box::new(instances::Reports),
        ],
        command_update: vec![Box::new(commands::updates::CommandUpdates), Box::new(adoption::AcceptanceCheck)],
        spec_request: Box::new(spec::SpecRequests),
        secret_request: Box::new(secrets::SecretRequests),
        workload_token_request: Box::new(workload::WorkloadTokens),
        tunnel: Box::new(Relay(tunnels.clone())),
    }
}

/// The names of the serving certificate: the defaults, the extra ones, the
/// listening address (when it is a specific one) and the advertised host.
fn serving_names(options: &DevStackOptions) -> ServingNames {
    let mut ips = options.extra_ips.clone();
    let mut dns = options.extra_dns_names.clone();
    if !options.listen_host.is_unspecified() {
        ips.push(options.listen_host);
    }
    if let Some(host) = &options.advertise_host {
        match host.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>() {
            Ok(ip) => ips.push(ip),
            Err(_) => dns.push(host.clone()),
        }
    }
    ServingNames::new(&dns, &ips)
}

/// A listener bound at `host:port` and the address it got.
fn bind(host: IpAddr, port: u16) -> Result<(TcpListener, SocketAddr)> {
    let addr = SocketAddr::new(host, port);
    let bind_error = |source| Error::Bind { addr: addr.to_string(), source };
    let listener = crate::listen::bind(addr).map_err(bind_error)?;
    let local = listener.local_addr().map_err(bind_error)?;
    Ok((listener, local))
}

/// The gateway: our TLS acceptor and connection handling in front of
/// tonic's routes (Join and Gateway).
fn serve_gateway(
    gateway: GatewayService,
    tpm: Option<Arc<TpmJoin>>,
    listener: TcpListener,
    stop: &watch::Sender<Phase>,
) -> Result<JoinHandle<()>> {
    let shared = gateway.shared.clone();
    let tickets = Arc::new(TicketKeys::load(&shared.ledger)?);
    tokio::spawn(refresh_tickets(Arc::downgrade(&shared), tickets.clone(), stop.subscribe()));
    let config = tls::server_config(&shared.keys, tls::Alpn::GATEWAY, Some(tickets))?;
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    let join = proto::join_server::JoinServer::new(JoinService::new(shared.clone(), tpm))
        .max_decoding_message_size(limit::MAX_MESSAGE_BYTES);
    let gateway =
        proto::gateway_server::GatewayServer::new(gateway).max_decoding_message_size(limit::MAX_MESSAGE_BYTES);
    let routes = tonic::service::Routes::new(join).add_service(gateway).prepare();
    let options = shared.settings.options.connections.clone();
    Ok(tokio::spawn(connections::gateway(listener, acceptor, routes, options, stop.subscribe())))
}

/// Reads the store's ticket keys again every `tickets::REFRESH` (making
/// the next period's, if no gateway has) until the stack stops.
async fn refresh_tickets(shared: std::sync::Weak<Shared>, keys: Arc<TicketKeys>, mut stop: watch::Receiver<Phase>) {
    let mut tick = tokio::time::interval(tickets::REFRESH);
    tick.tick().await;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => return,
        }
        let Some(shared) = shared.upgrade() else { return };
        let keys = keys.clone();
        match tokio::task::spawn_blocking(move || keys.refresh(&shared.ledger)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => warn!(error = %e, "tls: the ticket keys could not be read again (the next refresh tries)"),
            Err(e) => warn!(error = %e, "tls: the ticket keys' refresh did not finish"),
        }
    }
}

impl Running {
    /// Starts a stack: opens the store (migrations), loads or creates its
    /// keys, and serves the gateway (TLS), the HTTPS listener and the HTTP
    /// side.
    pub async fn start(options: DevStackOptions) -> Result<Running> {
        tls::install_crypto_provider();
        let store = Store::open(&options.store)?;
        let now = now_ms();
        let stale = store.write(|c| sessions::close_all_open(c, &options.gateway_id, now))?;
        if stale > 0 {
            info!(sessions = stale, "devstack: closed sessions left open by a previous run");
        }
        let (gateway_listener, gateway_addr) = bind(options.listen_host, options.gateway_port)?;
        let (http_listener, http_addr) = bind(options.listen_host, options.http_port)?;
        let (https_listener, https_addr) = bind(options.listen_host, options.https_port)?;

        let names = serving_names(&options);
        let keys = StackKeys::load_or_create(
            &store,
            &names,
            options.signed_intent,
            &options.trust_domain,
            &options.release_keys,
            now,
        )?;
        let tpm = options.tpm_attestor.clone().map(|o| Arc::new(TpmJoin::new(o)));
        let tunnels_options = options.tunnels.clone();
        let store_location = options.store.clone();
        let shared = Arc::new(Shared::new(store, keys, Settings::new(options, gateway_addr, http_addr, https_addr)));
        let changes = shared.ledger.changes().clone();
        let tunnels = Arc::new(Registry::new(tunnels_options, changes));
        let gateway = GatewayService::new(shared.clone(), Arc::new(handlers(&tunnels)));
        let (stop, _) = watch::channel(Phase::Serving);
        crate::cluster::join(&shared, stop.subscribe())?;
        let options = &shared.settings.options;
        let tasks = vec![
            serve_gateway(gateway.clone(), tpm.clone(), gateway_listener, &stop)?,
            tokio::spawn(connections::http(
                http_listener,
                http::router(shared.clone()),
                options.connections.clone(),
                stop.subscribe(),
            )),
            https::serve(gateway, https_listener, &stop)?,
            tokio::spawn(crate::reservation_ends::run(shared.clone(), stop.subscribe())),
        ];
        info!(
            gateway = %shared.settings.gateway_url,
            http = %http_addr,
            https = %shared.settings.https_base_url,
            serving_dns = ?names.dns,
            serving_ips = ?names.ips,
            signed_intent = shared.keys.intent.is_some(),
            tpm_attestor = tpm.is_some(),
            store = ?store_location,
            "devstack: started"
        );
        Ok(Running { shared, tpm, tunnels, gateway_addr, http_addr, https_addr, stop, tasks })
    }

    /// Shuts down gracefully: the listeners close (a node that redials is
    /// refused at connect), Drain goes to every session, then the servers
    /// stop.
    pub async fn shutdown(mut self) -> Result<()> {
        let started = tokio::time::Instant::now();
        let shared = self.shared.clone();
        let _ = self.stop.send(Phase::Closed);
        crate::cluster::drain(&self.shared);
        let drain = Control::Drain {
            reason: "the dev stack is shutting down".into(),
            retry_after_ms: shared.settings.options.drain_retry_after_ms,
        };
        shared.start_draining();
        for caller in self.tunnels.close_all() {
            let why = format!("{}: the dev stack is shutting down", crate::status::Code::Draining);
            caller.end(ConsoleEnd::Closed(why)).await;
        }
        let sessions = shared.hub.len();
        shared.hub.broadcast(&drain);
        let drained = shared
            .ledger
            .changes()
            .wait_for(DRAIN_GRACE, || "sessions to drain".into(), || Ok(shared.hub.is_empty().then_some(())))
            .await;
        if drained.is_err() {
            warn!(
                sessions = shared.hub.len(),
                grace_ms = DRAIN_GRACE.as_millis() as u64,
                "devstack: sessions still open after the drain grace; their connections are cut"
            );
        }
        let _ = self.stop.send(Phase::Stopped);
        let cut = tokio::time::Instant::now() + STOP_GRACE;
        for mut task in std::mem::take(&mut self.tasks) {
            if tokio::time::timeout_at(cut, &mut task).await.is_err() {
                debug!("devstack: a server still had connections after the stop grace; aborted");
                task.abort();
                // An aborted task is dropped at the runtime's next turn, its
                // listener with it: wait for that, so that a stack started
                // next on the same ports can bind them.
                let _ = task.await;
            }
        }
        info!(
            gateway = %shared.settings.gateway_url,
            sessions,
            took_ms = started.elapsed().as_millis() as u64,
            "devstack: stopped"
        );
        Ok(())
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        // A stack dropped without shutdown() stops at once.
        let _ = self.stop.send(Phase::Stopped);
        for task in &self.tasks {
            task.abort();
        }
    }
}
