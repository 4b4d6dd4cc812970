//! What a node knows of real time beyond ledger time: the bounds a leader stamps next to
//! ledger time, by which the state machine judges provider horizons (see
//! `ledger_core::stamp`).
//!
//! Pure: times go in as arguments, bounds come out. The node feeds it its clocks and its
//! peers' answers (`crate::ledger_time`); the tests here feed it numbers.
//!
//! # Why ledger time is not enough
//!
//! Ledger time ([`crate::stamp_bound`]) advances by what some running node's monotonic
//! clock saw pass. Time that passed while no node ran (every node down at once) is
//! measured by no clock: afterwards ledger time resumes from the last stamp and lags real
//! time by the outage, catching up by at most `clock_skew_ms_max` per leadership. That is
//! safe for leases and retention (they run out late), but a provider forgets a key a fixed
//! real time after it saw it, and judged by ledger time its horizon would pass late: a
//! re-send would be granted under a key the provider has already forgotten.
//!
//! # The rule
//!
//! A node is in one of three states:
//! - **unmeasured**: it started (from its disk, or empty) and has not yet learned what
//!   the others know; every node starts here.
//! - **in step**: as far as it knows, ledger time is real time within the skew: a leader
//!   whose clock is behind by less than `clock_skew_ms_max` stamps that much behind real
//!   time. The lower bound is ledger time, the upper bound ledger time plus the skew.
//! - **lagging**: an outage went unmeasured and real time was at least `min_ms` and at
//!   most `max_ms` when the monotonic clock read `monotonic_ms`; both bounds move on with
//!   the monotonic clock, and neither is ever below ledger time.
//!
//! A node settles its state before its first stamp, with the answers of the peers it
//! asked ([`RealTimeBound::settle`]). A peer that is no longer unmeasured (it settled, or
//! learned its leader's view from a stamp, below) vouches for what it knows (in step, or
//! its bounds); the node takes the widest of what they vouch for. When nobody can vouch
//! (after a cold start of the whole cluster every node restarted and none has settled),
//! the wall clocks are the only witnesses: if one that answered (this node's own
//! included) is more than the skew ahead of ledger time, an outage went unmeasured, and
//! real time is at least the slowest clock minus the skew and at most the fastest plus
//! the skew. So any honest clock keeps each bound honest, and any clock that says a
//! horizon has passed wins (a wall clock days ahead then makes every horizon pass early:
//! the effects are reconciled or escalated, never re-sent). A clock less than the skew
//! ahead is what clock spread and the delay of a stamp's delivery make of ledger time
//! anyway: the node is in step (a new cluster, or nodes that restarted one at a time).
//!
//! A leader stamps only once settled, so its stamps carry its view: lagging bounds travel
//! in every stamp, and a node that receives them is lagging too; a node that receives a
//! stamp without a lag made in its current leader's term (not an old entry replayed to
//! it) is in step ([`RealTimeBound::observe`]). Either way it can vouch for a node that
//! restarts later, and a follower elected later stamps the same. A node is in step again
//! once ledger time plus the skew covers the upper bound: the lag is made up as far as
//! ledger time can tell.
//!
//! Whatever its state, a leader's upper bound is never below its own wall clock plus the
//! skew ([`RealTimeBound::read`]). In step, ledger time can still lag real time: a
//! follower anchors it on a stamp when the stamp arrives, and one delivered late (the
//! entry was on its way while the machines paused) holds ledger time back by the delay,
//! which no clock tells apart from a slow leader; elected, that node would judge horizons
//! by ledger time plus the skew, and re-send a key its provider has forgotten. Its wall
//! clock, right within the skew as the in-step rule already assumes of a stamping leader,
//! covers that. A wall clock wrongly ahead then only makes horizons pass early (the
//! effects are reconciled or escalated, never re-sent) and bounds nothing else: ledger
//! time stays bounded. Such a stamp says that its upper bound is its leader's own witness
//! (a lower bound one below ledger time), and followers do not carry it on as a lag: once
//! that node no longer leads, or its clock is put right, horizons are judged as before.
//! Each node elected later has its own wall clock for the same purpose. A leader that
//! also knows of a lag stamps the larger upper bound as a lag (one stamp cannot say
//! which part is which), and followers carry it until ledger time plus the skew covers it.
//!
//! # What it assumes, and cannot see
//!
//! - In step, the stamping leader's wall clock is behind real time by less than
//!   `clock_skew_ms_max`. After a cold start, at least one clock that answered (the
//!   leader's own included) is. A clock further behind is outside what this bound covers:
//!   the upper bound is late by the difference, and a horizon may be judged passed that
//!   much late. Likewise after a cold start one clock is ahead by less than the skew, or
//!   the lower bound (where a new horizon starts) is late.
//! - A lag the clocks show by no more than the skew is not told from clock spread and
//!   delivery delays: the node stays in step, and its upper bound may be short by up to
//!   the skew.
//! - Bounds learned from a stamp or a peer's answer are taken at arrival (a peer's upper
//!   bound plus the round trip): a stamp delivered late makes the upper bound late by the
//!   delay, as it makes ledger time late.
//! - Monotonic clocks are taken to run at the rate of real time, as for ledger time.
//! - Ledger time lagging for another reason while every node ran (a stamp delivered long
//!   after it was made, across a pause) is not an unmeasured outage: the node stays in
//!   step, and only its own wall clock (above) keeps its upper bound honest.
//!
//! # Caller duties
//!
//! 1. Build it when the node starts ([`RealTimeBound::new`]: unmeasured).
//! 2. Pass every stamp of another leader to [`RealTimeBound::observe`] as it arrives,
//!    saying whether its leader made it in the term it sends it in.
//! 3. After starting, before the first stamp, ask the peers ([`RealTimeBound::view`] and
//!    the wall clock on their side) and pass every answer, with its round trip, to
//!    [`RealTimeBound::settle`] (also when nobody answered).
//! 4. Stamp with [`RealTimeBound::read`] at the stamp's ledger time, then tell it that
//!    ledger time ([`RealTimeBound::stamped`]).

use serde::{Deserialize, Serialize};

use ledger_core::Stamp;

/// Bounds on real time known at a monotonic reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Bounds {
    min_ms: u64,
    max_ms: u64,
    monotonic_ms: u64,
}

impl Bounds {
    /// The bounds at `monotonic_ms`, moved on by the time passed since.
    fn at(&self, monotonic_ms: u64) -> (u64, u64) {
        let passed_ms = monotonic_ms.saturating_sub(self.monotonic_ms);
        (
            self.min_ms.saturating_add(passed_ms),
            self.max_ms.saturating_add(passed_ms),
        )
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Unmeasured,
    InStep,
    Lagging(Bounds),
}

/// What a node can vouch for about real time, as it answers a peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RealView {
    /// It restarted and has not learned how long it was down: it vouches for nothing.
    Unmeasured,
    /// Ledger time is real time as far as it knows.
    InStep,
    /// Ledger time lags: real time is at least `min_ms` and at most `max_ms` now.
    Lagging {
        /// Earliest real time it may be now (ms).
        min_ms: u64,
        /// Latest real time it may be now (ms).
        max_ms: u64,
    },
}

/// A peer's answer, as the asking node received it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerReal {
    /// What the peer vouches for.
    pub view: RealView,
    /// The peer's wall clock when it answered (ms).
    pub wall_ms: u64,
    /// The asking node's monotonic clock when the answer arrived (ms).
    pub received_at_ms: u64,
    /// How long the question took to be answered, on the asking node's clock (ms).
    pub round_trip_ms: u64,
}

/// A peer's answer moved on to `monotonic_ms`: the interval its time may lie in now.
fn aged(answer: &PeerReal, min_ms: u64, max_ms: u64, monotonic_ms: u64) -> (u64, u64) {
    let since_ms = monotonic_ms.saturating_sub(answer.received_at_ms);
    (
        min_ms.saturating_add(since_ms),
        max_ms
            .saturating_add(since_ms)
            .saturating_add(answer.round_trip_ms),
    )
}

/// A node's knowledge of real time beyond ledger time. See the module docs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RealTimeBound {
    skew_ms_max: u64,
    state: State,
}

impl RealTimeBound {
    /// The knowledge of a node that just started: unmeasured.
    pub fn new(skew_ms_max: u64) -> Self {
        RealTimeBound {
            skew_ms_max,
            state: State::Unmeasured,
        }
    }

    /// The bounds on real time for a stamp at ledger time `ledger_ms`, with the wall and
    /// monotonic clocks read now. The upper bound is never below `ledger_ms` plus the skew,
    /// nor below this node's wall clock plus the skew: whatever the state, a wall clock that
    /// says more time has passed is a witness, and one that is wrongly ahead only makes
    /// horizons pass early. The lower bound is never below `ledger_ms`, except when this
    /// node knows of no lag beyond ledger time plus the skew and the wall clock raised the
    /// upper bound: the lower bound is then one below `ledger_ms`, which tells a follower
    /// that the raise is this leader's own witness and not a lag to carry on
    /// ([`RealTimeBound::observe`]). It is still a lower bound, only a weaker one, and the
    /// state machine raises it to ledger time when it applies the stamp ([`Stamp`]'s
    /// `applied`).
    pub fn read(&self, ledger_ms: u64, wall_ms: u64, monotonic_ms: u64) -> (u64, u64) {
        let in_step_max_ms = ledger_ms.saturating_add(self.skew_ms_max);
        let witnessed_max_ms = wall_ms.saturating_add(self.skew_ms_max);
        let (min_ms, max_ms) = match self.state {
            State::InStep | State::Unmeasured => (ledger_ms, in_step_max_ms),
            State::Lagging(bounds) => bounds.at(monotonic_ms),
        };
        let (min_ms, known_max_ms) = (min_ms.max(ledger_ms), max_ms.max(in_step_max_ms));
        if witnessed_max_ms > known_max_ms && known_max_ms == in_step_max_ms {
            return (ledger_ms.saturating_sub(1), witnessed_max_ms);
        }
        (min_ms, known_max_ms.max(witnessed_max_ms))
    }

    /// Learns that ledger time reached `ledger_ms` by `monotonic_ms`: once it plus the
    /// skew covers the upper bound, the lag is made up and the node is in step again.
    pub fn stamped(&mut self, ledger_ms: u64, monotonic_ms: u64) {
        if let State::Lagging(bounds) = self.state {
            if bounds.at(monotonic_ms).1 <= ledger_ms.saturating_add(self.skew_ms_max) {
                self.state = State::InStep;
            }
        }
    }

    /// Learns the bounds of another leader's stamp as it arrives at `monotonic_ms`;
    /// `current_term` says the entry was made in the term of the leader sending it. A
    /// stamp that shows a lag (an upper bound beyond ledger time plus the skew, with a
    /// lower bound not below ledger time) makes this node lagging (widening what it knew:
    /// the larger lower bound, the larger upper bound). One that shows none makes an
    /// unmeasured node in step if its leader made it in this term (it settled before
    /// stamping); an older entry says nothing about now. An upper bound raised by its
    /// leader's wall clock alone, which that leader marks with a lower bound below ledger
    /// time ([`RealTimeBound::read`]), shows no lag: that clock is a witness only while its
    /// node leads, and this node, if elected, has its own.
    pub fn observe(&mut self, stamp: &Stamp, current_term: bool, monotonic_ms: u64) {
        let raised = stamp.real_ms_max > stamp.ledger_ms.saturating_add(self.skew_ms_max);
        let witness_only = stamp.real_ms_min < stamp.ledger_ms;
        if !raised || witness_only {
            if current_term && self.state == State::Unmeasured {
                self.state = State::InStep;
            }
            self.stamped(stamp.ledger_ms, monotonic_ms);
            return;
        }
        let (min_ms, max_ms) = match self.state {
            State::Lagging(bounds) => {
                let (min_ms, max_ms) = bounds.at(monotonic_ms);
                (min_ms.max(stamp.real_ms_min), max_ms.max(stamp.real_ms_max))
            }
            State::Unmeasured | State::InStep => (stamp.real_ms_min, stamp.real_ms_max),
        };
        self.state = State::Lagging(Bounds {
            min_ms,
            max_ms,
            monotonic_ms,
        });
        self.stamped(stamp.ledger_ms, monotonic_ms);
    }

    /// What this node vouches for, for a peer that asks at `monotonic_ms`.
    pub fn view(&self, monotonic_ms: u64) -> RealView {
        match self.state {
            State::Unmeasured => RealView::Unmeasured,
            State::InStep => RealView::InStep,
            State::Lagging(bounds) => {
                let (min_ms, max_ms) = bounds.at(monotonic_ms);
                RealView::Lagging { min_ms, max_ms }
            }
        }
    }

    /// Settles what this node knows from its peers' `answers` (possibly none), ledger time
    /// `ledger_ms` as it would stamp it now (having heard the peers), and its own wall
    /// clock `wall_ms` and monotonic clock `monotonic_ms` read now.
    ///
    /// Whoever can vouch (this node, unless it is unmeasured, and every peer that is not)
    /// is believed: in step if all of them are, otherwise lagging with the largest upper
    /// bound and the smallest lower bound vouched for (a peer in step counting as no lag at
    /// all). If nobody can vouch, the wall clocks decide: lagging (the slowest minus the
    /// skew, the fastest plus the skew) if they tell of an outage, in step otherwise.
    pub fn settle(
        &mut self,
        answers: &[PeerReal],
        ledger_ms: u64,
        wall_ms: u64,
        monotonic_ms: u64,
    ) {
        let own = match self.state {
            State::Unmeasured => None,
            _ => Some(self.view(monotonic_ms)),
        };
        let vouched: Vec<(u64, u64, bool)> = own
            .map(|view| (view, None))
            .into_iter()
            .chain(answers.iter().map(|a| (a.view, Some(a))))
            .filter_map(|(view, answer)| match view {
                RealView::Unmeasured => None,
                RealView::InStep => Some((0, 0, false)),
                RealView::Lagging { min_ms, max_ms } => Some(match answer {
                    Some(answer) => {
                        let (min_ms, max_ms) = aged(answer, min_ms, max_ms, monotonic_ms);
                        (min_ms, max_ms, true)
                    }
                    None => (min_ms, max_ms, true),
                }),
            })
            .collect();
        let bounds = if vouched.is_empty() {
            self.outage(answers, ledger_ms, wall_ms, monotonic_ms)
        } else if vouched.iter().all(|(_, _, lagging)| !lagging) {
            None
        } else {
            let min_ms = vouched.iter().map(|(min, _, _)| *min).min();
            let max_ms = vouched.iter().map(|(_, max, _)| *max).max();
            min_ms.zip(max_ms)
        };
        self.state = match bounds {
            None => State::InStep,
            Some((min_ms, max_ms)) => State::Lagging(Bounds {
                min_ms,
                max_ms,
                monotonic_ms,
            }),
        };
        self.stamped(ledger_ms, monotonic_ms);
    }

    /// What the wall clocks say when nobody can vouch: bounds on real time if they tell of
    /// an outage, `None` otherwise. A clock tells of one when it is more than the skew
    /// ahead of ledger time (a round trip is not counted for this).
    fn outage(
        &self,
        answers: &[PeerReal],
        ledger_ms: u64,
        wall_ms: u64,
        monotonic_ms: u64,
    ) -> Option<(u64, u64)> {
        let peers: Vec<(u64, u64)> = answers
            .iter()
            .map(|a| aged(a, a.wall_ms, a.wall_ms, monotonic_ms))
            .collect();
        let outage_after_ms = ledger_ms.saturating_add(self.skew_ms_max);
        let ahead = peers
            .iter()
            .map(|(wall_ms, _)| *wall_ms)
            .chain([wall_ms])
            .any(|wall_ms| wall_ms > outage_after_ms);
        if !ahead {
            return None;
        }
        let (slowest_ms, fastest_ms) = peers
            .into_iter()
            .chain([(wall_ms, wall_ms)])
            .fold((u64::MAX, 0), |(lo, hi), (min, max)| {
                (lo.min(min), hi.max(max))
            });
        Some((
            slowest_ms.saturating_sub(self.skew_ms_max),
            fastest_ms.saturating_add(self.skew_ms_max),
        ))
    }

    /// Whether ledger time is known to lag real time (for logs).
    pub fn lagging(&self) -> bool {
        matches!(self.state, State::Lagging(_))
    }
}

#[cfg(test)]
mod tests;
