//! Judging one run: what each agent was told, against the providers' state and the
//! ledger's records, as one [`EffectResult`] per declared effect.
//!
//! An episode's intents are grouped by ground-truth identity (a model repair joins the
//! intent it repairs, so applying both is an extra application), and a group with several
//! slots gives one result per slot. What the agent was told about a group is its best
//! answer across the group's calls; the times run from its first call (or first
//! ambiguous answer) to its last answer.

use std::collections::BTreeMap;
use std::time::Duration;

use ledger_core::{EffectRecord, EffectState};

use super::metrics::{EffectResult, Told};
use super::plan::EpisodePlan;
use crate::actors::agent::Progress;
use crate::actors::toolserver::ServerConfig;
use crate::actors::{Final, Intent, Strategy};
use ledger_providers::{HORIZON_PASSED, NO_LOOKUP};

use crate::world::{ProviderKind, World};

/// The ledger records of `intent`: used by its episode, declared with its intent (for a
/// multi-slot intent, one per slot).
pub fn intent_records<'a>(
    records: &'a [EffectRecord],
    config: &ServerConfig,
    intent: &Intent,
) -> Vec<&'a EffectRecord> {
    let keys = config.keys_used.lock().expect("keys lock").clone();
    let json = intent.params_json();
    records
        .iter()
        .filter(|r| keys.contains(&r.key.to_string()) && r.intent == json)
        .collect()
}

/// Judges what agents were told against the providers' state, once a run is over.
pub struct Judge<'a> {
    /// The seed.
    pub seed: u64,
    /// The strategy.
    pub strategy: Strategy,
    /// The providers, quiet: their state is the ground truth.
    pub world: &'a World,
    /// The ledger's records at the end (ledger strategies).
    pub records: &'a [EffectRecord],
    /// Ledger commands by effect key.
    pub counts: &'a BTreeMap<String, u64>,
    /// When the run's agents were started.
    pub started: Duration,
}

/// What the agent's calls for one declared effect came to, across its intents.
struct Calls {
    /// The answer that stands for the effect.
    deciding: Final,
    /// When the answer came.
    ended_at: Duration,
    latency_ms: Option<u64>,
    unknown_ms: Option<u64>,
}

impl Judge<'_> {
    /// One result per declared effect of an episode: its intents grouped by ground-truth
    /// identity (a repair joins the intent it repairs), one per slot.
    pub fn episode(
        &self,
        plan: &EpisodePlan,
        config: &ServerConfig,
        report: &[(Intent, Progress)],
    ) -> Vec<EffectResult> {
        let mut groups: Vec<Vec<&(Intent, Progress)>> = Vec::new();
        for entry in report {
            match groups
                .iter_mut()
                .find(|g| g[0].0.intent_id == entry.0.intent_id)
            {
                Some(group) => group.push(entry),
                None => groups.push(vec![entry]),
            }
        }
        let mut results = Vec::new();
        for group in groups {
            let first = &group[0].0;
            assert!(
                group.iter().all(|(i, _)| i.slots == first.slots),
                "{}: intents of one effect declare different slots",
                first.intent_id
            );
            let calls = self.calls(&group);
            let mut records: BTreeMap<String, &EffectRecord> = BTreeMap::new();
            for (intent, _) in &group {
                for r in intent_records(self.records, config, intent) {
                    records.insert(r.key.to_string(), r);
                }
            }
            for slot in 0..first.slots {
                let slot_records: Vec<&EffectRecord> = records
                    .values()
                    .copied()
                    .filter(|r| first.slots == 1 || r.slot.map(|s| s.index) == Some(slot))
                    .collect();
                let id = first.slot_intent_id(slot);
                results.push(self.slot(plan, first, &id, &calls, &slot_records));
            }
        }
        results
    }

    /// The answer that stands for an effect whose calls span `group`'s intents: done if
    /// any call was told done; else unknown if any was; else a failure; else a duplicate
    /// refusal (a repair's conflict says nothing about the effect it repairs).
    fn calls(&self, group: &[&(Intent, Progress)]) -> Calls {
        let rank = |end: &Final| match end {
            Final::Success { .. } => 0,
            Final::Unresolved { .. } => 1,
            Final::Failed {
                key_taken: false, ..
            } => 2,
            Final::Failed {
                key_taken: true, ..
            } => 3,
        };
        let never = Final::Unresolved {
            reason: "never finished".into(),
            escalation: None,
        };
        let ends: Vec<(&Intent, Final, Duration)> = group
            .iter()
            .map(|(intent, progress)| {
                let (end, at) = progress
                    .end
                    .clone()
                    .unwrap_or((never.clone(), self.started));
                (intent, end, at)
            })
            .collect();
        let (_, deciding, _) = ends
            .iter()
            .min_by_key(|(_, end, _)| rank(end))
            .expect("a group has an intent");
        let ended_at = ends.iter().map(|(_, _, at)| *at).max().unwrap_or_default();
        let first_call = group.iter().filter_map(|(_, p)| p.started).min();
        let unknown: Vec<u64> = group
            .iter()
            .zip(&ends)
            .filter_map(|((_, p), (_, _, at))| {
                p.first_ambiguous
                    .map(|from| at.saturating_sub(from).as_millis() as u64)
            })
            .collect();
        Calls {
            deciding: deciding.clone(),
            ended_at,
            latency_ms: first_call.map(|s| ended_at.saturating_sub(s).as_millis() as u64),
            unknown_ms: (!unknown.is_empty()).then(|| unknown.iter().sum()),
        }
    }

    fn slot(
        &self,
        plan: &EpisodePlan,
        first: &Intent,
        effect_id: &str,
        calls: &Calls,
        records: &[&EffectRecord],
    ) -> EffectResult {
        let mutations = self.world.mutations_of(effect_id);
        let (told, escalated, reason) = match &calls.deciding {
            Final::Success { .. } => (Told::Success, false, None),
            Final::Failed { reason, key_taken } => {
                let told = if *key_taken {
                    Told::Duplicate
                } else {
                    Told::Failed
                };
                (told, false, Some(reason.clone()))
            }
            Final::Unresolved { reason, escalation } => (
                Told::Unresolved,
                escalation.is_some(),
                Some(unresolved_reason(reason, records)),
            ),
        };
        // Final when the agent was told: nothing of it applied later.
        let settled = mutations.iter().all(|m| m.at <= calls.ended_at);
        let needless_escalation = escalated && settled && observable(plan.kind, records);
        EffectResult {
            seed: self.seed,
            point: plan.point,
            kind: plan.kind,
            strategy: self.strategy,
            effect_id: effect_id.to_owned(),
            new_action: first.new_action,
            applied: mutations.len() as u32,
            told,
            escalated,
            needless_escalation,
            reason,
            latency_ms: calls.latency_ms,
            unknown_ms: calls.unknown_ms,
            ledger_ops: records
                .iter()
                .map(|r| self.counts.get(&r.key.to_string()).copied().unwrap_or(0))
                .sum(),
            ledger_bytes: records.iter().map(|r| record_bytes(r)).sum(),
            ledger_state: records.first().map(|r| r.state),
        }
    }
}

/// Whether a look-up at `kind` could have told the outcome of an escalated effect: the
/// keyed `refund` and the referenced `ticket` and `append` always can; `wire` only while
/// its key is within the horizon (so only an escalation before the horizon); `message`
/// never.
fn observable(kind: ProviderKind, records: &[&EffectRecord]) -> bool {
    match kind {
        ProviderKind::Refund | ProviderKind::Ticket | ProviderKind::Append => true,
        ProviderKind::Message => false,
        ProviderKind::Wire => records.iter().any(|r| {
            r.escalation
                .as_ref()
                .is_some_and(|e| e.at_ms < r.horizon_deadline_ms.unwrap_or(u64::MAX))
        }),
    }
}

/// The bytes `record` takes in a snapshot (bincode 2, standard configuration, as
/// `ledger_core::snapshot` encodes the whole state).
fn record_bytes(record: &EffectRecord) -> u64 {
    bincode::serde::encode_to_vec(record, bincode::config::standard())
        .expect("encoding a record into memory cannot fail")
        .len() as u64
}

/// Why an effect stayed unresolved, in the table's words: what the ledger's last
/// observation said when it escalated, or the agent's own reason.
fn unresolved_reason(agent_reason: &str, records: &[&EffectRecord]) -> String {
    let escalated = records.iter().find(|r| r.is_escalated());
    let Some(record) = escalated else {
        let never_sent = records
            .iter()
            .any(|r| r.slot.is_some() && r.state == EffectState::NotStarted);
        if never_sent {
            return "not sent: the agent's calls ended before this recipient's turn".into();
        }
        let done = records
            .iter()
            .any(|r| r.slot.is_some() && r.state == EffectState::Committed);
        if done {
            return "committed, but the call's answer waits on another recipient's slot".into();
        }
        return agent_reason.to_owned();
    };
    let detail = record
        .observations
        .last()
        .map(|o| o.detail.as_str())
        .unwrap_or_default();
    let reason = record.escalation.as_ref().map(|e| e.reason);
    match detail {
        NO_LOOKUP => "no observation possible".into(),
        HORIZON_PASSED => "horizon passed on an irreversible tool".into(),
        _ if record.state == EffectState::UnknownAfterDispatch => {
            format!("escalated ({reason:?}) after: {detail}")
        }
        _ => format!("escalated ({reason:?})"),
    }
}
