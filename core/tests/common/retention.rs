//! Retention checks for the property tests: what must hold after every step about
//! collection, tombstones and the derived indexes and usage counters.

use ledger_core::*;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use super::TENANT;

/// Retention: a record leaves only through collection, leaving a tombstone with its
/// intent hash and final state; a declaration's slots leave together; a command on a
/// tombstoned key without a record is answered expired and creates nothing; and the
/// indexes and usage counters kept step by step equal those rebuilt from a snapshot.
pub fn check_step(
    before: &Ledger,
    after: &Ledger,
    command: &Command,
    out: &Outcome,
) -> Result<(), TestCaseError> {
    for (key, rec) in records(before, TENANT) {
        if after.get(&key).is_some() {
            continue;
        }
        let tombstone = after.tombstone(&key);
        prop_assert!(
            tombstone
                .is_some_and(|t| t.intent_hash == rec.intent_hash && t.final_state == rec.state),
            "{} vanished without its tombstone",
            key
        );
        if let (Some((base, _)), Some(slot)) = (key.slot(), rec.slot) {
            for i in 0..slot.count {
                prop_assert!(
                    after.get(&base.slot_key(i)).is_none(),
                    "{} collected without slot {}",
                    key,
                    i
                );
            }
        }
    }
    let addressed: Vec<EffectKey> = match &command.body {
        CommandBody::Declare { declaration, slots } if *slots > 1 => {
            (0..*slots).map(|i| declaration.key.slot_key(i)).collect()
        }
        CommandBody::Declare { declaration, .. } | CommandBody::Claim { declaration, .. } => {
            vec![declaration.key.clone()]
        }
        CommandBody::BeginReconcile { key, .. } => vec![key.clone()],
        _ => Vec::new(),
    };
    for key in addressed {
        if before.get(&key).is_none() && before.tombstone(&key).is_some() {
            prop_assert!(
                matches!(
                    out,
                    Outcome::Claim(ClaimOutcome::Expired(_))
                        | Outcome::Reconcile(ReconcileOutcome::Expired(_))
                        | Outcome::Refused(Refusal::Expired(_))
                ),
                "tombstoned {} answered {:?}",
                key,
                out
            );
            prop_assert!(after.get(&key).is_none(), "tombstoned {} got a record", key);
        }
    }
    let rebuilt = Ledger::from_snapshot(&after.to_snapshot()).expect("own snapshot restores");
    prop_assert!(
        rebuilt == *after,
        "indexes or usage counters drifted from a rebuild"
    );
    Ok(())
}

/// Every record of `tenant`.
fn records(ledger: &Ledger, tenant: &str) -> Vec<(EffectKey, EffectRecord)> {
    let query = ListQuery {
        tenant: tenant.into(),
        escalated: false,
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
