//! The client library stateless tool servers use to reach the effect ledger.
//!
//! - [`effect`]: [`EffectRunner`] runs one effect end to end: claim, dispatch through a
//!   closure that gets the attempt's provider key, classify, report, heartbeats, waiting
//!   for another attempt, reconciliation, and a typed [`EffectOutcome`].
//! - [`keys`]: effect keys derived in code (explicit, or workflow, step, tool and the
//!   target the policy names), never by a model; the intent is bound, not part of it.
//! - [`reconcile`]: the [`ProviderAdapter`] trait that observes a provider, and the
//!   fenced observation rounds that settle an unknown outcome or escalate.
//! - [`policy_file`]: the operator's tool policies from TOML, applied to the ledger.
//! - [`LedgerClient`] ([`ledger`]): declare, claim, heartbeat, report, reconcile,
//!   observe, decide, get, list and watch, tenant configuration, in core types, against
//!   any node of the cluster.
//! - [`batch`]: claims and reports made at the same time travel together, in `Batch`
//!   calls, each item served as its own call.
//! - [`transport`]: endpoints, TLS ([`TlsOptions`]), following the leader, and retries
//!   that re-send the same command id, so a lost answer never turns into a second grant.
//! - [`admin`]: node status, finding the leader, forming and changing the cluster.
//! - [`error`]: [`ClientError`], with the ledger's typed refusals.

pub mod admin;
pub mod batch;
pub mod effect;
pub mod error;
pub mod keys;
pub mod ledger;
pub mod policy_file;
pub mod reconcile;
pub mod transport;

pub use admin::Backup;
pub use effect::{
    AttemptInfo, DispatchResult, EffectCall, EffectOutcome, EffectRunner, RunError, RunOptions,
};
pub use error::ClientError;
pub use keys::{effect_key, target_of, KeySource};
pub use ledger::{AmendOutcome, LedgerClient, WatchEvent, Watching, ANSWER_BYTES_MAX};
pub use ledger_proto::WatchFilter;
pub use policy_file::PolicyFile;
pub use reconcile::{Observation, ProviderAdapter, ReconcileOptions, Reconciled};
pub use transport::{OverloadPolicy, RetryPolicy, TlsOptions};
