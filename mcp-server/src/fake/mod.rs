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
//! | `GET /admin/effects` | everything every provider holds |
//! | `POST /admin/faults` | `{"path": "/pay/refunds", "action": "hold" or "drop", "hold_ms": 1500, "times": 1}` |
//! | `GET /admin/held` | `{"held": n}`: requests committed and held right now |
//!
//! A fault applies after the provider committed: `hold` waits before answering (time to
//! crash something in between), `drop` closes the connection without an answer (the
//! answer is lost, the effect is not).

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
