//! The client library stateless tool servers use to reach the effect ledger.
//!
//! - [`LedgerClient`] ([`ledger`]): declare, claim, heartbeat, report, reconcile,
//!   observe, decide, get and list, in core types, against any node of the cluster.
//! - [`transport`]: endpoints, leader preference, and retries that re-send the same
//!   command id, so a lost answer never turns into a second grant.
//! - [`admin`]: node status, finding the leader, forming and changing the cluster.
//! - [`error`]: [`ClientError`], with the ledger's typed refusals.

pub mod admin;
pub mod error;
pub mod ledger;
pub mod transport;

pub use error::ClientError;
pub use ledger::LedgerClient;
pub use transport::RetryPolicy;
