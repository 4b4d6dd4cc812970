//! Fake providers with real state, over HTTP, with fault injection for tests and demos.
//!
//! | method and path | what |
//! |---|---|
//! | `POST /pay/refunds` (`Idempotency-Key` header) | refund; same key within its lifetime replays |
//! | `GET /pay/refunds?idempotency_key=K` | refunds made with key `K` (metadata search) |
//! | `GET /pay/orders/{id}` | an order with what was refunded on it |
//! | `POST /desk/tickets` | a new ticket, every time |
//! | `GET /desk/tickets?external_ref=R` | tickets carrying reference `R` |
//! | `POST /msg/messages` | a new message, every time |
//! | `GET /msg/messages?client_ref=R` | messages carrying `R`, once search shows them |
//! | `POST /deploy/jobs` | a new deploy job, every time |
//! | `GET /deploy/jobs/{id}`, `GET /deploy/jobs?job_ref=R` | jobs as they stand now |
//! | `GET /admin/effects` | everything every provider holds, visible to search or not |
//! | `POST /admin/faults` | set a route's faults, or arm an answer fault (below) |
//! | `GET /admin/faults` | every route's faults |
//! | `DELETE /admin/faults` | clear every fault |
//! | `GET /admin/held` | `{"held": n, "pending": m}`: requests applied whose answer is held, and requests held before they are applied |
//!
//! Faults ([`faults`] has the details):
//!
//! - per route (`refund`, `ticket`, `message`, `deploy`), until set again:
//!   `{"route": "ticket", "commit_delay_ms": 8000, "fail_after_commit": false,
//!   "visibility_lag_ms": 0}`. `commit_delay_ms` holds each creating request before it
//!   is applied, and applies it after the hold even if the client has given up (the
//!   answer goes out after); `fail_after_commit` answers an applied request 503;
//!   `visibility_lag_ms` keeps effects committed from now on out of the route's look-ups
//!   and searches for that long after their commit.
//! - on the answers of the next `times` applied requests to a path:
//!   `{"path": "/pay/refunds", "action": "hold" or "drop", "hold_ms": 1500, "times": 1}`.
//!   `hold` waits before answering (time to crash something in between), `drop` closes
//!   the connection without an answer (the answer is lost, the effect is not).

pub mod faults;
mod routes;
pub mod state;

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;

pub use routes::{counts, Providers};
pub use state::Settings;

/// Binds `addr` and serves the providers on it; returns the bound address and the task.
pub async fn start(
    addr: SocketAddr,
    settings: Settings,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let providers = Arc::new(Providers::new(settings));
    let handler = crate::http::handler(move |req| {
        let providers = providers.clone();
        async move { providers.handle(req).await }
    });
    Ok((bound, tokio::spawn(crate::http::serve(listener, handler))))
}
