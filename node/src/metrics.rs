//! What a node measures, through the `metrics` facade: where a command's time goes on its
//! way through the leader (the proposer's queue, the Raft round that appends, replicates,
//! commits and applies its entry, the AppendEntries round trips to each follower), and
//! the calls the node serves by command and result. The storage layer adds the log
//! writes, syncs and applies (`ledger_raft_store::metrics`). Nothing is recorded unless
//! the binary installs a recorder: `ledger-node` serves them for Prometheus at
//! `metrics_listen_addr`.

use std::time::{Duration, Instant};

use metrics::Unit;

use ledger_core::{ClaimOutcome, Outcome, ReconcileOutcome, Refusal};

use crate::error::NodeError;

/// Measures how long a stage took, for the histograms here only: a duration on this
/// node's monotonic clock, never a time the ledger acts on (those come from
/// `clock::Clock` and the bound on ledger time).
#[derive(Debug, Clone, Copy)]
pub struct Stopwatch(Instant);

impl Stopwatch {
    /// Starts now.
    #[allow(clippy::disallowed_methods)]
    pub fn start() -> Stopwatch {
        Stopwatch(Instant::now())
    }

    /// The time since [`Stopwatch::start`].
    pub fn elapsed(&self) -> Duration {
        self.0.elapsed()
    }

    /// The time from `earlier` to this one's start.
    pub fn since(&self, earlier: Stopwatch) -> Duration {
        self.0.saturating_duration_since(earlier.0)
    }
}

/// When (Unix time, s) the node's TLS certificate in force (or an intermediate in its
/// file) expires; set at start and at every reload, absent without TLS. The CA's own
/// dates are not in it: rustls keeps a trust anchor's key and name, not its validity.
/// For a certificate that does not verify against the client CA, its own `notAfter`.
pub const TLS_VALID_UNTIL_SECONDS: &str = "ledger_tls_certificate_valid_until_seconds";

/// Seconds a command waits in the leader's proposer queue until its batch is proposed.
pub const QUEUE_SECONDS: &str = "ledger_proposer_queue_seconds";
/// Seconds from proposing a batch to its outcomes: the Raft append, replication to a
/// quorum, commit and apply of its entry. Batches that fail (leadership lost) are not
/// counted.
pub const RAFT_WRITE_SECONDS: &str = "ledger_raft_write_seconds";
/// Commands in one proposed batch (one Raft entry).
pub const BATCH_COMMANDS: &str = "ledger_batch_commands";
/// Commands in one group a follower forwarded to the leader (one call).
pub const FORWARD_COMMANDS: &str = "ledger_forward_commands";
/// Seconds of one AppendEntries carrying entries, a call or a request on a replication
/// stream, from its sending to the follower's answer (it has written and synced them), by
/// follower.
pub const REPLICATE_SECONDS: &str = "ledger_replicate_seconds";
/// Seconds a follower takes to serve one AppendEntries carrying entries, from the decoded
/// request to its answer (the entries written and synced): the follower's share of the
/// leader's [`REPLICATE_SECONDS`]; the rest is the network and the gRPC at both ends.
pub const APPEND_SERVED_SECONDS: &str = "ledger_append_served_seconds";
/// Seconds to serve one ledger command on this node (routing to the leader, the
/// command's Raft round, the answer), by command and result. Calls refused before they
/// are a command (unauthenticated, malformed) are answered at once and not counted.
pub const CALL_SECONDS: &str = "ledger_call_seconds";

/// Served commands by command and outcome: for a claim, what it answered (`proceed`,
/// `replay`, `in_flight`, ...); for a reconciliation, likewise; for a report or an
/// observation, the state it left (`committed`, `unknown_after_dispatch`, ...); for a
/// refusal, `refused` (its kind is in [`REFUSALS_TOTAL`]).
pub const OUTCOMES_TOTAL: &str = "ledger_outcomes_total";
/// Refused commands by command and kind of refusal (`conflict`, `stale_token`, ...).
pub const REFUSALS_TOTAL: &str = "ledger_refusals_total";
/// Open attempts the leader's sweeper closed because their lease ran out.
pub const SWEEPER_EXPIRED_TOTAL: &str = "ledger_sweeper_expired_total";
/// Records and tombstones the leader's sweeper collected after their retention.
pub const SWEEPER_COLLECTED_TOTAL: &str = "ledger_sweeper_collected_total";

/// The `outcome` label of an applied command.
pub fn outcome_label(outcome: &Outcome) -> &'static str {
    match outcome {
        Outcome::Configured => "configured",
        Outcome::Declared { .. } => "declared",
        Outcome::Claim(claim) => match claim {
            ClaimOutcome::Proceed(_) => "proceed",
            ClaimOutcome::Replay { .. } => "replay",
            ClaimOutcome::InFlight { .. } => "in_flight",
            ClaimOutcome::Reconcile(_) => "reconcile",
            ClaimOutcome::Conflict(_) => "conflict",
            ClaimOutcome::Escalated { .. } => "escalated",
            ClaimOutcome::HorizonPassed(_) => "horizon_passed",
            ClaimOutcome::Expired(_) => "expired",
        },
        Outcome::LeaseExtended { .. } => "lease_extended",
        Outcome::Reported { state, .. } => state.as_str(),
        Outcome::Reconcile(reconcile) => match reconcile {
            ReconcileOutcome::Observe(_) => "observe",
            ReconcileOutcome::Replay { .. } => "replay",
            ReconcileOutcome::InFlight { .. } => "in_flight",
            ReconcileOutcome::Escalated { .. } => "escalated",
            ReconcileOutcome::NotNeeded { .. } => "not_needed",
            ReconcileOutcome::Expired(_) => "expired",
        },
        Outcome::Observed {
            escalated: true, ..
        } => "escalated",
        Outcome::Observed { state, .. } => state.as_str(),
        Outcome::Decided { .. } => "decided",
        Outcome::Swept { .. } => "swept",
        Outcome::Refused(_) => "refused",
        Outcome::Amended { .. } => "amended",
    }
}

/// The `kind` label of a refusal.
pub fn refusal_label(refusal: &Refusal) -> &'static str {
    match refusal {
        Refusal::InvalidField(_) => "invalid_field",
        Refusal::InvalidIntent(_) => "invalid_intent",
        Refusal::UnknownTenant(_) => "unknown_tenant",
        Refusal::WrongTenant { .. } => "wrong_tenant",
        Refusal::NotPermitted { .. } => "not_permitted",
        Refusal::UnknownTool(_) => "unknown_tool",
        Refusal::ReadOnlyTool(_) => "read_only_tool",
        Refusal::InvalidPolicy(_) => "invalid_policy",
        Refusal::UnknownEffect(_) => "unknown_effect",
        Refusal::Conflict(_) => "conflict",
        Refusal::StaleToken { .. } => "stale_token",
        Refusal::LeaseExpired { .. } => "lease_expired",
        Refusal::WrongAttemptKind(_) => "wrong_attempt_kind",
        Refusal::AlreadyFinal { .. } => "already_final",
        Refusal::ProofRequired => "proof_required",
        Refusal::ConfirmationRequired => "confirmation_required",
        Refusal::NotEscalated => "not_escalated",
        Refusal::EscalationChanged { .. } => "escalation_changed",
        Refusal::CommandIdReused(_) => "command_id_reused",
        Refusal::AmendNotAllowed { .. } => "amend_not_allowed",
        Refusal::TooManyAmendments { .. } => "too_many_amendments",
        Refusal::Expired(_) => "expired",
        Refusal::QuotaExceeded { .. } => "quota_exceeded",
        Refusal::DeclarationTooLarge { .. } => "declaration_too_large",
    }
}

/// Counts an applied command's outcome (and its refusal's kind).
pub fn count_outcome(command: &'static str, outcome: &Outcome) {
    metrics::counter!(OUTCOMES_TOTAL, "command" => command, "outcome" => outcome_label(outcome))
        .increment(1);
    if let Outcome::Refused(refusal) = outcome {
        metrics::counter!(REFUSALS_TOTAL, "command" => command, "kind" => refusal_label(refusal))
            .increment(1);
    }
}

/// The `result` label of a served call: `applied`, `refused`, or what failed.
pub fn result_label(result: &Result<Outcome, NodeError>) -> &'static str {
    match result {
        Ok(Outcome::Refused(_)) => "refused",
        Ok(_) => "applied",
        Err(NodeError::Unavailable(_)) => "unavailable",
        Err(NodeError::NotLeader(_)) => "not_leader",
        Err(NodeError::Timeout(_)) => "timeout",
        Err(NodeError::Overloaded { .. }) => "overloaded",
        Err(NodeError::BadRequest(_)) => "bad_request",
        Err(NodeError::Unauthenticated(_)) => "unauthenticated",
        Err(NodeError::PermissionDenied(_)) => "permission_denied",
        Err(NodeError::NotFound(_)) => "not_found",
        Err(NodeError::Internal(_)) => "internal",
    }
}

/// Every metric of the node with its unit and help text.
const DESCRIPTIONS: [(&str, Unit, &str); 7] = [
    (
        QUEUE_SECONDS,
        Unit::Seconds,
        "time a command waits in the leader's proposer queue for its batch",
    ),
    (
        RAFT_WRITE_SECONDS,
        Unit::Seconds,
        "time from proposing a batch to its outcomes: append, replication, commit, apply",
    ),
    (
        BATCH_COMMANDS,
        Unit::Count,
        "commands in one proposed batch (one Raft entry)",
    ),
    (
        FORWARD_COMMANDS,
        Unit::Count,
        "commands in one group a follower forwarded to the leader (one call)",
    ),
    (
        REPLICATE_SECONDS,
        Unit::Seconds,
        "one AppendEntries carrying entries, sent until the follower has them synced",
    ),
    (
        APPEND_SERVED_SECONDS,
        Unit::Seconds,
        "one AppendEntries carrying entries served by this follower, decoded to answered",
    ),
    (
        CALL_SECONDS,
        Unit::Seconds,
        "one ledger call served by this node, by command and result",
    ),
];

/// Every counter of the node with its help text.
const COUNTERS: [(&str, &str); 4] = [
    (
        OUTCOMES_TOTAL,
        "ledger commands applied, by command and outcome",
    ),
    (
        REFUSALS_TOTAL,
        "ledger commands refused, by command and kind of refusal",
    ),
    (
        SWEEPER_EXPIRED_TOTAL,
        "open attempts closed by the sweeper because their lease ran out",
    ),
    (
        SWEEPER_COLLECTED_TOTAL,
        "records and tombstones collected by the sweeper after their retention",
    ),
];

/// Describes the node's and its storage's histograms and counters to the installed
/// recorder (the gauges describe themselves: [`crate::gauges::describe`]).
pub fn describe() {
    let storage = ledger_raft_store::metrics::DESCRIPTIONS;
    for (name, unit, help) in DESCRIPTIONS.into_iter().chain(storage) {
        metrics::describe_histogram!(name, unit, help);
    }
    for (name, help) in COUNTERS {
        metrics::describe_counter!(name, Unit::Count, help);
    }
    metrics::describe_gauge!(
        TLS_VALID_UNTIL_SECONDS,
        Unit::Seconds,
        "Unix time at which this node's TLS certificate (or an intermediate in its file) expires"
    );
}
