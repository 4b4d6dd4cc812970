//! Property tests over random command sequences.
//!
//! After every step: at most one open attempt per effect and every record invariant;
//! committed never changes; a stale token never fails an effect, extends a lease or wins
//! a grant; fencing tokens only grow; the same key with a different intent is always a
//! conflict; `failed_before_effect` only when every ambiguous dispatch was settled;
//! re-applying a command id returns the first outcome and changes nothing. Separately:
//! snapshot, restore and continue gives the same outcomes as continuing directly.
//!
//! `PROPTEST_CASES` overrides the number of cases (default 2000 per property).

mod common;

use std::collections::BTreeMap;

use common::*;
use ledger_core::*;
use proptest::prelude::*;

/// Intents: the first two are the same effect (key order, number spelling and a volatile
/// field differ); the third is a different one.
const INTENTS: [&str; 3] = [
    r#"{"amount":1,"to":"alice"}"#,
    r#"{"to":"alice","amount":1.0,"request_id":"retry-7"}"#,
    r#"{"amount":2,"to":"alice"}"#,
];
const TOOLS: [(&str, &str); 4] = [REFUND, TICKET, MESSAGE, DEPLOY];
const KEYS: usize = 4;
const HOLDERS: [&str; 2] = ["server-a", "server-b"];

#[derive(Debug, Clone)]
enum Op {
    Advance(u64),
    Declare {
        key: usize,
        intent: usize,
        slots: u32,
    },
    Claim {
        key: usize,
        slot: Option<u32>,
        intent: usize,
        holder: usize,
        confirmed: bool,
    },
    Heartbeat {
        key: usize,
        token: usize,
    },
    Report {
        key: usize,
        token: usize,
        kind: u8,
    },
    BeginReconcile {
        key: usize,
    },
    Observe {
        key: usize,
        token: usize,
        kind: u8,
    },
    Decide {
        key: usize,
        committed: bool,
    },
    Expire,
    Collect,
    /// Re-apply the n-th earlier command (modulo the number so far).
    Retry(usize),
}

fn op() -> impl Strategy<Value = Op> {
    let key = 0..KEYS;
    prop_oneof![
        3 => prop_oneof![
            4 => prop_oneof![Just(0u64), Just(1), Just(LEASE_MS / 2), Just(LEASE_MS)],
            1 => Just(HORIZON_MS),
            1 => Just(RETENTION_MS),
        ]
        .prop_map(Op::Advance),
        1 => (key.clone(), 0..3usize, prop_oneof![4 => Just(1u32), 1 => Just(2)]).prop_map(|(key, intent, slots)| Op::Declare { key, intent, slots }),
        5 => (key.clone(), prop::option::weighted(0.1, 0..2u32), 0..3usize, 0..2usize, prop::bool::weighted(0.9))
            .prop_map(|(key, slot, intent, holder, confirmed)| Op::Claim { key, slot, intent, holder, confirmed }),
        1 => (key.clone(), 0..8usize).prop_map(|(key, token)| Op::Heartbeat { key, token }),
        4 => (key.clone(), 0..8usize, 0..3u8).prop_map(|(key, token, kind)| Op::Report { key, token, kind }),
        3 => key.clone().prop_map(|key| Op::BeginReconcile { key }),
        4 => (key.clone(), 0..8usize, 0..3u8).prop_map(|(key, token, kind)| Op::Observe { key, token, kind }),
        1 => (key, any::<bool>()).prop_map(|(key, committed)| Op::Decide { key, committed }),
        2 => Just(Op::Expire),
        1 => Just(Op::Collect),
        2 => any::<usize>().prop_map(Op::Retry),
    ]
}

/// The test's side of the run: commands applied so far and the tokens each key has seen.
struct Run {
    h: Harness,
    sent: Vec<(Command, Outcome)>,
    tokens: BTreeMap<EffectKey, Vec<u64>>,
}

fn effect_key(key: usize, slot: Option<u32>) -> EffectKey {
    let base = EffectKey::new(TENANT, "prop", format!("k{key}"));
    slot.map_or(base.clone(), |s| base.slot_key(s))
}

impl Run {
    fn new() -> Self {
        let mut h = Harness::new();
        // Remember command ids for the whole run so every retry can be checked.
        h.operator(CommandBody::PutTenant {
            tenant: TENANT.into(),
            settings: TenantSettings {
                command_retention_ms: u64::MAX / 4,
            },
        });
        Run {
            h,
            sent: Vec::new(),
            tokens: BTreeMap::new(),
        }
    }

    fn declaration(&self, key: usize, slot: Option<u32>, intent: usize) -> Declaration {
        let mut d = decl(TOOLS[key % TOOLS.len()], "x", INTENTS[intent]);
        d.key = effect_key(key, slot);
        d
    }

    /// A token for `key`, mostly its newest; sometimes an older one or one it never had.
    fn token(&self, key: &EffectKey, choice: usize) -> u64 {
        let known = self.tokens.get(key).map(Vec::as_slice).unwrap_or(&[]);
        let pick = match choice {
            0..=4 => known.last(),
            5 => known.len().checked_sub(2).and_then(|i| known.get(i)),
            6 => known.first(),
            _ => None,
        };
        pick.copied().unwrap_or(1_000_000 + choice as u64)
    }

    fn command(&mut self, op: &Op) -> Option<Command> {
        let tenant = Caller::Tenant(TENANT.into());
        let (caller, body) = match op.clone() {
            Op::Advance(ms) => {
                self.h.advance(ms);
                return None;
            }
            Op::Retry(n) => {
                return (!self.sent.is_empty()).then(|| self.sent[n % self.sent.len()].0.clone());
            }
            Op::Declare { key, intent, slots } => (
                tenant,
                CommandBody::Declare {
                    declaration: self.declaration(key, None, intent),
                    slots,
                },
            ),
            Op::Claim {
                key,
                slot,
                intent,
                holder,
                confirmed,
            } => (
                tenant,
                CommandBody::Claim {
                    declaration: self.declaration(key, slot, intent),
                    holder: HOLDERS[holder].into(),
                    lease_ms: None,
                    confirmation: confirmed.then(|| "yes".into()),
                },
            ),
            Op::Heartbeat { key, token } => {
                let k = effect_key(key, None);
                let fencing_token = self.token(&k, token);
                (
                    tenant,
                    CommandBody::Heartbeat {
                        key: k,
                        fencing_token,
                        lease_ms: None,
                    },
                )
            }
            Op::Report { key, token, kind } => {
                let k = effect_key(key, None);
                let fencing_token = self.token(&k, token);
                let report = match kind {
                    0 => Report::Committed {
                        receipt: format!("receipt-{fencing_token}"),
                    },
                    1 => Report::FailedBeforeEffect {
                        proof: "HTTP 400".into(),
                    },
                    _ => Report::Unknown {
                        reason: "timeout".into(),
                    },
                };
                (
                    tenant,
                    CommandBody::Report {
                        key: k,
                        fencing_token,
                        report,
                    },
                )
            }
            Op::BeginReconcile { key } => (
                tenant,
                CommandBody::BeginReconcile {
                    key: effect_key(key, None),
                    holder: "reconciler".into(),
                    lease_ms: None,
                },
            ),
            Op::Observe { key, token, kind } => {
                let k = effect_key(key, None);
                let fencing_token = self.token(&k, token);
                let result = match kind {
                    0 => ObservationResult::Committed {
                        receipt: format!("observed-{fencing_token}"),
                    },
                    1 => ObservationResult::NotCommitted,
                    _ => ObservationResult::StillUnknown,
                };
                (
                    tenant,
                    CommandBody::Observe {
                        key: k,
                        fencing_token,
                        result,
                        detail: String::new(),
                    },
                )
            }
            Op::Decide { key, committed } => {
                let decision = if committed {
                    Decision::Committed {
                        receipt: "by hand".into(),
                    }
                } else {
                    Decision::NotCommitted
                };
                let body = CommandBody::Decide {
                    key: effect_key(key, None),
                    decision,
                    operator: "ops".into(),
                    note: String::new(),
                };
                (Caller::Operator, body)
            }
            Op::Expire => (Caller::Operator, CommandBody::ExpireLeases { limit: 100 }),
            Op::Collect => (Caller::Operator, CommandBody::CollectGarbage { limit: 100 }),
        };
        Some(Command {
            command_id: self.h.next_id(),
            caller,
            body,
        })
    }

    /// Applies one op and checks every per-step property.
    fn step(&mut self, op: &Op) -> Result<Option<Outcome>, TestCaseError> {
        let Some(command) = self.command(op) else {
            return Ok(None);
        };
        let before = self.h.ledger.clone();
        // Sweeps are not remembered: re-applying one sweeps again.
        let first = self
            .sent
            .iter()
            .find(|(c, _)| c.command_id == command.command_id && c.body.is_recorded())
            .map(|(_, o)| o.clone());
        let out = self.h.apply(&command);
        if let Some(first) = first {
            prop_assert_eq!(&out, &first, "a retried command id answered differently");
            prop_assert!(
                before.to_snapshot() == self.h.ledger.to_snapshot(),
                "a retried command id changed state"
            );
            return Ok(Some(out));
        }
        self.check_step(&before, &command, &out)?;
        self.sent.push((command, out.clone()));
        Ok(Some(out))
    }

    fn check_step(
        &mut self,
        before: &Ledger,
        command: &Command,
        out: &Outcome,
    ) -> Result<(), TestCaseError> {
        let after = &self.h.ledger;
        // Refusals change no record.
        if matches!(out, Outcome::Refused(_)) {
            for (key, rec) in records(before) {
                prop_assert_eq!(Some(&rec), after.get(&key), "a refusal changed {}", key);
            }
            prop_assert_eq!(before.len(), after.len());
        }
        // Same key, different intent: always a conflict.
        if let CommandBody::Claim { declaration: d, .. }
        | CommandBody::Declare { declaration: d, .. } = &command.body
        {
            if let Some(stored) = before.get(&d.key) {
                let offered = canonicalize(&d.intent_json, &stored.policy.volatile_fields).unwrap();
                if offered.hash != stored.intent_hash {
                    let conflict = matches!(
                        out,
                        Outcome::Claim(ClaimOutcome::Conflict(_))
                            | Outcome::Refused(Refusal::Conflict(_))
                    );
                    prop_assert!(
                        conflict,
                        "different intent for {} answered {:?}",
                        d.key,
                        out
                    );
                }
            }
        }
        // A stale token never fails an effect or extends a lease.
        let token_of = |body: &CommandBody| match body {
            CommandBody::Report {
                key,
                fencing_token,
                report,
            } if !matches!(report, Report::Committed { .. }) => Some((key.clone(), *fencing_token)),
            CommandBody::Heartbeat {
                key, fencing_token, ..
            } => Some((key.clone(), *fencing_token)),
            CommandBody::Observe {
                key,
                fencing_token,
                result,
                ..
            } if !matches!(result, ObservationResult::Committed { .. }) => {
                Some((key.clone(), *fencing_token))
            }
            _ => None,
        };
        if let Some((key, token)) = token_of(&command.body) {
            let latest = before.get(&key).and_then(|r| r.latest_token());
            if latest != Some(token) {
                prop_assert!(
                    matches!(out, Outcome::Refused(_)),
                    "stale token {} for {} answered {:?}",
                    token,
                    key,
                    out
                );
            }
        }
        // Grants carry a token newer than any issued before.
        let granted = match out {
            Outcome::Claim(ClaimOutcome::Proceed(g))
            | Outcome::Reconcile(ReconcileOutcome::Observe(g)) => Some(g),
            _ => None,
        };
        if let Some(g) = granted {
            let newest = self.tokens.values().flatten().max().copied().unwrap_or(0);
            prop_assert!(
                g.fencing_token > newest,
                "token {} not newer than {}",
                g.fencing_token,
                newest
            );
            let key = command.body.effect_key().unwrap().clone();
            self.tokens.entry(key).or_default().push(g.fencing_token);
        }
        for (key, rec) in records(after) {
            prop_assert_eq!(rec.check_invariants(), Ok(()));
            // Committed never changes while the record exists.
            if let Some(old) = before
                .get(&key)
                .filter(|r| r.state == EffectState::Committed)
            {
                prop_assert_eq!(rec.state, EffectState::Committed, "{} left committed", key);
                prop_assert_eq!(&rec.receipt, &old.receipt, "{} changed its receipt", key);
            }
            if rec.state == EffectState::FailedBeforeEffect {
                prop_assert!(
                    every_ambiguous_dispatch_settled(&rec),
                    "{} failed with an unsettled dispatch: {:?}",
                    key,
                    rec
                );
            }
        }
        Ok(())
    }
}

fn records(ledger: &Ledger) -> Vec<(EffectKey, EffectRecord)> {
    let query = ListQuery {
        tenant: TENANT.into(),
        state: None,
        workflow_id: None,
        updated_at_or_before_ms: None,
        after: None,
        limit: usize::MAX,
    };
    ledger
        .list(&query)
        .into_iter()
        .map(|r| (r.key.clone(), r.clone()))
        .collect()
}

/// An oracle independent of the record's `ambiguous` flag: every dispatch that ended
/// unknown or expired is followed by a not-committed observation or decision.
fn every_ambiguous_dispatch_settled(rec: &EffectRecord) -> bool {
    rec.attempts
        .iter()
        .filter(|a| a.kind == AttemptKind::Dispatch)
        .filter(|a| {
            matches!(
                a.outcome,
                Some(AttemptOutcome::Unknown { .. } | AttemptOutcome::LeaseExpired)
            )
        })
        .all(|a| {
            let observed = rec.observations.iter().any(|o| {
                o.fencing_token > a.fencing_token && o.result == ObservationResult::NotCommitted
            });
            let decided = rec.decision.as_ref().is_some_and(|d| {
                d.decision == Decision::NotCommitted && d.at_ms >= a.granted_at_ms
            });
            observed || decided
        })
}

#[allow(clippy::disallowed_methods)] // tests may read the environment; the core may not
fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(2000);
    ProptestConfig {
        cases,
        max_shrink_iters: 10_000,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn every_step_keeps_the_ledger_safe(ops in prop::collection::vec(op(), 1..100)) {
        let mut run = Run::new();
        for op in &ops {
            run.step(op)?;
        }
    }

    #[test]
    fn snapshot_restore_then_continue_matches_continuing_directly(
        ops in prop::collection::vec(op(), 1..60),
        cut in any::<prop::sample::Index>(),
    ) {
        let cut = cut.index(ops.len());
        let mut direct = Run::new();
        let mut restored = Run::new();
        let mut outcomes = (Vec::new(), Vec::new());
        for (i, op) in ops.iter().enumerate() {
            if i == cut {
                let bytes = restored.h.ledger.to_snapshot();
                restored.h.ledger = Ledger::from_snapshot(&bytes).expect("own snapshot restores");
                prop_assert_eq!(&restored.h.ledger, &direct.h.ledger);
            }
            outcomes.0.push(direct.step(op)?);
            outcomes.1.push(restored.step(op)?);
        }
        prop_assert_eq!(outcomes.0, outcomes.1);
        prop_assert!(direct.h.ledger.to_snapshot() == restored.h.ledger.to_snapshot());
    }
}
