//! Declare and claim: creating the write-ahead record and deciding whether an attempt may
//! dispatch (DESIGN.md sections 4 and 5).
//!
//! A claim is answered from the record's effective state at `now`: an open attempt whose
//! lease has run out counts as an unknown outcome even before the sweeper has turned it
//! into one, so a restarted node never mistakes it for "not started". Answers that grant
//! nothing change nothing; only a grant or an escalation writes the record.
//!
//! Leases are judged by ledger time, the provider horizon by the stamp's bounds on real
//! time ([`crate::stamp`]): a dispatch starts the horizon at the earliest real time it may
//! be, and a keyed re-send is granted only while a whole lease and the provider's
//! processing bound fit before the horizon at the latest real time it may be.
//!
//! A key whose record was collected keeps a tombstone for a while: declaring or claiming
//! it then is answered "expired" and creates nothing. A declaration must fit
//! [`DECLARATION_BYTES_MAX`] and the tenant's quotas, or it creates nothing either.

use crate::command::Declaration;
use crate::intent::{canonicalize, differing_fields, CanonicalIntent};
use crate::key::{validate_detail, validate_name, EffectKey, FieldError};
use crate::ledger::Ledger;
use crate::limits::{DECLARATION_BYTES_MAX, SLOTS_MAX};
use crate::outcome::{ClaimOutcome, IntentConflict, Outcome, Refusal};
use crate::policy::{ReplayClass, ToolPolicy, ToolRef};
use crate::record::{AttemptKind, EffectRecord, EffectState, EscalationReason, Slot};
use crate::stamp::Stamp;
use crate::store::Store;
use crate::transition::{close_if_expired, effective_state, escalate, grant, touch, unsettled};

impl<S: Store> Ledger<S> {
    pub(crate) fn declare(&mut self, decl: &Declaration, slots: u32, now: u64) -> Outcome {
        match self.new_records(decl, slots, now) {
            Ok((keys, new)) => {
                let created = !new.is_empty();
                for rec in new {
                    self.insert_record(rec);
                }
                Outcome::Declared { keys, created }
            }
            Err(refusal) => refusal.into(),
        }
    }

    /// What declaring `decl` with `slots` would create, not stored yet: every key it
    /// covers and the records among them that do not exist; or why it is refused.
    fn new_records(
        &self,
        decl: &Declaration,
        slots: u32,
        now: u64,
    ) -> Result<(Vec<EffectKey>, Vec<EffectRecord>), Refusal> {
        decl.key
            .validate()
            .and_then(|()| validate_declaration(decl))?;
        if slots == 0 || slots > SLOTS_MAX {
            return Err(FieldError::OutOfRange {
                field: "slots".into(),
                detail: format!("{slots} is not in 1..={SLOTS_MAX}"),
            }
            .into());
        }
        let policy = self.policy_for(&decl.key.tenant, &decl.tool)?;
        let intent = canonicalize(&decl.intent_json, &policy.volatile_fields)
            .map_err(Refusal::InvalidIntent)?;
        check_declaration_bytes(slots, &intent)?;
        let keys: Vec<EffectKey> = if slots == 1 {
            vec![decl.key.clone()]
        } else {
            (0..slots).map(|i| decl.key.slot_key(i)).collect()
        };
        // A plain key and a slot group of the same base are one declaration shape or the
        // other, never both.
        let other_shape = if slots == 1 {
            decl.key.slot_key(0)
        } else {
            decl.key.clone()
        };
        // A collected effect stays collected while its tombstone is kept, in either shape.
        if let Some(tombstone) = keys
            .iter()
            .chain([&other_shape])
            .find_map(|k| self.tombstone(k))
        {
            return Err(Refusal::Expired(Box::new(tombstone.expired())));
        }
        if let Some(ref existing) = self.get(&other_shape) {
            return Err(Refusal::Conflict(shape_conflict(existing, &intent)));
        }
        for key in &keys {
            if let Some(ref existing) = self.get(key) {
                let offered =
                    match canonicalize(&decl.intent_json, &existing.policy.volatile_fields) {
                        Ok(offered) => offered,
                        Err(e) => return Err(Refusal::InvalidIntent(e)),
                    };
                let slot_count = existing.slot.map_or(1, |s| s.count);
                if let Some(c) = conflict(existing, &decl.tool, &offered, slot_count != slots) {
                    return Err(Refusal::Conflict(c));
                }
            }
        }
        let new: Vec<EffectRecord> = (0..slots)
            .zip(&keys)
            .filter(|(_, key)| self.get(key).is_none())
            .map(|(index, key)| {
                let slot = (slots > 1).then_some(Slot {
                    index,
                    count: slots,
                });
                new_record(key.clone(), decl, &intent, slot, &policy, now)
            })
            .collect();
        self.check_quota(&decl.key.tenant, &new)?;
        Ok((keys, new))
    }

    pub(crate) fn claim(
        &mut self,
        decl: &Declaration,
        holder: &str,
        lease_ms: Option<u64>,
        confirmation: Option<&str>,
        at: Stamp,
    ) -> Outcome {
        let now = at.ledger_ms;
        let valid = decl
            .key
            .validate_addressable()
            .and_then(|()| validate_declaration(decl))
            .and_then(|()| validate_name("holder", holder))
            .and_then(|()| confirmation.map_or(Ok(()), |c| validate_detail("confirmation", c)));
        if let Err(e) = valid {
            return e.into();
        }
        // A blank confirmation confirms nothing.
        let confirmation = confirmation.filter(|c| !c.trim().is_empty());
        let (rec, stored) = match self.get(&decl.key) {
            Some(rec) => (rec, true),
            None => {
                if let Some(tombstone) = self.tombstone(&decl.key) {
                    return ClaimOutcome::Expired(tombstone.expired()).into();
                }
                if decl.key.slot().is_some() {
                    return Refusal::UnknownEffect(decl.key.clone()).into();
                }
                // Check what a grant needs before declaring, so a refused claim creates
                // nothing.
                match self.policy_for(&decl.key.tenant, &decl.tool) {
                    Ok(policy) if policy.confirmation_required && confirmation.is_none() => {
                        return Refusal::ConfirmationRequired.into();
                    }
                    Ok(_) => {}
                    Err(refusal) => return refusal.into(),
                }
                match self.new_records(decl, 1, now) {
                    Ok((_, mut new)) => (new.pop().expect("an absent key is declared"), false),
                    // The slot group once declared under this key was collected.
                    Err(Refusal::Expired(expired)) => {
                        return ClaimOutcome::Expired(*expired).into();
                    }
                    Err(refusal) => return refusal.into(),
                }
            }
        };
        // A record declared by this claim was declared with this very intent.
        if stored {
            let offered = match canonicalize(&decl.intent_json, &rec.policy.volatile_fields) {
                Ok(offered) => offered,
                Err(e) => return Refusal::InvalidIntent(e).into(),
            };
            if let Some(c) = conflict(&rec, &decl.tool, &offered, false) {
                return Outcome::Claim(ClaimOutcome::Conflict(c));
            }
        }
        let answer = match answer_claim(&rec, at) {
            Answer::Final(outcome) => {
                self.keep_declared(rec, stored);
                return Outcome::Claim(outcome);
            }
            Answer::Dispatch => {
                if rec.policy.confirmation_required && confirmation.is_none() {
                    self.keep_declared(rec, stored);
                    return Refusal::ConfirmationRequired.into();
                }
                if rec.dispatches_in_budget >= rec.policy.dispatch_attempts_max {
                    Answer::Escalate(EscalationReason::DispatchBudgetSpent)
                } else {
                    Answer::Dispatch
                }
            }
            other => other,
        };
        self.write_record(rec, stored, |rec, next_token| {
            close_if_expired(rec, at);
            // Closing an expired reconciliation counts as an observation and may itself
            // have spent the budget.
            if let Some(e) = &rec.escalation {
                return ClaimOutcome::Escalated { reason: e.reason };
            }
            match answer {
                Answer::Escalate(reason) => {
                    escalate(rec, reason, now);
                    ClaimOutcome::Escalated { reason }
                }
                _ => ClaimOutcome::Proceed(grant(
                    rec,
                    next_token,
                    AttemptKind::Dispatch,
                    holder,
                    lease_ms,
                    at,
                )),
            }
        })
        .into()
    }

    /// Stores a record this claim declared but grants nothing on, as a declaration would.
    fn keep_declared(&mut self, rec: EffectRecord, stored: bool) {
        if !stored {
            self.insert_record(rec);
        }
    }
}

impl From<ClaimOutcome> for Outcome {
    fn from(c: ClaimOutcome) -> Self {
        Outcome::Claim(c)
    }
}

/// What a claim on an existing record comes to.
enum Answer {
    /// An answer that changes nothing.
    Final(ClaimOutcome),
    /// A new dispatch attempt, subject to confirmation and budget.
    Dispatch,
    /// Stop and wait for a person.
    Escalate(EscalationReason),
}

fn answer_claim(rec: &EffectRecord, at: Stamp) -> Answer {
    let now = at.ledger_ms;
    if let Some(receipt) = &rec.receipt {
        return Answer::Final(ClaimOutcome::Replay {
            receipt: receipt.clone(),
        });
    }
    if let Some(e) = &rec.escalation {
        return Answer::Final(ClaimOutcome::Escalated { reason: e.reason });
    }
    if let Some(open) = rec.open_attempt().filter(|a| a.is_live(now)) {
        return Answer::Final(ClaimOutcome::InFlight {
            holder: open.holder.clone(),
            attempt_id: open.attempt_id,
            lease_until_ms: open.lease_until_ms,
        });
    }
    match effective_state(rec, now) {
        EffectState::NotStarted | EffectState::FailedBeforeEffect => Answer::Dispatch,
        EffectState::UnknownAfterDispatch => match (rec.policy.class, rec.resend_deadline_ms()) {
            // A re-send must be able to run a whole lease and still reach the provider
            // inside its horizon, however late real time may be; later, only observation
            // settles it.
            (ReplayClass::KeyedIdempotent, Some(deadline_ms))
                if at.real_ms_max.saturating_add(rec.policy.lease_ms) <= deadline_ms =>
            {
                Answer::Dispatch
            }
            (ReplayClass::KeyedIdempotent, Some(_)) => {
                Answer::Final(ClaimOutcome::HorizonPassed(unsettled(rec)))
            }
            (ReplayClass::KeyedIdempotent, None) if !rec.within_horizon(at.real_ms_max) => {
                Answer::Final(ClaimOutcome::HorizonPassed(unsettled(rec)))
            }
            // Not keyed, or keyed with no declared processing bound: nothing says a
            // re-send would reach the provider while it still deduplicates the key.
            _ => Answer::Final(ClaimOutcome::Reconcile(unsettled(rec))),
        },
        state @ (EffectState::InProgress | EffectState::Committed) => {
            unreachable!("{state} with no live attempt and no receipt")
        }
    }
}

fn new_record(
    key: EffectKey,
    decl: &Declaration,
    intent: &CanonicalIntent,
    slot: Option<Slot>,
    policy: &ToolPolicy,
    now: u64,
) -> EffectRecord {
    let provider_key = key.provider_key();
    let mut rec = EffectRecord {
        key,
        workflow_id: decl.workflow_id.clone(),
        tool: decl.tool.clone(),
        authority: decl.authority.clone(),
        target: decl.target.clone(),
        intent: intent.json.clone(),
        intent_hash: intent.hash,
        slot,
        policy: policy.clone(),
        state: EffectState::NotStarted,
        declared_at_ms: now,
        updated_at_ms: now,
        attempts: Vec::new(),
        provider_key,
        receipt: None,
        horizon_deadline_ms: None,
        retention_deadline_ms: None,
        ambiguous: false,
        dispatches_in_budget: 0,
        observations_in_budget: 0,
        observations: Vec::new(),
        escalation: None,
        decision: None,
        amendments: Vec::new(),
    };
    touch(&mut rec, now);
    rec
}

/// Refuses a declaration whose slots would together store more than
/// [`DECLARATION_BYTES_MAX`] of intent.
fn check_declaration_bytes(slots: u32, intent: &CanonicalIntent) -> Result<(), Refusal> {
    let intent_bytes = intent.json.len() as u64;
    if u64::from(slots).saturating_mul(intent_bytes) > DECLARATION_BYTES_MAX {
        return Err(Refusal::DeclarationTooLarge {
            slots,
            intent_bytes,
            bytes_max: DECLARATION_BYTES_MAX,
        });
    }
    Ok(())
}

/// Checks the names of a declaration (the key and intent are checked by their users).
pub(crate) fn validate_declaration(decl: &Declaration) -> Result<(), FieldError> {
    validate_name("workflow_id", &decl.workflow_id)?;
    decl.tool.validate()?;
    validate_name("authority.principal", &decl.authority.principal)?;
    validate_name("target", &decl.target)
}

/// The conflict between a record and an offered intent, if they differ. `shape_differs`
/// marks a different declared multiplicity.
fn conflict(
    rec: &EffectRecord,
    tool: &ToolRef,
    offered: &CanonicalIntent,
    shape_differs: bool,
) -> Option<IntentConflict> {
    let mut differing = differing_fields(&rec.intent, &offered.json);
    if rec.tool != *tool {
        differing.insert(0, "(tool)".into());
    }
    if shape_differs {
        differing.insert(0, "(slots)".into());
    }
    (!differing.is_empty() || rec.intent_hash != offered.hash).then_some(IntentConflict {
        stored_hash: rec.intent_hash,
        offered_hash: offered.hash,
        differing_fields: differing,
    })
}

fn shape_conflict(existing: &EffectRecord, offered: &CanonicalIntent) -> IntentConflict {
    IntentConflict {
        stored_hash: existing.intent_hash,
        offered_hash: offered.hash,
        differing_fields: vec!["(slots)".into()],
    }
}
