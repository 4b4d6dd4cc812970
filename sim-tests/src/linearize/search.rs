//! Wing & Gong's search for a linearization of one effect's history, with memoisation
//! (Lowe's refinement): states already explored with the same set of linearized
//! operations, model state and clock are not explored again.
//!
//! An operation may be linearized next when no other operation still to be linearized
//! responded before it was invoked. A command is applied at a time between its
//! invocation and its response and not before the previous command's time (the ledger's
//! clock never goes back). Invocation and response are read on the simulator's clock and
//! the time a command is applied at is ledger time, the leader's stamp, which may lag the
//! simulator's clock or, when the nodes' clocks are wrong, run a little ahead of it
//! ([`ClockSlack`]): the window is widened by as much; the order of operations in real
//! time is kept exactly. A dispatch grant's stamp also carries the earliest real time the
//! leader knew it to be, where the provider horizon starts; the model reads it from the
//! grant's horizon deadline. A read leaves the clock where it is and says nothing about the
//! stamps of what follows it: the leader stamps a command when it proposes it, so a
//! command stamped before a read began may still be applied after the read. A pending
//! operation (no answer) may be linearized anywhere after its invocation, or never.

use std::collections::{BTreeMap, BTreeSet};

use ledger_core::{ClaimOutcome, CommandBody, Ledger, Outcome, ReconcileOutcome, Stamp};

use super::model::{read_form, same_outcome, sweep, translate};
use super::oplog::{Answer, Call, Op};
use super::ClockSlack;

/// How the search ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// A linearization exists.
    Linearizable,
    /// None exists.
    NotLinearizable,
    /// The step budget ran out first.
    Undecided,
}

/// The search over one effect's operations.
pub struct Search<'a> {
    ops: Vec<&'a Op>,
    attempt_of: BTreeMap<u64, u32>,
    hints: BTreeSet<u64>,
    memo: BTreeSet<(Vec<u64>, u64, u64)>,
    steps_left: u64,
    slack: ClockSlack,
}

impl<'a> Search<'a> {
    /// A search over `ops` (all of one effect), allowed `steps` model applications.
    pub fn new(ops: Vec<&'a Op>, steps: u64) -> Search<'a> {
        let mut attempt_of = BTreeMap::new();
        for op in &ops {
            match &op.answer {
                Some((_, Answer::Outcome(outcome))) => {
                    if let Some(g) = grant_of(outcome) {
                        attempt_of.insert(g.fencing_token, g.attempt_id);
                    }
                }
                Some((_, Answer::Record(Some(record)))) => {
                    for a in &record.attempts {
                        attempt_of.insert(a.fencing_token, a.attempt_id);
                    }
                }
                _ => {}
            }
        }
        let hints = stamp_hints(&ops);
        Search {
            ops,
            attempt_of,
            hints,
            memo: BTreeSet::new(),
            steps_left: steps,
            slack: ClockSlack::default(),
        }
    }

    /// Lets ledger time lag or lead the simulator's clock by up to `slack`.
    pub fn with_clock_slack(mut self, slack: ClockSlack) -> Self {
        self.slack = slack;
        self
    }

    /// Searches from `model` (the configured, empty ledger).
    pub fn run(mut self, model: &Ledger) -> Verdict {
        let mut done = vec![false; self.ops.len()];
        self.dfs(&mut done, model, 0)
    }

    fn dfs(&mut self, done: &mut [bool], model: &Ledger, now_ms: u64) -> Verdict {
        let open = |i: usize| !done[i] && self.ops[i].answer.is_some();
        if !(0..self.ops.len()).any(open) {
            return Verdict::Linearizable;
        }
        let state = (bits(done), now_ms, crate::fnv64(&model.to_snapshot()));
        if !self.memo.insert(state) {
            return Verdict::NotLinearizable;
        }
        let first_response = (0..self.ops.len())
            .filter(|i| open(*i))
            .filter_map(|i| self.ops[i].answer.as_ref().map(|(at, _)| *at))
            .min()
            .unwrap_or(u64::MAX);
        for i in 0..self.ops.len() {
            if done[i] || self.ops[i].invoked_ms > first_response {
                continue;
            }
            for (next, next_ms) in self.successors(i, model, now_ms) {
                if self.steps_left == 0 {
                    return Verdict::Undecided;
                }
                self.steps_left -= 1;
                done[i] = true;
                let found = self.dfs(done, &next, next_ms);
                done[i] = false;
                if found != Verdict::NotLinearizable {
                    return found;
                }
            }
        }
        Verdict::NotLinearizable
    }

    /// The model states (and clocks) in which operation `i`, linearized next, gives the
    /// answer its client received.
    fn successors(&self, i: usize, model: &Ledger, now_ms: u64) -> Vec<(Ledger, u64)> {
        let op = self.ops[i];
        let responded = op.answer.as_ref().map(|(at, _)| *at);
        if responded.is_some_and(|at| at.saturating_add(self.slack.lead_ms) < now_ms) {
            return Vec::new();
        }
        let command_id_and_body = match &op.call {
            Call::Read => {
                let seen = model.get(&op.key).as_ref().map(read_form);
                let matches = match &op.answer {
                    Some((_, Answer::Record(real))) => seen == real.as_deref().map(read_form),
                    _ => true,
                };
                return if matches {
                    vec![(model.clone(), now_ms)]
                } else {
                    Vec::new()
                };
            }
            Call::Command { command_id, body } => (command_id, body),
        };
        let mut successors = Vec::new();
        for at in self.candidate_times(op, model, now_ms) {
            let mut next = model.clone();
            sweep(&mut next, at);
            let (command_id, body) = command_id_and_body;
            let Some(command) = translate(&next, command_id, body, &self.attempt_of) else {
                continue;
            };
            let Some(stamp) = stamp_for(op, model, at, self.slack) else {
                continue;
            };
            for stamp in with_upper_bounds(stamp, op, &next, self.slack) {
                let mut applied = next.clone();
                let outcome = applied.apply_stamped(&command, stamp);
                let matches = match &op.answer {
                    Some((_, Answer::Outcome(real))) => same_outcome(&outcome, real),
                    Some((_, Answer::Record(_))) => false,
                    None => true,
                };
                let known = successors.iter().any(|(l, t)| *t == at && *l == applied);
                if matches && !known {
                    successors.push((applied, at));
                }
            }
        }
        successors
    }

    /// The times worth trying for command `op`: the exact stamp of a grant, or the
    /// earliest possible time and every boundary (a lease's end, a horizon) up to its
    /// response, between which no outcome can change; for a pending command, also every
    /// stamp other answers reveal (it may have been a grant they saw).
    fn candidate_times(&self, op: &Op, model: &Ledger, now_ms: u64) -> Vec<u64> {
        let earliest = now_ms.max(op.invoked_ms.saturating_sub(self.slack.lag_ms));
        let latest = op
            .answer
            .as_ref()
            .map_or(u64::MAX, |(at, _)| at.saturating_add(self.slack.lead_ms));
        if earliest > latest {
            return Vec::new();
        }
        if let Some((_, Answer::Outcome(outcome))) = &op.answer {
            if let Some(grant) = grant_of(outcome) {
                let at = grant.granted_at_ms;
                return if (earliest..=latest).contains(&at) {
                    vec![at]
                } else {
                    Vec::new()
                };
            }
        }
        let mut times = BTreeSet::from([earliest]);
        if op.answer.is_none() {
            times.extend(self.hints.range(earliest..).copied());
        }
        if let Some(record) = model.get(&op.key) {
            let boundaries = record
                .attempts
                .iter()
                .map(|a| a.lease_until_ms)
                .chain(record.horizon_deadline_ms);
            times.extend(boundaries.filter(|t| (earliest..=latest).contains(t)));
        }
        times.into_iter().collect()
    }
}

/// Stamps of grants the history reveals: granted times in grants and reads, and the
/// start of every lease an `in_flight` answer names (its end less each lease length seen).
fn stamp_hints(ops: &[&Op]) -> BTreeSet<u64> {
    let mut stamps = BTreeSet::new();
    let mut lengths: BTreeSet<u64> = crate::fixtures::ToolKind::ALL
        .iter()
        .map(|t| t.policy().lease_ms)
        .collect();
    let mut lease_ends = Vec::new();
    for op in ops {
        match &op.answer {
            Some((_, Answer::Outcome(outcome))) => {
                if let Some(g) = grant_of(outcome) {
                    stamps.insert(g.granted_at_ms);
                    lengths.insert(g.lease_until_ms - g.granted_at_ms);
                }
                if let Outcome::Claim(ClaimOutcome::InFlight { lease_until_ms, .. })
                | Outcome::Reconcile(ReconcileOutcome::InFlight { lease_until_ms, .. }) = outcome
                {
                    lease_ends.push(*lease_until_ms);
                }
            }
            Some((_, Answer::Record(Some(record)))) => {
                for a in &record.attempts {
                    stamps.insert(a.granted_at_ms);
                    lengths.insert(a.lease_until_ms.saturating_sub(a.granted_at_ms));
                }
            }
            _ => {}
        }
    }
    for end in lease_ends {
        stamps.extend(lengths.iter().map(|l| end.saturating_sub(*l)));
    }
    stamps
}

/// The stamp to apply command `op` with at ledger time `at`. A leader that knows real
/// time is ahead of ledger time (ledger time lags after an outage no node measured)
/// stamps the earliest real time it may be, and a dispatch grant's provider horizon
/// starts there: the grant's answer shows it, as its horizon deadline less the tool's
/// horizon. Otherwise ledger time is all the model knows of real time. `None` when the
/// earliest real time the answer implies is later than the answer itself (plus what a
/// wrong clock may lead by): no leader could have stamped that.
fn stamp_for(op: &Op, model: &Ledger, at: u64, slack: ClockSlack) -> Option<Stamp> {
    let grant = match &op.answer {
        Some((_, Answer::Outcome(outcome))) => grant_of(outcome),
        _ => None,
    };
    let (Some(deadline), Call::Command { body, .. }) =
        (grant.and_then(|g| g.horizon_deadline_ms), &op.call)
    else {
        return Some(Stamp::at(at));
    };
    let horizon_ms = match (model.get(&op.key), body.as_ref()) {
        (Some(record), _) => Some(record.policy.provider_horizon_ms),
        (None, CommandBody::Claim { declaration, .. }) => model
            .tenant(&op.key.tenant)
            .and_then(|t| t.tools.get(&declaration.tool.tool_name()).cloned())
            .map(|policy| policy.provider_horizon_ms),
        _ => None,
    };
    let real_ms_min = horizon_ms.map_or(at, |h| deadline.saturating_sub(h).max(at));
    let answered = op.answer.as_ref().map_or(u64::MAX, |(t, _)| *t);
    (real_ms_min <= answered.saturating_add(slack.lead_ms)).then_some(Stamp {
        ledger_ms: at,
        real_ms_min,
        real_ms_max: real_ms_min,
    })
}

/// `stamp` with each upper bound on real time its leader may have stamped that can change
/// the outcome. A leader's upper bound is never below its own wall clock plus the skew, and
/// a wall clock may be wrong by days (`ledger_node::real_time`): a keyed re-send may have
/// been judged past its horizon, an irreversible tool's ambiguous observation escalated,
/// at any upper bound up to the most the run's clocks allow ([`ClockSlack`]). Tried are
/// the stamp as it is, that furthest bound, and the one an answer shows exactly: a re-send
/// whose lease, or a heartbeat whose refusal, ends where real time may reach the re-send
/// deadline (`Stamp::ledger_ms_before`). The upper bound judges nothing but a horizon, so
/// a command on an effect without one is tried with the stamp alone.
fn with_upper_bounds(stamp: Stamp, op: &Op, model: &Ledger, slack: ClockSlack) -> Vec<Stamp> {
    let mut stamps = vec![stamp];
    let record = model.get(&op.key);
    if record
        .as_ref()
        .is_none_or(|r| r.horizon_deadline_ms.is_none())
    {
        return stamps;
    }
    let seen_ms = op
        .answer
        .as_ref()
        .map_or(stamp.ledger_ms.saturating_add(slack.lag_ms), |(t, _)| *t);
    let furthest_ms = seen_ms.saturating_add(slack.real_max_lead_ms);
    let shown_ms = record
        .as_ref()
        .and_then(|record| record.resend_deadline_ms())
        .zip(op.answer.as_ref().and_then(|(_, a)| shown_lease_until(a)))
        .map(|(deadline_ms, until_ms)| {
            stamp
                .ledger_ms
                .saturating_add(deadline_ms.saturating_sub(until_ms))
        });
    for real_ms_max in shown_ms.into_iter().chain([furthest_ms]) {
        if real_ms_max > stamp.real_ms_max && real_ms_max <= furthest_ms {
            stamps.push(Stamp {
                real_ms_max,
                ..stamp
            });
        }
    }
    stamps
}

/// The end of a lease an answer names: a grant's, or the one a refusal says ran out.
fn shown_lease_until(answer: &Answer) -> Option<u64> {
    match answer {
        Answer::Outcome(Outcome::Refused(ledger_core::Refusal::LeaseExpired {
            lease_until_ms,
        })) => Some(*lease_until_ms),
        Answer::Outcome(outcome) => grant_of(outcome).map(|g| g.lease_until_ms),
        Answer::Record(_) => None,
    }
}

fn grant_of(outcome: &Outcome) -> Option<&ledger_core::Grant> {
    match outcome {
        Outcome::Claim(ClaimOutcome::Proceed(g))
        | Outcome::Reconcile(ReconcileOutcome::Observe(g)) => Some(g),
        _ => None,
    }
}

fn bits(done: &[bool]) -> Vec<u64> {
    let mut words = vec![0u64; done.len().div_ceil(64)];
    for (i, d) in done.iter().enumerate() {
        if *d {
            words[i / 64] |= 1 << (i % 64);
        }
    }
    words
}
