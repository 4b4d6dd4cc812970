//! An HTTP proxy that loses answers on purpose: the request reaches the server, the
//! server answers, and the proxy closes the client's connection instead of passing the
//! answer on. This is the fault the ledger exists for: the effect happened, the agent
//! cannot know.
//!
//! It listens on a Unix socket (as a sidecar proxy would; rmcp's Unix-socket HTTP client
//! speaks to it without pulling a TLS stack into the build) and routes by `Host`:
//! `http://mcp-a/mcp` goes to the upstream registered as `mcp-a`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::{TcpStream, UnixListener};

use crate::http::{error_response, read_body, CloseConnection, HandlerResult};

struct Shared {
    routes: BTreeMap<String, String>,
    drops: Mutex<Vec<String>>,
    dropped: AtomicU64,
    forwarded: AtomicU64,
}

/// A running proxy; stops when dropped.
pub struct LossyProxy {
    socket: PathBuf,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl LossyProxy {
    /// Listens on `socket`, routing host `name` to `host:port` for each of `routes`.
    pub fn start(socket: &Path, routes: BTreeMap<String, String>) -> std::io::Result<Self> {
        let listener = UnixListener::bind(socket)?;
        let shared = Arc::new(Shared {
            routes,
            drops: Mutex::new(Vec::new()),
            dropped: AtomicU64::new(0),
            forwarded: AtomicU64::new(0),
        });
        let task = tokio::spawn(accept(listener, shared.clone()));
        Ok(LossyProxy {
            socket: socket.to_owned(),
            shared,
            task,
        })
    }

    /// The socket clients connect to.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Loses the answer to the next `tools/call` of `tool` (after the server answered).
    pub fn lose_next_answer(&self, tool: &str) {
        self.shared
            .drops
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(tool.to_owned());
    }

    /// Answers lost so far.
    pub fn lost(&self) -> u64 {
        self.shared.dropped.load(Ordering::SeqCst)
    }

    /// Requests passed on so far.
    pub fn forwarded(&self) -> u64 {
        self.shared.forwarded.load(Ordering::SeqCst)
    }
}

impl Drop for LossyProxy {
    fn drop(&mut self) {
        self.task.abort();
        let _ = std::fs::remove_file(&self.socket);
    }
}

async fn accept(listener: UnixListener, shared: Arc<Shared>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let shared = shared.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let shared = shared.clone();
                async move { forward(&shared, req).await }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// The tool a JSON-RPC `tools/call` body names.
fn called_tool(body: &[u8]) -> Option<String> {
    let value: Value = serde_json::from_slice(body).ok()?;
    if value["method"] != "tools/call" {
        return None;
    }
    value["params"]["name"].as_str().map(str::to_owned)
}

impl Shared {
    /// Whether to lose the answer to a call of `tool` (and forget the order if so).
    fn take_drop(&self, tool: Option<&str>) -> bool {
        let Some(tool) = tool else {
            return false;
        };
        let mut drops = self.drops.lock().unwrap_or_else(|e| e.into_inner());
        match drops.iter().position(|t| t == tool) {
            Some(i) => {
                drops.remove(i);
                true
            }
            None => false,
        }
    }
}

async fn forward(shared: &Shared, req: Request<Incoming>) -> HandlerResult {
    let host = req
        .headers()
        .get(http::header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let Some(upstream) = shared.routes.get(&host).cloned() else {
        return Ok(error_response(
            502,
            &format!("no upstream for host {host:?}"),
        ));
    };
    let (mut parts, body) = req.into_parts();
    let body = match read_body(body).await {
        Ok(body) => body,
        Err(e) => return Ok(error_response(400, &e)),
    };
    let lose = shared.take_drop(called_tool(&body).as_deref());
    parts.headers.insert(
        http::header::HOST,
        http::HeaderValue::from_str(&upstream).map_err(|_| CloseConnection)?,
    );
    let answer = match exchange(&upstream, Request::from_parts(parts, Full::new(body))).await {
        Ok(answer) => answer,
        Err(e) => return Ok(error_response(502, &e)),
    };
    shared.forwarded.fetch_add(1, Ordering::SeqCst);
    if lose {
        shared.dropped.fetch_add(1, Ordering::SeqCst);
        tracing::info!(%upstream, "answer lost on purpose");
        return Err(CloseConnection);
    }
    Ok(answer)
}

/// Sends `req` to `upstream` and reads the whole answer.
async fn exchange(
    upstream: &str,
    req: Request<Full<Bytes>>,
) -> Result<Response<Full<Bytes>>, String> {
    let stream = TcpStream::connect(upstream)
        .await
        .map_err(|e| format!("connect {upstream}: {e}"))?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(connection);
    let response = sender.send_request(req).await.map_err(|e| e.to_string())?;
    let (parts, body) = response.into_parts();
    let body = read_body(body).await?;
    Ok(Response::from_parts(parts, Full::new(body)))
}
