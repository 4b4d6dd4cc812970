//! Serving an MCP handler over Streamable HTTP the way both front ends do: no sessions in
//! either protocol era (a 2025-11-25 client's `initialize` is answered without an
//! `Mcp-Session-Id`, so its later requests, like a 2026-07-28 client's, stand alone and any
//! instance can take them), JSON answers, a bounded request body, and the `Host` values
//! accepted (DNS-rebinding protection). Also what their binaries share: the Prometheus
//! endpoint and the shutdown signals.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::ServerHandler;
use tokio::net::TcpListener;

/// Largest HTTP request body read (tool arguments have their own, smaller limit).
pub const REQUEST_BODY_BYTES_MAX: usize = 256 * 1024;

/// Binds `addr`; returns the listener and the address it got (port 0 picks one).
pub async fn bind(addr: SocketAddr) -> std::io::Result<(TcpListener, SocketAddr)> {
    let listener = TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    Ok((listener, bound))
}

/// Serves `handler` (cloned for each request) on `listener` until `shutdown` resolves.
/// `allowed_hosts` empty keeps rmcp's default, the loopback names.
pub async fn serve<H>(
    handler: H,
    allowed_hosts: &[String],
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
) where
    H: ServerHandler + Clone + Send + Sync + 'static,
{
    let mut http = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true);
    if !allowed_hosts.is_empty() {
        http = http.with_allowed_hosts(allowed_hosts.to_vec());
    }
    http.max_request_body_bytes = REQUEST_BODY_BYTES_MAX;
    let service = StreamableHttpService::new(
        move || Ok(handler.clone()),
        Arc::new(NeverSessionManager::default()),
        http,
    );
    tokio::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    continue;
                }
            },
            () = &mut shutdown => return,
        };
        let service = TowerToHyperService::new(service.clone());
        tokio::spawn(async move {
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// Serves the process's counters for Prometheus at `addr` (`GET /metrics`), described.
pub fn serve_metrics(addr: SocketAddr) -> Result<(), String> {
    metrics_exporter_prometheus::PrometheusBuilder::new()
        .with_http_listener(addr)
        .install()
        .map_err(|e| format!("metrics endpoint on {addr}: {e}"))?;
    crate::metrics::describe();
    tracing::info!("metrics served at http://{addr}/metrics");
    Ok(())
}

/// Resolves on SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    let mut terminate =
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(signal) => signal,
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
                return;
            }
        };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate.recv() => {}
    }
}
