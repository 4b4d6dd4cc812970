//! The providers' ground truth against what agents were told and what the ledger holds:
//! - no intended effect is applied more often than declared (once per slot, and never
//!   more than its slots in total);
//! - an agent told "done" holds receipts of mutations of its own intent: the effect
//!   really happened (nothing was deduplicated away or replayed from another effect);
//! - every committed ledger record of an agent effect carries the receipt of a mutation
//!   the provider applied with that effect's reference;
//! - through the ledger, every "done" an agent heard is held by a committed record (an
//!   acknowledged transition is never lost).

use std::collections::{BTreeMap, BTreeSet};

use ledger_core::{EffectRecord, EffectState};

use super::World;
use crate::actors::agent::Progress;
use crate::actors::{Final, Intent, AGENT_NAMESPACE};
use crate::check::Violations;

/// Checks `world` against the agents' `reports` and the ledger's `records` (the agents
/// ran `through_ledger`, or not).
pub fn check_world<'a>(
    world: &World,
    reports: &[(Intent, Progress)],
    records: impl IntoIterator<Item = &'a EffectRecord>,
    through_ledger: bool,
) -> Violations {
    let records: Vec<&EffectRecord> = records
        .into_iter()
        .filter(|r| r.key.namespace == AGENT_NAMESPACE)
        .collect();
    let committed: BTreeSet<&str> = records
        .iter()
        .filter(|r| r.state == EffectState::Committed)
        .filter_map(|r| r.receipt.as_deref())
        .collect();
    let mut violations = Violations::new();
    let mutations: Vec<_> = world.mutations().into_values().flatten().collect();
    let mut applied: BTreeMap<&str, u32> = BTreeMap::new();
    for m in &mutations {
        *applied.entry(m.intent_id.as_str()).or_default() += 1;
    }
    for (intent, progress) in reports {
        let slots: BTreeSet<String> = (0..intent.slots)
            .map(|s| intent.slot_intent_id(s))
            .collect();
        let total: u32 = slots
            .iter()
            .map(|s| applied.get(s.as_str()).copied().unwrap_or(0))
            .sum();
        for slot in &slots {
            let n = applied.get(slot.as_str()).copied().unwrap_or(0);
            if n > 1 {
                violations.push(format!("{slot} was applied {n} times; declared once"));
            }
        }
        if total > intent.slots {
            violations.push(format!(
                "{} was applied {total} times; declared {} slots",
                intent.intent_id, intent.slots
            ));
        }
        if let Some((Final::Success { receipts }, _)) = &progress.end {
            for receipt in receipts {
                let acknowledged = committed.contains(receipt.as_str());
                if through_ledger && !acknowledged {
                    violations.push(format!(
                        "{}: the agent was told done with {receipt}, which no committed \
                         record holds",
                        intent.intent_id
                    ));
                }
                let real = mutations
                    .iter()
                    .any(|m| &m.receipt == receipt && slots.contains(&m.intent_id));
                if !real {
                    violations.push(format!(
                        "{}: the agent was told done with {receipt}, which is no mutation of it",
                        intent.intent_id
                    ));
                }
            }
        }
    }
    for record in records {
        if record.state != EffectState::Committed {
            continue;
        }
        let receipt = record.receipt.as_deref().unwrap_or_default();
        let real = mutations.iter().any(|m| {
            m.receipt == receipt && m.reference.as_deref() == Some(record.provider_key.as_str())
        });
        if !real {
            violations.push(format!(
                "{} is committed with {receipt:?}, which the provider never applied for it",
                record.key
            ));
        }
    }
    violations
}
