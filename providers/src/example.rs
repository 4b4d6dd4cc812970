//! The example providers' routes and searches: what `ledger-mcp-server` sends to its fake
//! providers, and what the simulated providers answer in the same shape, so that the
//! look-ups the simulation proves are the ones the server ships.
//!
//! | route | create | search by provider key |
//! |---|---|---|
//! | payments | `POST /pay/refunds` (`Idempotency-Key`) | `GET /pay/refunds?idempotency_key=K` → `refunds` |
//! | help desk | `POST /desk/tickets` (`external_ref`) | `GET /desk/tickets?external_ref=K` → `tickets` |
//! | messaging | `POST /msg/messages` (`client_ref`) | `GET /msg/messages?client_ref=K` → `messages` |
//! | deploys | `POST /deploy/jobs` (`job_ref`) | `GET /deploy/jobs?job_ref=K` → `jobs` (receipt without `status`) |

use crate::search::SearchSpec;

/// Where refunds are created.
pub const REFUNDS: &str = "/pay/refunds";
/// Where tickets are created.
pub const TICKETS: &str = "/desk/tickets";
/// Where messages are sent.
pub const MESSAGES: &str = "/msg/messages";
/// Where deploy jobs are started.
pub const DEPLOY_JOBS: &str = "/deploy/jobs";

/// Refunds by the idempotency key they were made with (the provider keeps it as
/// metadata and searches it for as long as it keeps the refund).
pub fn refunds() -> SearchSpec {
    SearchSpec::new("/pay/refunds?idempotency_key={provider_key}", "refunds")
}

/// Tickets by the external reference the dispatch attached.
pub fn tickets() -> SearchSpec {
    SearchSpec::new("/desk/tickets?external_ref={provider_key}", "tickets")
}

/// Messages by client reference (search lags behind sends: the policy's
/// `visibility_lag_ms`).
pub fn messages() -> SearchSpec {
    SearchSpec::new("/msg/messages?client_ref={provider_key}", "messages")
}

/// Deploy jobs by job reference; a job's receipt leaves out its changing status.
pub fn deploy_jobs() -> SearchSpec {
    SearchSpec {
        receipt_omits: vec!["status".into()],
        ..SearchSpec::new("/deploy/jobs?job_ref={provider_key}", "jobs")
    }
}
