//! A tool server's edge to its providers, as one piece of code that the shipped tool
//! server and the simulation both run.
//!
//! - [`transport`]: a request to a provider and its JSON answer, and the
//!   [`ProviderTransport`] that carries it: over HTTP in `ledger-mcp-server`, to the
//!   simulated providers in the simulation.
//! - [`client`]: [`ProviderClient`] sends creating requests and reads, and [`classify`]
//!   says what an exchange proves: committed, not committed, or unknown.
//! - [`search`]: [`Search`], the reconciliation look-up of an effect by its provider key
//!   (a path template, the list the answer holds, what a receipt leaves out), and
//!   [`Unobservable`] for providers that offer no look-up.
//! - [`example`]: the routes and searches of the example providers (payments, help desk,
//!   messaging, deploys).

pub mod client;
pub mod example;
pub mod search;
pub mod transport;

pub use client::{classify, ProviderClient};
pub use search::{
    Search, SearchSpec, Unobservable, CLOCK_MARGIN_MS_DEFAULT, HORIZON_PASSED, NO_LOOKUP,
};
pub use transport::{JsonAnswer, Method, ProviderRequest, ProviderTransport, SendError};
