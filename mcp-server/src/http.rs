//! Small HTTP/1.1 pieces on hyper: an accept loop, JSON bodies and responses, and a
//! JSON client that tells "never sent" apart from "sent, answer unknown".
//!
//! That distinction is the one the ledger needs: a request that could not even connect
//! provably did nothing; once bytes may have left, only the provider knows.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::{TcpListener, TcpStream};

/// Largest body read from a peer.
pub const BODY_BYTES_MAX: usize = 1 << 20;

/// A response, or the decision to close the connection without one.
pub type HandlerResult = Result<Response<Full<Bytes>>, CloseConnection>;

/// Closes the connection instead of answering (a lost answer, for fault injection).
#[derive(Debug, thiserror::Error)]
#[error("connection closed without an answer")]
pub struct CloseConnection;

/// A request handler.
pub type Handler = Arc<
    dyn Fn(Request<Incoming>) -> Pin<Box<dyn Future<Output = HandlerResult> + Send>> + Send + Sync,
>;

/// Serves `handler` on every connection `listener` accepts, until the task is dropped.
pub async fn serve(listener: TcpListener, handler: Handler) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let handler = handler.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| handler(req));
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// A JSON response.
pub fn json_response(status: u16, value: &Value) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(value.to_string())));
    *response.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response
}

/// An error response with `{"error": message}`.
pub fn error_response(status: u16, message: &str) -> Response<Full<Bytes>> {
    json_response(status, &serde_json::json!({ "error": message }))
}

/// The body of `request`, at most [`BODY_BYTES_MAX`] bytes.
pub async fn read_body<B>(body: B) -> Result<Bytes, String>
where
    B: hyper::body::Body,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    Limited::new(body, BODY_BYTES_MAX)
        .collect()
        .await
        .map(|c| c.to_bytes())
        .map_err(|e| e.to_string())
}

pub use ledger_providers::{JsonAnswer, SendError};

/// Sends one JSON request to `addr` (`host:port`) and reads the answer, within
/// `timeout_ms` for the whole exchange.
pub async fn send_json(
    addr: &str,
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&Value>,
    timeout_ms: u64,
) -> Result<JsonAnswer, SendError> {
    let timeout = Duration::from_millis(timeout_ms);
    let stream = match tokio::time::timeout(timeout, TcpStream::connect(addr)).await {
        Ok(Ok(stream)) => stream,
        Ok(Err(e)) => return Err(SendError::NotSent(format!("connect {addr}: {e}"))),
        Err(_) => return Err(SendError::NotSent(format!("connect {addr}: timed out"))),
    };
    let mut builder = Request::builder()
        .method(method)
        .uri(path)
        .header(http::header::HOST, addr)
        .header(http::header::CONTENT_TYPE, "application/json");
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    let payload = body.map(Value::to_string).unwrap_or_default();
    let request = builder
        .body(Full::new(Bytes::from(payload)))
        .map_err(|e| SendError::NotSent(format!("bad request: {e}")))?;
    let exchange = async {
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| SendError::NotSent(format!("handshake: {e}")))?;
        tokio::spawn(connection);
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| SendError::AfterSend(e.to_string()))?;
        let status = response.status().as_u16();
        let bytes = read_body(response.into_body())
            .await
            .map_err(SendError::AfterSend)?;
        let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Ok(JsonAnswer { status, body })
    };
    tokio::time::timeout(timeout, exchange)
        .await
        .unwrap_or_else(|_| {
            Err(SendError::AfterSend(format!(
                "no answer in {timeout_ms} ms"
            )))
        })
}

/// A handler from an async function.
pub fn handler<F, Fut>(f: F) -> Handler
where
    F: Fn(Request<Incoming>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = HandlerResult> + Send + 'static,
{
    Arc::new(move |req| Box::pin(f(req)))
}
