//! The external world the agents act on: five simulated providers with the contracts real
//! ones have, each keeping its external state as the ground truth of what happened.
//!
//! | provider | contract | observation |
//! |---|---|---|
//! | `refund` | strong: honours an idempotency key within its horizon; a key reused with other parameters is refused (409), as Stripe does | refunds listed by the metadata reference, at any time |
//! | `wire` | strong but naive: honours a key within its horizon and replays the first result whatever the parameters | by key, only within the horizon |
//! | `ticket` | weak: creates a ticket per request, no key; stores an external reference | by external reference, [`SEARCH_LAG_MS`] behind writes |
//! | `append` | weak: appends a line per request; the line carries a reference | by scanning the lines, [`SEARCH_LAG_MS`] behind writes |
//! | `message` | weak: sends a message per request, no key, no reference | none |
//!
//! Every mutation records the intended effect it belongs to (`intent_id`: what a person
//! reading the provider's state would recognise, such as the message text), never the key
//! a strategy sent, so the checkers and the benchmark count effects per intent whatever
//! the keys. Requests are processed on a provider machine of their own: a caller that
//! crashes or gives up does not stop a request already sent. A request can meet a fault
//! ([`SendFault`]): the provider crashes before applying it, applies it late (within its
//! declared processing bound), loses the answer, or applies it and answers 503.
//!
//! The ledger's tool servers reach the providers through the shipped edge
//! (`ledger-providers`: classification and searches), whose far side is [`edge`]; the
//! baselines send [`ProviderRequest`]s directly.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crate::cluster::ClientNode;

mod check;
pub mod edge;
mod policy;
mod provider;

pub use check::check_world;
pub use policy::world_policy;
pub use provider::{Lookup, ProviderReply, ProviderRequest, SendFault};

/// How long a keyed provider honours an idempotency key (and, for `wire`, can look it
/// up) after it first saw it.
pub const HORIZON_MS: u64 = 30_000;
/// The longest a provider may take to apply a request it received (its documented
/// worst case); a look-up sooner than this after a send may miss a request still queued.
pub const PROCESSING_MS_MAX: u64 = 15_000;
/// How long the help desk's and the append log's searches lag behind their writes.
pub const SEARCH_LAG_MS: u64 = 2_000;
/// How long a tool server waits for a provider's answer before calling it unknown.
pub const PROVIDER_TIMEOUT_MS: u64 = 16_000;

/// One of the five providers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ProviderKind {
    /// Strong, parameter-checking keys; observable by reference.
    Refund,
    /// Strong, naive keys; observable by key within the horizon; irreversible.
    Wire,
    /// Weak create with an external reference.
    Ticket,
    /// Weak append of a line carrying a reference.
    Append,
    /// Weak send, unobservable; irreversible.
    Message,
}

impl ProviderKind {
    /// Every provider.
    pub const ALL: [ProviderKind; 5] = [
        ProviderKind::Refund,
        ProviderKind::Wire,
        ProviderKind::Ticket,
        ProviderKind::Append,
        ProviderKind::Message,
    ];

    /// Its short name.
    pub fn name(self) -> &'static str {
        match self {
            ProviderKind::Refund => "refund",
            ProviderKind::Wire => "wire",
            ProviderKind::Ticket => "ticket",
            ProviderKind::Append => "append",
            ProviderKind::Message => "message",
        }
    }

    /// Whether it honours an idempotency key (within [`HORIZON_MS`]).
    pub fn honours_key(self) -> bool {
        matches!(self, ProviderKind::Refund | ProviderKind::Wire)
    }

    /// How long after applying an effect its search starts to show it (the weak
    /// providers' searches are eventually consistent; their policies declare it).
    pub fn visibility_lag_ms(self) -> u64 {
        match self {
            ProviderKind::Ticket | ProviderKind::Append => SEARCH_LAG_MS,
            _ => 0,
        }
    }
}

/// One mutation the provider applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mutation {
    /// The intended effect it belongs to.
    pub intent_id: String,
    /// The request's parameters (canonical JSON).
    pub params: String,
    /// The reference stored with it, if any.
    pub reference: Option<String>,
    /// The idempotency key it came with, if any.
    pub key: Option<String>,
    /// The receipt the provider gave for it.
    pub receipt: String,
    /// Simulated time it was applied.
    pub at: Duration,
    /// Wall-clock time (ms) from which the provider's search shows it.
    pub visible_from_ms: u64,
}

/// A key a keyed provider has seen.
#[derive(Debug, Clone)]
struct KeyEntry {
    params: String,
    first_seen_ms: u64,
    /// The receipt once applied; `None` while the first request is being processed.
    receipt: Option<String>,
}

/// A request a provider received and is processing.
#[derive(Debug, Clone)]
struct Pending {
    /// Ledger (wall-clock) time by which the provider promises to have applied it.
    due_ms: u64,
    request: ProviderRequest,
}

#[derive(Debug, Default)]
struct State {
    mutations: BTreeMap<ProviderKind, Vec<Mutation>>,
    keys: BTreeMap<(ProviderKind, String), KeyEntry>,
    requests: u64,
    in_flight: u64,
    /// Requests being processed, by arrival number.
    pending: BTreeMap<u64, Pending>,
    /// Receipts of pending requests a look-up applied when they fell due.
    applied_early: BTreeMap<u64, String>,
    arrivals: u64,
}

/// The providers of one run, shared by every tool server and checker.
#[derive(Clone)]
pub struct World {
    state: Arc<Mutex<State>>,
    machine: ClientNode,
}

impl World {
    /// Providers that process requests on `machine`, which no fault ever kills.
    pub fn new(machine: ClientNode) -> World {
        World {
            state: Arc::default(),
            machine,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().expect("world lock")
    }

    /// Every mutation of `intent_id`, in the order applied.
    pub fn mutations_of(&self, intent_id: &str) -> Vec<Mutation> {
        self.lock()
            .mutations
            .values()
            .flatten()
            .filter(|m| m.intent_id == intent_id)
            .cloned()
            .collect()
    }

    /// Every mutation, by provider.
    pub fn mutations(&self) -> BTreeMap<ProviderKind, Vec<Mutation>> {
        self.lock().mutations.clone()
    }

    /// How many requests reached a provider (deduplicated and refused ones included).
    pub fn requests(&self) -> u64 {
        self.lock().requests
    }

    /// Waits until no request is being processed and none arrived for `quiet`, so that the
    /// ground truth is final (a request sent by a caller that gave up may still apply).
    pub async fn quiesce(&self, quiet: Duration) {
        let mut seen = (u64::MAX, tokio::time::Instant::now());
        loop {
            let (requests, in_flight) = {
                let state = self.lock();
                (state.requests, state.in_flight)
            };
            if in_flight > 0 || requests != seen.0 {
                seen = (requests, tokio::time::Instant::now());
            } else if seen.1.elapsed() >= quiet {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}
