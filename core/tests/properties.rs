//! Property tests over random command sequences.
//!
//! After every step: at most one open attempt per effect and every record invariant;
//! committed never changes; a stale token never fails an effect, extends a lease or wins
//! a grant; fencing tokens only grow; the same key with a different intent is always a
//! conflict; `failed_before_effect` only when every ambiguous dispatch was settled by a
//! decision or by a not-found observation made once nothing could still land (judged at
//! its reconciliation attempt's grant) and reported before the provider's horizon; an amend
//! changes an intent only where nothing can have happened, and keeps the old hash; a
//! decision that names an escalation settles no other;
//! re-applying a command id returns the first outcome and changes nothing; a collected
//! record leaves a tombstone (a declaration's slots all at once), a tombstoned key is
//! answered expired and gets no record, and the derived indexes and usage counters equal
//! a rebuild from the snapshot. Separately:
//! snapshot, restore and continue gives the same outcomes as continuing directly.
//!
//! `PROPTEST_CASES` overrides the number of cases (default 2000 per property).

#[path = "properties/checks.rs"]
mod checks;
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
/// How long the run's tenant keeps tombstones: a few `Advance(RETENTION_MS)` steps.
const TOMBSTONE_RETENTION_MS: u64 = 2 * RETENTION_MS;

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
        /// 0: any open escalation; 1: the newest token (the open escalation's, if any);
        /// 2: an older token of the effect (an earlier escalation's, say).
        fence: u8,
    },
    Amend {
        key: usize,
        slot: Option<u32>,
        intent: usize,
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
            // Half a lease short of when a look-up after a report proves absence: a
            // reconciliation granted then and reported half a lease later proves nothing.
            1 => Just(PROCESSING_MS + VISIBILITY_LAG_MS - LEASE_MS / 2),
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
        1 => (key.clone(), any::<bool>(), 0..3u8).prop_map(|(key, committed, fence)| Op::Decide { key, committed, fence }),
        1 => (key, prop::option::weighted(0.1, 0..2u32), 0..3usize)
            .prop_map(|(key, slot, intent)| Op::Amend { key, slot, intent }),
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
        // Remember command ids for the whole run so every retry can be checked; keep
        // tombstones for two retention periods, so runs see them both kept and expired.
        h.operator(CommandBody::PutTenant {
            tenant: TENANT.into(),
            settings: TenantSettings {
                command_retention_ms: u64::MAX / 4,
                tombstone_retention_ms: TOMBSTONE_RETENTION_MS,
                ..TenantSettings::default()
            },
        });
        // The ticket provider declares no processing bound: its look-ups never prove
        // absence, so its unknown effects settle only by a fact or a person.
        h.put_policy(
            TENANT,
            TICKET,
            ToolPolicy {
                processing_ms_max: None,
                ..policy(ReplayClass::UnkeyedCreate)
            },
        );
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
            Op::Decide {
                key,
                committed,
                fence,
            } => {
                let decision = if committed {
                    Decision::Committed {
                        receipt: "by hand".into(),
                    }
                } else {
                    Decision::NotCommitted
                };
                let key = effect_key(key, None);
                let escalation_token = self.token(&key, if fence == 1 { 0 } else { 5 });
                let (operator, note) = ("ops".to_string(), String::new());
                let body = match fence {
                    0 => CommandBody::Decide {
                        key,
                        decision,
                        operator,
                        note,
                    },
                    _ => CommandBody::DecideEscalation {
                        key,
                        escalation_token,
                        decision,
                        operator,
                        note,
                    },
                };
                (Caller::Operator, body)
            }
            Op::Amend { key, slot, intent } => (
                tenant,
                CommandBody::Amend {
                    declaration: self.declaration(key, slot, intent),
                },
            ),
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
