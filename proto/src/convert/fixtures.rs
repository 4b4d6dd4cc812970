//! Representative core values of every type the contract carries, with every enum
//! variant and oneof arm, for round-trip tests here and in `status`.

use ledger_core::{
    Amendment, Attempt, AttemptKind, AttemptOutcome, Authority, ClaimOutcome, Decision,
    Declaration, EffectKey, EffectRecord, EffectState, Escalation, EscalationReason, Grant,
    IntentConflict, IntentHash, Observation, ObservationResult, OperatorDecision, Outcome,
    ReconcileOutcome, ReplayClass, Slot, ToolPolicy, ToolRef, Unsettled,
};

mod refusals;

pub use refusals::refusals;

pub fn key() -> EffectKey {
    EffectKey::new("acme", "billing", "refund-42")
}

pub fn tool() -> ToolRef {
    ToolRef {
        provider: "stripe".into(),
        name: "refund".into(),
        contract_version: "2024-06".into(),
    }
}

pub fn declaration() -> Declaration {
    Declaration {
        key: key(),
        workflow_id: "wf-7".into(),
        tool: tool(),
        authority: Authority {
            principal: "user:ana".into(),
            policy_generation: 3,
        },
        target: "charge:ch_1".into(),
        intent_json: r#"{"amount":1200,"currency":"eur"}"#.into(),
    }
}

pub fn hash(seed: u8) -> IntentHash {
    IntentHash(std::array::from_fn(|i| seed.wrapping_add(i as u8)))
}

pub fn grant() -> Grant {
    Grant {
        attempt_id: 2,
        fencing_token: 17,
        granted_at_ms: 60_000,
        lease_until_ms: 90_000,
        provider_key: key().provider_key(),
        horizon_deadline_ms: Some(86_400_000),
    }
}

pub fn observation_results() -> Vec<ObservationResult> {
    vec![
        ObservationResult::Committed {
            receipt: "re_1".into(),
        },
        ObservationResult::NotCommitted,
        ObservationResult::StillUnknown,
    ]
}

pub fn observations() -> Vec<Observation> {
    observation_results()
        .into_iter()
        .enumerate()
        .map(|(i, result)| Observation {
            at_ms: 1_000 * i as u64,
            fencing_token: 20 + i as u64,
            result,
            detail: format!("lookup {i}"),
        })
        .collect()
}

pub fn unsettled(last_observation: Option<Observation>) -> Unsettled {
    Unsettled {
        provider_key: key().provider_key(),
        dispatches: 2,
        horizon_deadline_ms: None,
        last_observation,
    }
}

pub fn conflict() -> IntentConflict {
    IntentConflict {
        stored_hash: hash(1),
        offered_hash: hash(200),
        differing_fields: vec!["amount".into(), "(tool)".into()],
    }
}

pub const REASONS: [EscalationReason; 3] = [
    EscalationReason::ObservationBudgetSpent,
    EscalationReason::DispatchBudgetSpent,
    EscalationReason::HorizonPassedOnIrreversible,
];

pub const CLASSES: [ReplayClass; 5] = [
    ReplayClass::ReadOnly,
    ReplayClass::KeyedIdempotent,
    ReplayClass::UnkeyedCreate,
    ReplayClass::Irreversible,
    ReplayClass::LongRunningJob,
];

pub fn decisions() -> Vec<Decision> {
    vec![
        Decision::Committed {
            receipt: "re_9".into(),
        },
        Decision::NotCommitted,
    ]
}

/// What a collected effect's tombstone says, with or without a receipt digest.
pub fn expired_effect(committed: bool) -> ledger_core::ExpiredEffect {
    ledger_core::ExpiredEffect {
        key: key(),
        intent_hash: hash(5),
        final_state: if committed {
            EffectState::Committed
        } else {
            EffectState::NotStarted
        },
        receipt_digest: committed.then(|| ledger_core::ReceiptDigest::of("re_1")),
        collected_at_ms: 7_200_000,
    }
}

pub fn tombstone() -> ledger_core::Tombstone {
    let expired = expired_effect(true);
    ledger_core::Tombstone {
        key: expired.key,
        intent_hash: expired.intent_hash,
        final_state: expired.final_state,
        receipt_digest: expired.receipt_digest,
        collected_at_ms: expired.collected_at_ms,
        expires_at_ms: 9_000_000,
    }
}

pub fn claim_outcomes() -> Vec<ClaimOutcome> {
    let mut outcomes = vec![
        ClaimOutcome::Proceed(grant()),
        ClaimOutcome::Replay {
            receipt: "re_1".into(),
        },
        ClaimOutcome::InFlight {
            holder: "tool-server-2".into(),
            attempt_id: 1,
            lease_until_ms: 31_000,
        },
        ClaimOutcome::Reconcile(unsettled(None)),
        ClaimOutcome::Conflict(conflict()),
        ClaimOutcome::HorizonPassed(unsettled(observations().pop())),
        ClaimOutcome::Expired(expired_effect(true)),
        ClaimOutcome::Expired(expired_effect(false)),
    ];
    outcomes.extend(REASONS.map(|reason| ClaimOutcome::Escalated { reason }));
    outcomes.extend(
        observations()
            .into_iter()
            .map(|o| ClaimOutcome::Reconcile(unsettled(Some(o)))),
    );
    outcomes
}

pub fn reconcile_outcomes() -> Vec<ReconcileOutcome> {
    let mut outcomes = vec![
        ReconcileOutcome::Observe(Grant {
            horizon_deadline_ms: None,
            ..grant()
        }),
        ReconcileOutcome::Replay {
            receipt: "re_1".into(),
        },
        ReconcileOutcome::InFlight {
            holder: "reconciler-1".into(),
            attempt_id: 4,
            lease_until_ms: 5,
        },
        ReconcileOutcome::Expired(expired_effect(true)),
    ];
    outcomes.extend(REASONS.map(|reason| ReconcileOutcome::Escalated { reason }));
    outcomes.extend(
        EffectState::ALL
            .into_iter()
            .map(|state| ReconcileOutcome::NotNeeded { state }),
    );
    outcomes
}

/// Every outcome that some RPC returns (all but `Swept` and `Refused`).
pub fn outcomes() -> Vec<Outcome> {
    let mut outcomes = vec![
        Outcome::Configured,
        Outcome::Declared {
            keys: (0..3).map(|i| key().slot_key(i)).collect(),
            created: true,
        },
        Outcome::Declared {
            keys: vec![key()],
            created: false,
        },
        Outcome::LeaseExtended {
            lease_until_ms: 120_000,
        },
        Outcome::Reported {
            state: EffectState::Committed,
            receipt: Some("re_1".into()),
        },
        Outcome::Reported {
            state: EffectState::UnknownAfterDispatch,
            receipt: None,
        },
    ];
    outcomes.extend(claim_outcomes().into_iter().map(Outcome::Claim));
    outcomes.extend(reconcile_outcomes().into_iter().map(Outcome::Reconcile));
    outcomes.push(Outcome::Amended {
        previous_hash: hash(1),
        intent_hash: hash(2),
        changed: true,
    });
    outcomes.push(Outcome::Amended {
        previous_hash: hash(4),
        intent_hash: hash(4),
        changed: false,
    });
    for state in EffectState::ALL {
        outcomes.push(Outcome::Observed {
            state,
            escalated: state == EffectState::UnknownAfterDispatch,
        });
        outcomes.push(Outcome::Decided { state });
    }
    outcomes
}

fn attempt_outcomes() -> Vec<Option<AttemptOutcome>> {
    vec![
        Some(AttemptOutcome::Unknown {
            reason: "timeout".into(),
        }),
        Some(AttemptOutcome::LeaseExpired),
        Some(AttemptOutcome::FailedBeforeEffect {
            proof: "400 invalid_request".into(),
        }),
        Some(AttemptOutcome::Observed),
        Some(AttemptOutcome::Superseded),
        Some(AttemptOutcome::Committed),
        None,
    ]
}

pub fn attempts() -> Vec<Attempt> {
    attempt_outcomes()
        .into_iter()
        .enumerate()
        .map(|(i, outcome)| Attempt {
            attempt_id: i as u32 + 1,
            kind: if outcome == Some(AttemptOutcome::Observed) {
                AttemptKind::Reconcile
            } else {
                AttemptKind::Dispatch
            },
            fencing_token: 10 + i as u64,
            holder: format!("holder-{i}"),
            granted_at_ms: 1_000 * i as u64,
            lease_until_ms: 1_000 * i as u64 + 30_000,
            outcome,
        })
        .collect()
}

/// A policy with every field away from its default.
pub fn tool_policy() -> ToolPolicy {
    ToolPolicy {
        volatile_fields: vec!["/request_id".into(), "/meta/trace".into()],
        target_fields: vec!["/order_id".into()],
        processing_ms_max: Some(15_000),
        visibility_lag_ms: 2_500,
        retry_window_ms: 3_600_000,
        ..ToolPolicy::for_class(ReplayClass::KeyedIdempotent)
    }
}

pub fn amendments() -> Vec<Amendment> {
    vec![
        Amendment {
            at_ms: 6,
            previous_hash: hash(3),
            intent_hash: hash(5),
        },
        Amendment {
            at_ms: 7,
            previous_hash: hash(5),
            intent_hash: hash(7),
        },
    ]
}

/// A record with every optional part set: slot, attempts of every outcome (and one
/// open), observations of every result, an escalation and an operator decision.
pub fn full_record() -> EffectRecord {
    EffectRecord {
        key: key().slot_key(1),
        workflow_id: "wf-7".into(),
        tool: tool(),
        authority: declaration().authority,
        target: "charge:ch_1".into(),
        intent: r#"{"amount":1200,"currency":"eur"}"#.into(),
        intent_hash: hash(7),
        slot: Some(Slot { index: 1, count: 3 }),
        policy: tool_policy(),
        state: EffectState::InProgress,
        declared_at_ms: 5,
        updated_at_ms: 9_000,
        attempts: attempts(),
        provider_key: key().slot_key(1).provider_key(),
        receipt: Some("re_1".into()),
        horizon_deadline_ms: Some(86_400_005),
        retention_deadline_ms: Some(604_800_005),
        ambiguous: true,
        dispatches_in_budget: 6,
        observations_in_budget: 2,
        observations: observations(),
        escalation: Some(Escalation {
            at_ms: 8_000,
            reason: EscalationReason::DispatchBudgetSpent,
        }),
        decision: Some(OperatorDecision {
            at_ms: 8_500,
            operator: "ops:bo".into(),
            decision: Decision::NotCommitted,
            note: "checked the dashboard".into(),
            settled: Escalation {
                at_ms: 7_000,
                reason: EscalationReason::ObservationBudgetSpent,
            },
        }),
        amendments: amendments(),
    }
}

/// A freshly declared record: every optional part absent.
pub fn bare_record() -> EffectRecord {
    EffectRecord {
        key: key(),
        slot: None,
        state: EffectState::NotStarted,
        attempts: vec![],
        receipt: None,
        horizon_deadline_ms: None,
        retention_deadline_ms: None,
        ambiguous: false,
        observations: vec![],
        escalation: None,
        decision: None,
        amendments: vec![],
        policy: ToolPolicy::for_class(ReplayClass::Irreversible),
        ..full_record()
    }
}
