//! The effect ledger's core: a pure, deterministic state machine for external effects.
//!
//! An agent's mutating tool call (a refund, a message, a ticket) becomes an *effect* with a
//! durable identity and a write-ahead record that moves `not_started` → `in_progress` →
//! `committed` | `failed_before_effect` | `unknown_after_dispatch`. Whether an attempt may
//! dispatch, whether an ambiguous outcome must be reconciled first, and whether the same
//! key now carries a different intent are all decided here, by
//! [`Ledger::apply_stamped`]`(command, stamp) -> outcome`.
//!
//! The crate does no I/O, reads no clock, draws no random number and spawns no thread
//! (`clippy.toml` holds that line). The Raft state machine, the gRPC services, the client
//! and the simulator drive it; they supply time and persistence.
//!
//! Map of the modules:
//! - [`key`]: scoped effect keys, declared slots, provider-key derivation, field checks.
//! - [`intent`]: canonical JSON (RFC 8785) and intent hashes; differing fields.
//! - [`policy`]: replay classes and operator-configured tool policies.
//! - [`record`]: the effect record, attempts, observations, escalation; its invariants.
//! - [`command`] and [`outcome`]: the replicated input and what it answers.
//! - [`stamp`]: the times a leader stamps on each command: ledger time for leases and
//!   retention, bounds on real time for provider horizons.
//! - [`store`]: the ordered byte tables the state lives in, in memory or on disk;
//!   [`keycode`]: their order-preserving key encodings.
//! - [`ledger`]: the state, `apply`, command-id deduplication, queries.
//! - `claim`, `attempt`, `reconcile`, `amend`, `sweep`: the transitions, one family per
//!   file.
//! - [`tombstone`]: what is kept of a collected record, and the answer for its key.
//! - [`usage`]: per-tenant record and byte counters, judged against the tenant's quotas.
//! - `query`: read-only queries (pages of records, tombstones, usage, what is due).
//! - [`snapshot`]: deterministic, versioned encoding of the whole state.
//! - [`limits`]: every size limit, documented.

mod amend;
mod attempt;
mod claim;
pub mod command;
mod index;
pub mod intent;
pub mod key;
pub mod keycode;
pub mod ledger;
pub mod limits;
pub mod outcome;
pub mod policy;
mod query;
mod reconcile;
pub mod record;
pub mod snapshot;
pub mod stamp;
pub mod store;
mod sweep;
pub mod tenants;
pub mod tombstone;
mod transition;
pub mod usage;

pub use command::{Caller, Command, CommandBody, Declaration, Report};
pub use intent::{canonicalize, CanonicalIntent, IntentHash};
pub use key::EffectKey;
pub use ledger::{Escalations, Ledger, ListPage, ListQuery};
pub use outcome::{
    ClaimOutcome, Grant, IntentConflict, Outcome, Quota, ReconcileOutcome, Refusal, Unsettled,
};
pub use policy::{ReplayClass, TenantSettings, ToolName, ToolPolicy, ToolRef};
pub use reconcile::PAST_HORIZON_NOTE;
pub use record::{
    Amendment, Attempt, AttemptKind, AttemptOutcome, Authority, Decision, EffectRecord,
    EffectState, Escalation, EscalationReason, Observation, ObservationResult, OperatorDecision,
    Slot,
};
pub use stamp::Stamp;
pub use store::{MemStore, Store, Table};
pub use tenants::TenantConfig;
pub use tombstone::{ExpiredEffect, ReceiptDigest, Tombstone};
pub use usage::TenantUsage;
