//! Linearizability per effect: the history of ledger operations the workload clients
//! made on one effect (claims, reports, reconciliations, observations, reads, with their
//! invocation and response times and results) must be explainable by applying them one
//! at a time to the core [`Ledger`], each at one instant within its own call.
//!
//! - [`oplog`]: the recorded history;
//! - [`model`]: the sequential model and what "the same result" means;
//! - [`search`]: the Wing & Gong search.
//!
//! An effect is checked only when every attempt its final record holds was asked for by a
//! recorded client: a scenario that also drives an effect by hand (or through the
//! `EffectRunner`, whose calls are not recorded) leaves it out, since a history with
//! unrecorded writers cannot be judged.

use std::collections::{BTreeMap, BTreeSet};

use ledger_core::{CommandBody, EffectKey};

use crate::check::Violations;
use crate::replica::ReplicaView;

pub mod model;
pub mod oplog;
pub mod search;
#[cfg(test)]
mod tests;

use oplog::{Call, Op};
use search::{Search, Verdict};

/// Model applications the search may make per effect before giving up undecided. An
/// undecided effect is a violation: a history too large to judge must not pass for a
/// linearizable one (none was undecided over the 10,000-seed sweep).
const STEPS_MAX: u64 = 200_000;

/// How far ledger time may stray from the simulator's clock, by which the window in which
/// an operation can have been stamped is widened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClockSlack {
    /// Ledger time behind the simulator's clock (ms). After every node restarted at once
    /// no node measured the outage, and ledger time lags by it (`ledger_node::stamp_bound`).
    pub lag_ms: u64,
    /// Ledger time ahead of the simulator's clock (ms): zero while every node's clock is
    /// right.
    pub lead_ms: u64,
    /// How far a leader's upper bound on real time may be ahead of the simulator's clock
    /// (ms): it is never below the leader's wall clock plus the skew
    /// (`ledger_node::real_time`), and a wall clock may be wrong by days.
    pub real_max_lead_ms: u64,
}

/// Largest lag of ledger time the checker allows: longer than any outage of a whole
/// simulated cluster.
pub const LAG_MS_MAX: u64 = 60_000;

/// What the checker did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Checked {
    /// Effects found linearizable.
    pub linearizable: usize,
    /// Effects left out: written by clients that were not recorded.
    pub skipped: usize,
    /// Effects whose search ran out of steps (each also a violation).
    pub undecided: usize,
    /// Operations in the checked effects.
    pub operations: usize,
}

/// Checks every effect of `ops` whose writers were all recorded, against `view`'s final
/// records, with ledger time allowed to stray from the simulator's clock by `slack`;
/// returns the violations and what was checked.
pub fn check_linearizable(
    ops: &[Op],
    view: &ReplicaView,
    slack: ClockSlack,
) -> (Violations, Checked) {
    let mut by_key: BTreeMap<&EffectKey, Vec<&Op>> = BTreeMap::new();
    for op in ops {
        by_key.entry(&op.key).or_default().push(op);
    }
    let mut violations = Violations::new();
    let mut checked = Checked::default();
    let empty = model::configured_ledger();
    for (key, ops) in by_key {
        if !all_writers_recorded(&ops, view.records.get(key)) {
            checked.skipped += 1;
            continue;
        }
        let count = ops.len();
        let search = Search::new(ops.clone(), STEPS_MAX).with_clock_slack(slack);
        match search.run(&empty) {
            Verdict::Linearizable => {
                checked.linearizable += 1;
                checked.operations += count;
            }
            Verdict::Undecided => {
                checked.undecided += 1;
                violations.push(format!(
                    "{key}: undecided: no linearization of its {count} operations found or \
                     ruled out within {STEPS_MAX} steps of search:\n{}",
                    describe(&ops)
                ));
            }
            Verdict::NotLinearizable => {
                violations.push(format!(
                    "{key}: no linearization of its {count} operations:\n{}",
                    describe(&ops)
                ));
            }
        }
    }
    (violations, checked)
}

fn all_writers_recorded(ops: &[&Op], record: Option<&ledger_core::EffectRecord>) -> bool {
    let holders: BTreeSet<&str> =
        ops.iter()
            .filter_map(|op| match &op.call {
                Call::Command { body, .. } => match body.as_ref() {
                    CommandBody::Claim { holder, .. }
                    | CommandBody::BeginReconcile { holder, .. } => Some(holder.as_str()),
                    _ => None,
                },
                Call::Read => None,
            })
            .collect();
    record.is_none_or(|r| {
        r.attempts
            .iter()
            .all(|a| holders.contains(a.holder.as_str()))
    })
}

/// The history, one line per operation, for a failure message.
fn describe(ops: &[&Op]) -> String {
    ops.iter()
        .take(60)
        .map(|op| {
            let call = match &op.call {
                Call::Read => "read".to_string(),
                Call::Command { command_id, body } => format!("{command_id} {body:?}"),
            };
            let answer = match &op.answer {
                Some((at, answer)) => format!("..{at}: {answer:?}"),
                None => ": pending".into(),
            };
            format!("    [{}{answer}] {} {call}", op.invoked_ms, op.client)
        })
        .collect::<Vec<_>>()
        .join("\n")
}
