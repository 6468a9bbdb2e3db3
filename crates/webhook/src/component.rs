//! The webhook server as a supervisor component.

use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;

use futures::FutureExt;
use futures::future::BoxFuture;
use poolkeeper_bus::Bus;
use poolkeeper_index::Index;
use poolkeeper_placement::PolicyCache;
use poolkeeper_supervisor::{BoxError, Component, Context};

use crate::admission::AdmissionService;
use crate::connection::Connections;
use crate::error::WebhookError;
use crate::serving::{ServedCertificate, serve, wait_for_certificate};
use crate::settings::WebhookSettings;
use crate::source::CertificateSource;

/// The component's name, also the name of its readiness check.
pub const COMPONENT_NAME: &str = "webhook";

/// The HTTPS admission webhook server.
///
/// Started after the index is synchronized (its stage follows the index
/// stage), so every request is decided over a complete index. It listens
/// from [`WebhookServer::bind`] on, serves once a certificate is loaded,
/// and reports ready then.
pub struct WebhookServer {
    settings: WebhookSettings,
    /// Reads the serving certificate's Secret (sources `secret` and `self`).
    client: Option<kube::Client>,
    /// Where `CertificateServed` goes.
    bus: Bus,
    admission: AdmissionService,
    listener: Option<(TcpListener, SocketAddr)>,
}

impl std::fmt::Debug for WebhookServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookServer")
            .field("settings", &self.settings)
            .field("local_addr", &self.local_addr())
            .finish()
    }
}

impl WebhookServer {
    /// Decides over `index` by the policy `policy` holds, publishes
    /// `AdmissionDecided` on `bus`.
    pub fn new(
        settings: WebhookSettings,
        bus: &Bus,
        index: Arc<Index>,
        policy: PolicyCache,
    ) -> Self {
        Self {
            admission: AdmissionService::new(&settings, index, policy, bus.clone()),
            settings,
            client: None,
            bus: bus.clone(),
            listener: None,
        }
    }

    /// The client the Secret of sources `secret` and `self` is watched with.
    pub fn with_client(mut self, client: kube::Client) -> Self {
        self.client = Some(client);
        self
    }

    fn certificate_source(&self) -> Result<CertificateSource, WebhookError> {
        let settings = &self.settings;
        if !settings.certificate_source.is_secret() {
            return Ok(CertificateSource::files(
                settings.cert_dir.clone(),
                settings.cert_reload_interval,
            ));
        }
        let client = self.client.clone().ok_or(WebhookError::NoClient)?;
        Ok(CertificateSource::secret(
            client,
            &settings.secret_namespace,
            &settings.secret_name,
        ))
    }

    /// Binds the listening socket now rather than when the component runs,
    /// so a taken port is reported before anything else starts (and port 0
    /// resolves to the actual port). Connections wait in the backlog until
    /// a certificate is loaded. Returns the bound address; `run` binds
    /// itself when this was not called.
    pub fn bind(&mut self) -> Result<SocketAddr, WebhookError> {
        if let Some((_, addr)) = &self.listener {
            return Ok(*addr);
        }
        let (listener, addr) = bind(self.settings.listen)?;
        self.listener = Some((listener, addr));
        Ok(addr)
    }

    /// The bound address, once [`WebhookServer::bind`] succeeded.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.listener.as_ref().map(|(_, addr)| *addr)
    }

    async fn serve(self, ctx: Context) -> Result<(), BoxError> {
        let source = self.certificate_source()?;
        let WebhookServer {
            settings,
            admission,
            listener,
            bus,
            ..
        } = self;
        let (listener, addr) = match listener {
            Some(bound) => bound,
            None => bind(settings.listen)?,
        };
        let Some(mut certificate) = wait_for_certificate(source, &ctx).await else {
            return Ok(());
        };
        let connections = Connections::new(&settings, admission);
        let mut serving = serve(
            listener,
            addr,
            &certificate,
            connections,
            settings.max_connections,
        )?;
        let announce = |served: &ServedCertificate| {
            ctx.ready_detail(served.describe());
            if let Some(event) = served.served_event() {
                bus.publish(event);
            }
        };
        ctx.mark_ready();
        announce(&certificate);
        tracing::info!(%addr, mutate = %settings.mutate_path, validate = %settings.validate_path, "webhook server listening");
        serving
            .until_cancelled(&mut certificate, &ctx, announce)
            .await?;
        serving.drain(settings.shutdown_timeout).await;
        Ok(())
    }
}

impl Component for WebhookServer {
    fn name(&self) -> &'static str {
        COMPONENT_NAME
    }

    fn run(self: Box<Self>, ctx: Context) -> BoxFuture<'static, Result<(), BoxError>> {
        (*self).serve(ctx).boxed()
    }
}

fn bind(listen: SocketAddr) -> Result<(TcpListener, SocketAddr), WebhookError> {
    let failed = |source| WebhookError::Listen {
        addr: listen,
        source,
    };
    let listener = TcpListener::bind(listen).map_err(failed)?;
    let addr = listener.local_addr().map_err(failed)?;
    Ok((listener, addr))
}
