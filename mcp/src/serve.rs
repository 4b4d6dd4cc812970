//! Serving an MCP handler over Streamable HTTP the way both front ends do: no sessions in
//! either protocol era (a 2025-11-25 client's `initialize` is answered without an
//! `Mcp-Session-Id`, so its later requests, like a 2026-07-28 client's, stand alone and any
//! instance can take them), JSON answers, a bounded request body, and the `Host` values
//! accepted (DNS-rebinding protection). Also what their binaries share: the Prometheus
//! endpoint and the shutdown signals.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::ServerHandler;
use tokio::net::TcpListener;

/// Largest HTTP request body read (tool arguments have their own, smaller limit).
pub const REQUEST_BODY_BYTES_MAX: usize = 256 * 1024;

/// How long a connection may take to send a request's head, counted from when the server
/// starts waiting for it (a new connection, or an idle one between requests); then it is
/// closed. Without it a client that connects and sends nothing holds a task and a file
/// descriptor for good.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// The pause after a failed accept (out of file descriptors, say) before the next: the
/// error would otherwise repeat at once, in a loop that only logs.
const ACCEPT_RETRY: Duration = Duration::from_millis(100);

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
    serve_with_timeout(
        handler,
        allowed_hosts,
        listener,
        shutdown,
        HEADER_READ_TIMEOUT,
    )
    .await;
}

/// [`serve`], closing connections that send no request head within `header_timeout`.
async fn serve_with_timeout<H>(
    handler: H,
    allowed_hosts: &[String],
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
    header_timeout: Duration,
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
                    tokio::time::sleep(ACCEPT_RETRY).await;
                    continue;
                }
            },
            () = &mut shutdown => return,
        };
        let service = TowerToHyperService::new(service.clone());
        tokio::spawn(async move {
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(header_timeout)
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

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    #[derive(Clone)]
    struct Nothing;

    impl ServerHandler for Nothing {}

    /// A client that connects and sends nothing, or half a request head, is cut off; one
    /// that sends a request is answered.
    #[tokio::test]
    async fn a_connection_that_sends_no_request_is_closed() {
        let (listener, addr) = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let timeout = Duration::from_millis(300);
        tokio::spawn(serve_with_timeout(
            Nothing,
            &[],
            listener,
            std::future::pending(),
            timeout,
        ));
        for sent in [&b""[..], b"POST /mcp HTTP/1.1\r\nHost: loc"] {
            let mut idle = tokio::net::TcpStream::connect(addr).await.unwrap();
            idle.write_all(sent).await.unwrap();
            let mut buf = Vec::new();
            let read = tokio::time::timeout(timeout * 10, idle.read_to_end(&mut buf)).await;
            assert!(read.is_ok(), "still open after {:?}", timeout * 10);
        }
        let mut client = tokio::net::TcpStream::connect(addr).await.unwrap();
        client
            .write_all(b"GET /mcp HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut answer = String::new();
        client.read_to_string(&mut answer).await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 "), "{answer}");
    }
}
