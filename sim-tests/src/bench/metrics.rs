//! The benchmark's metrics: what each declared effect came to, judged against the
//! providers' state, and the same summed per strategy and fault point.
//!
//! The unit is the declared effect, as the user means it: one per intent, one per
//! recipient of a message to several, and a model repair is the same effect as the
//! intent it repairs (however many calls the agent made for it). Per declared effect,
//! reported separately:
//! - extra: applied by the provider beyond once (retry-induced duplicates, or a repair
//!   applied beside the original);
//! - false deduplication: never applied, yet the agent was told it is done (a
//!   deduplicated or replayed answer) or was refused as a duplicate of another effect
//!   (a conflict, a provider's reused-key refusal) although it was a new effect;
//! - missing: never applied, and not a false deduplication (the agent knows it failed, or
//!   does not know);
//! - unresolved: the agent ends without knowing whether it happened (escalations among
//!   them, with the reason); a needless escalation is one where the provider could have
//!   told (it offers a look-up that was still trustworthy) and its state was final;
//! - then latency (first call to final answer), time unknown (first ambiguous answer to
//!   final answer), ledger commands and the ledger's stored bytes per effect.

use std::collections::BTreeMap;

use ledger_core::EffectState;

use super::plan::FaultPoint;
use crate::actors::Strategy;
use crate::world::ProviderKind;

/// What the agent was told at the end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Told {
    /// Done.
    Success,
    /// Failed, with proof or a refusal.
    Failed,
    /// Refused as a duplicate: its key already names another intent.
    Duplicate,
    /// It does not know.
    Unresolved,
}

/// One declared effect of one run.
#[derive(Debug, Clone)]
pub struct EffectResult {
    /// The seed.
    pub seed: u64,
    /// The fault point.
    pub point: FaultPoint,
    /// The provider.
    pub kind: ProviderKind,
    /// The strategy.
    pub strategy: Strategy,
    /// Its ground-truth identity (`intent_id`, or `intent_id#slot`).
    pub effect_id: String,
    /// Whether the agent meant it as a second effect in its step (an explicit transition).
    pub new_action: bool,
    /// How often the provider applied it.
    pub applied: u32,
    /// What the agent was told.
    pub told: Told,
    /// Whether the ledger escalated it to a person.
    pub escalated: bool,
    /// Escalated although the provider's state was final and a look-up could tell it.
    pub needless_escalation: bool,
    /// Why it failed or stayed unresolved.
    pub reason: Option<String>,
    /// First call to final answer (ms).
    pub latency_ms: Option<u64>,
    /// First ambiguous answer to final answer, summed over the calls' intents (ms);
    /// `None` when the agent never met an ambiguous answer.
    pub unknown_ms: Option<u64>,
    /// Ledger commands the nodes received for it.
    pub ledger_ops: u64,
    /// Bytes of its ledger records at the end, as a snapshot encodes them.
    pub ledger_bytes: u64,
    /// Its ledger record's final state (ledger strategies).
    pub ledger_state: Option<EffectState>,
}

impl EffectResult {
    /// Applications beyond the one declared.
    pub fn extra(&self) -> u32 {
        self.applied.saturating_sub(1)
    }

    /// Never applied, and the agent was told done or refused as a duplicate.
    pub fn false_dedup(&self) -> bool {
        self.applied == 0 && matches!(self.told, Told::Success | Told::Duplicate)
    }

    /// Never applied, and not a false deduplication.
    pub fn missing(&self) -> bool {
        self.applied == 0 && !self.false_dedup()
    }

    /// Whether the agent ends without knowing.
    pub fn unresolved(&self) -> bool {
        self.told == Told::Unresolved
    }
}

/// Sums over a set of results.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Summary {
    /// Declared effects.
    pub effects: u64,
    /// Extra applications in total.
    pub extra_applications: u64,
    /// Effects with at least one extra application.
    pub effects_with_extras: u64,
    /// Missing effects.
    pub missing: u64,
    /// False deduplications.
    pub false_dedup: u64,
    /// Unresolved effects.
    pub unresolved: u64,
    /// Escalated effects (a subset of the unresolved).
    pub escalated: u64,
    /// Needless escalations (a subset of the escalated).
    pub needless_escalations: u64,
    /// Unresolved effects by reason.
    pub unresolved_reasons: BTreeMap<String, u64>,
    /// Median latency (ms).
    pub latency_p50_ms: u64,
    /// 99th percentile latency (ms).
    pub latency_p99_ms: u64,
    /// Effects whose outcome was unknown to the agent for a while.
    pub unknown_effects: u64,
    /// Median time unknown, over those effects (ms).
    pub unknown_p50_ms: u64,
    /// 99th percentile time unknown, over those effects (ms).
    pub unknown_p99_ms: u64,
    /// Time unknown, summed over every effect (ms).
    pub unknown_total_ms: u64,
    /// Ledger commands per effect.
    pub ledger_ops_per_effect: f64,
    /// Ledger record bytes per effect.
    pub ledger_bytes_per_effect: f64,
}

/// Sums `results`.
pub fn summarise<'a>(results: impl IntoIterator<Item = &'a EffectResult>) -> Summary {
    let mut summary = Summary::default();
    let mut latencies = Vec::new();
    let mut unknown = Vec::new();
    let (mut ops, mut bytes) = (0, 0);
    for r in results {
        summary.effects += 1;
        summary.extra_applications += u64::from(r.extra());
        summary.effects_with_extras += u64::from(r.extra() > 0);
        summary.missing += u64::from(r.missing());
        summary.false_dedup += u64::from(r.false_dedup());
        summary.unresolved += u64::from(r.unresolved());
        summary.escalated += u64::from(r.escalated);
        summary.needless_escalations += u64::from(r.needless_escalation);
        if r.unresolved() {
            let reason = r.reason.clone().unwrap_or_default();
            *summary.unresolved_reasons.entry(reason).or_default() += 1;
        }
        latencies.extend(r.latency_ms);
        unknown.extend(r.unknown_ms);
        ops += r.ledger_ops;
        bytes += r.ledger_bytes;
    }
    latencies.sort_unstable();
    summary.latency_p50_ms = percentile(&latencies, 50);
    summary.latency_p99_ms = percentile(&latencies, 99);
    unknown.sort_unstable();
    summary.unknown_effects = unknown.len() as u64;
    summary.unknown_p50_ms = percentile(&unknown, 50);
    summary.unknown_p99_ms = percentile(&unknown, 99);
    summary.unknown_total_ms = unknown.iter().sum();
    if summary.effects > 0 {
        summary.ledger_ops_per_effect = ops as f64 / summary.effects as f64;
        summary.ledger_bytes_per_effect = bytes as f64 / summary.effects as f64;
    }
    summary
}

/// The `p`-th percentile of sorted `values` (nearest rank), 0 when empty.
fn percentile(values: &[u64], p: usize) -> u64 {
    if values.is_empty() {
        return 0;
    }
    let rank = (p * values.len()).div_ceil(100).max(1);
    values[rank - 1]
}

/// Results grouped by strategy.
pub fn by_strategy(results: &[EffectResult]) -> BTreeMap<Strategy, Summary> {
    let mut groups: BTreeMap<Strategy, Vec<&EffectResult>> = BTreeMap::new();
    for r in results {
        groups.entry(r.strategy).or_default().push(r);
    }
    groups
        .into_iter()
        .map(|(s, rs)| (s, summarise(rs)))
        .collect()
}

/// Results grouped by fault point and strategy.
pub fn by_point(results: &[EffectResult]) -> BTreeMap<(FaultPoint, Strategy), Summary> {
    let mut groups: BTreeMap<(FaultPoint, Strategy), Vec<&EffectResult>> = BTreeMap::new();
    for r in results {
        groups.entry((r.point, r.strategy)).or_default().push(r);
    }
    groups
        .into_iter()
        .map(|(k, rs)| (k, summarise(rs)))
        .collect()
}

/// Results grouped by fault point, provider and strategy.
pub fn by_point_and_provider(
    results: &[EffectResult],
) -> BTreeMap<(FaultPoint, ProviderKind, Strategy), Summary> {
    let mut groups: BTreeMap<(FaultPoint, ProviderKind, Strategy), Vec<&EffectResult>> =
        BTreeMap::new();
    for r in results {
        groups
            .entry((r.point, r.kind, r.strategy))
            .or_default()
            .push(r);
    }
    groups
        .into_iter()
        .map(|(k, rs)| (k, summarise(rs)))
        .collect()
}
