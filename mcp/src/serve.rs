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

/// Connections served at once; the next is accepted when one closes (until then the
/// kernel's backlog holds it). Keeps a flood of connections from taking every file
/// descriptor the process has, which the ledger clients and upstreams need too.
pub const CONNECTIONS_MAX: usize = 4_096;

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
    let limits = Limits {
        header_timeout: HEADER_READ_TIMEOUT,
        connections_max: CONNECTIONS_MAX,
    };
    serve_within(handler, allowed_hosts, listener, shutdown, limits).await;
}

/// What [`serve`] bounds connections by.
#[derive(Debug, Clone, Copy)]
struct Limits {
    /// See [`HEADER_READ_TIMEOUT`].
    header_timeout: Duration,
    /// See [`CONNECTIONS_MAX`].
    connections_max: usize,
}

/// [`serve`] within `limits`.
async fn serve_within<H>(
    handler: H,
    allowed_hosts: &[String],
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
    limits: Limits,
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
    let connections = Arc::new(tokio::sync::Semaphore::new(limits.connections_max));
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            permit = connections.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => return,
            },
            () = &mut shutdown => return,
        };
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
                .header_read_timeout(limits.header_timeout)
                .serve_connection(TokioIo::new(stream), service)
                .await;
            drop(permit);
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

    /// A server of nothing within `limits`, on a loopback port; its address.
    async fn serving(limits: Limits) -> SocketAddr {
        let (listener, addr) = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let serve = serve_within(Nothing, &[], listener, std::future::pending(), limits);
        tokio::spawn(serve);
        addr
    }

    /// A request asking for the connection to close after its answer.
    const REQUEST: &[u8] = b"GET /mcp HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";

    /// A client that connects and sends nothing, or half a request head, is cut off; one
    /// that sends a request is answered.
    #[tokio::test]
    async fn a_connection_that_sends_no_request_is_closed() {
        let timeout = Duration::from_millis(300);
        let addr = serving(Limits {
            header_timeout: timeout,
            connections_max: CONNECTIONS_MAX,
        })
        .await;
        for sent in [&b""[..], b"POST /mcp HTTP/1.1\r\nHost: loc"] {
            let mut idle = tokio::net::TcpStream::connect(addr).await.unwrap();
            idle.write_all(sent).await.unwrap();
            let mut buf = Vec::new();
            let read = tokio::time::timeout(timeout * 10, idle.read_to_end(&mut buf)).await;
            assert!(read.is_ok(), "still open after {:?}", timeout * 10);
        }
        let mut client = tokio::net::TcpStream::connect(addr).await.unwrap();
        client.write_all(REQUEST).await.unwrap();
        let mut answer = String::new();
        client.read_to_string(&mut answer).await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 "), "{answer}");
    }

    /// With every connection slot taken, a new connection waits unserved; when one closes,
    /// it is served.
    #[tokio::test]
    async fn connections_beyond_the_limit_wait_for_one_to_close() {
        let addr = serving(Limits {
            header_timeout: Duration::from_secs(60),
            connections_max: 1,
        })
        .await;
        let holder = tokio::net::TcpStream::connect(addr).await.unwrap();
        // Accepted and holding the one slot before the next connects.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let mut waiting = tokio::net::TcpStream::connect(addr).await.unwrap();
        waiting.write_all(REQUEST).await.unwrap();
        let mut answer = String::new();
        let early = tokio::time::timeout(
            Duration::from_millis(500),
            waiting.read_to_string(&mut answer),
        )
        .await;
        assert!(early.is_err(), "served past the limit: {answer}");
        drop(holder);
        tokio::time::timeout(Duration::from_secs(5), waiting.read_to_string(&mut answer))
            .await
            .expect("served once the slot was free")
            .unwrap();
        assert!(answer.starts_with("HTTP/1.1 "), "{answer}");
    }
}
