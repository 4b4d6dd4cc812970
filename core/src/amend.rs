//! Amend: repairing an effect's intent while nothing can have happened (DESIGN.md
//! section 2).
//!
//! The intent is bound to an effect's identity, never part of it, so a model repair that
//! changes an argument lands on the same effect as a conflict. When the repair is wanted,
//! an explicit amend replaces the intent, but only while no dispatch can have taken
//! effect: the record is `not_started`, or `failed_before_effect` with nothing unsettled,
//! and no person is deciding about it. The old intent hash stays in the record's
//! amendments. The tool, target, workflow and authority are the effect's identity and
//! context and cannot be amended; a different one is a conflict naming them.
//!
//! A declared slot is its own effect and is amended alone. A larger intent must fit the
//! tenant's byte quota, as a declaration would.
//!
//! Amending to the intent the effect already has is a no-op success in any state, so a
//! late retry of an amend that was applied (after its command id was forgotten and the
//! effect moved on) is told "done", not "refused".

use crate::claim::validate_declaration;
use crate::command::Declaration;
use crate::intent::{canonicalize, CanonicalIntent};
use crate::ledger::Ledger;
use crate::limits::AMENDMENTS_MAX;
use crate::outcome::{IntentConflict, Outcome, Refusal};
use crate::record::{Amendment, EffectRecord, EffectState};
use crate::store::Store;
use crate::transition::{effective_state, touch};

impl<S: Store> Ledger<S> {
    pub(crate) fn amend(&mut self, decl: &Declaration, now: u64) -> Outcome {
        let valid = decl
            .key
            .validate_addressable()
            .and_then(|()| validate_declaration(decl));
        if let Err(e) = valid {
            return e.into();
        }
        let Some(stored) = self.get(&decl.key) else {
            return self.missing(&decl.key).into();
        };
        let rec = &stored;
        // The record's own policy: the volatile fields it was declared under.
        let offered = match canonicalize(&decl.intent_json, &rec.policy.volatile_fields) {
            Ok(offered) => offered,
            Err(e) => return Refusal::InvalidIntent(e).into(),
        };
        if let Some(conflict) = context_conflict(rec, decl, &offered) {
            return Refusal::Conflict(conflict).into();
        }
        if offered.hash == rec.intent_hash {
            return Outcome::Amended {
                previous_hash: rec.intent_hash,
                intent_hash: rec.intent_hash,
                changed: false,
            };
        }
        if let Err(refusal) = check_amendable(rec, now) {
            return refusal.into();
        }
        if let Err(refusal) = self.check_growth(rec, &offered) {
            return refusal.into();
        }
        self.update(stored, |rec, _| {
            let previous_hash = rec.intent_hash;
            rec.amendments.push(Amendment {
                at_ms: now,
                previous_hash,
                intent_hash: offered.hash,
            });
            rec.intent = offered.json;
            rec.intent_hash = offered.hash;
            touch(rec, now);
            Outcome::Amended {
                previous_hash,
                intent_hash: offered.hash,
                changed: true,
            }
        })
    }

    /// A larger intent is stored bytes the tenant's quota must cover, as if declared:
    /// otherwise small declarations amended to large intents would bypass it.
    fn check_growth(&self, rec: &EffectRecord, offered: &CanonicalIntent) -> Result<(), Refusal> {
        let growth_bytes = offered.json.len().saturating_sub(rec.intent.len()) as u64;
        if growth_bytes == 0 {
            return Ok(());
        }
        let tenant = &rec.key.tenant;
        let Some(config) = self.tenant_config(tenant) else {
            return Err(Refusal::UnknownTenant(tenant.clone()));
        };
        crate::usage::Usage::check_quota(&self.store, tenant, &config.settings, 0, growth_bytes)
    }
}

/// Whether the amend keeps everything but the intent: tool (with contract version),
/// target, workflow and authority. Differences are named `(tool)`, `(target)`,
/// `(workflow_id)` and `(authority)`.
fn context_conflict(
    rec: &EffectRecord,
    decl: &Declaration,
    offered: &CanonicalIntent,
) -> Option<IntentConflict> {
    let differing: Vec<String> = [
        ("(tool)", rec.tool != decl.tool),
        ("(target)", rec.target != decl.target),
        ("(workflow_id)", rec.workflow_id != decl.workflow_id),
        ("(authority)", rec.authority != decl.authority),
    ]
    .into_iter()
    .filter(|(_, differs)| *differs)
    .map(|(name, _)| name.to_owned())
    .collect();
    (!differing.is_empty()).then_some(IntentConflict {
        stored_hash: rec.intent_hash,
        offered_hash: offered.hash,
        differing_fields: differing,
    })
}

/// Nothing can have happened: not started, or failed before effect with no dispatch
/// left unsettled, no attempt open and no escalation; and the record has room for one
/// more amendment.
fn check_amendable(rec: &EffectRecord, now: u64) -> Result<(), Refusal> {
    let state = effective_state(rec, now);
    let settled = matches!(
        state,
        EffectState::NotStarted | EffectState::FailedBeforeEffect
    ) && !rec.ambiguous
        && rec.open_attempt().is_none();
    if !settled || rec.is_escalated() {
        return Err(Refusal::AmendNotAllowed {
            state,
            escalated: rec.is_escalated(),
        });
    }
    if rec.amendments.len() >= AMENDMENTS_MAX {
        return Err(Refusal::TooManyAmendments {
            max: AMENDMENTS_MAX as u32,
        });
    }
    Ok(())
}
