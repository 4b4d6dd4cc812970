//! Ledger time on one node: its [`Clock`] read through the [`StampBound`], fed with the
//! other leaders' stamps as the node learns them, and what the node knows of real time
//! beyond it ([`RealTimeBound`]).
//!
//! The proposer stamps every replicated command with [`LedgerTime::stamp`] (ledger time,
//! and bounds on real time for provider horizons); the sweeper decides what is due with
//! [`LedgerTime::now_ms`]. On every node the Raft service passes on the stamps of
//! arriving entries ([`LedgerTime::observe_received`]) and the sweeper the applied
//! state's time ([`LedgerTime::observe_applied`]). After the node starts, before its
//! first proposal, it asks its peers what they know ([`LedgerTime::clocks`],
//! [`LedgerTime::settle`]; `LedgerNode` does the asking). Nothing else in the node reads
//! a clock for ledger time. A wall clock outside the bound is logged, at most once per
//! [`WARN_INTERVAL_MS`], and so is a lag found when settling.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use ledger_core::Stamp;
use ledger_raft_store::LedgerReader;
use serde::{Deserialize, Serialize};

use crate::clock::ClockRef;
use crate::real_time::{PeerReal, RealTimeBound, RealView};
use crate::stamp_bound::{Reading, StampBound};

/// Shortest time between two warnings about the wall clock (ms, monotonic).
pub const WARN_INTERVAL_MS: u64 = 10_000;

/// The node's source of ledger time. Cheap to clone; clones share one bound.
#[derive(Clone)]
pub struct LedgerTime {
    inner: Arc<Inner>,
}

struct Inner {
    clock: ClockRef,
    reader: LedgerReader,
    state: Mutex<State>,
    /// Whether the peers have been asked since the node started.
    peers_asked: AtomicBool,
}

struct State {
    bound: StampBound,
    real: RealTimeBound,
    warned_at_ms: Option<u64>,
}

/// What a node knows of time, for a peer that asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerClocks {
    /// The largest ledger time it stamped or saw (ms).
    pub ledger_ms: u64,
    /// How long ago it learned it, by its monotonic clock (ms).
    pub age_ms: u64,
    /// Its wall clock (ms).
    pub wall_ms: u64,
    /// What it vouches for about real time.
    pub real: RealView,
}

/// A peer's [`PeerClocks`] as this node received them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerAnswer {
    /// The answer.
    pub clocks: PeerClocks,
    /// This node's monotonic clock when the question was sent ([`LedgerTime::monotonic_ms`]).
    pub asked_at_ms: u64,
    /// This node's monotonic clock when the answer arrived.
    pub received_at_ms: u64,
}

/// Stamps a command from the two bounds and the clocks read now: ledger time from `bound`,
/// real time from `real` at that ledger time. Also returns the ledger time reading.
pub(crate) fn stamp_with(
    bound: &mut StampBound,
    real: &mut RealTimeBound,
    wall_ms: u64,
    monotonic_ms: u64,
) -> (Stamp, Reading) {
    let reading = bound.stamp(wall_ms, monotonic_ms);
    let (real_ms_min, real_ms_max) = real.read(reading.at_ms, wall_ms, monotonic_ms);
    real.stamped(reading.at_ms, monotonic_ms);
    let stamp = Stamp {
        ledger_ms: reading.at_ms,
        real_ms_min,
        real_ms_max,
    };
    (stamp, reading)
}

impl LedgerTime {
    /// Ledger time for a node reading `clock`, anchored at the largest ledger time its
    /// disk knows when it starts: the state `reader` shows (its snapshot) or `logged_ms`,
    /// the latest stamp in its log (applied again only later).
    pub fn new(
        clock: ClockRef,
        reader: LedgerReader,
        logged_ms: u64,
        clock_skew_ms_max: u64,
    ) -> Self {
        // An unreadable state stops the state machine before any stamp matters; the
        // log's latest stamp is then the best known.
        let ledger_ms = reader.read(|l| l.clock_ms()).unwrap_or(0).max(logged_ms);
        let bound = StampBound::new(clock_skew_ms_max, ledger_ms, clock.monotonic_ms());
        let real = RealTimeBound::new(clock_skew_ms_max);
        LedgerTime {
            inner: Arc::new(Inner {
                clock,
                reader,
                state: Mutex::new(State {
                    bound,
                    real,
                    warned_at_ms: None,
                }),
                peers_asked: AtomicBool::new(false),
            }),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // Nothing panics while holding the lock (pure arithmetic), so a poisoned lock
        // holds a consistent bound.
        self.inner
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Tells the bound the largest ledger time of the applied state, as of now.
    pub fn observe_applied(&self) {
        let Ok(ledger_ms) = self.inner.reader.read(|l| l.clock_ms()) else {
            return;
        };
        let monotonic_ms = self.inner.clock.monotonic_ms();
        self.state().bound.observe(ledger_ms, monotonic_ms);
    }

    /// Tells the bounds a leader's stamp that just arrived in a Raft message (before it is
    /// committed and applied: a stamp a leader made is bounded whether or not it commits);
    /// `current_term` says the sending leader made it in its current term.
    pub fn observe_received(&self, stamp: &Stamp, current_term: bool) {
        let monotonic_ms = self.inner.clock.monotonic_ms();
        let mut state = self.state();
        state.bound.observe(stamp.ledger_ms, monotonic_ms);
        state.real.observe(stamp, current_term, monotonic_ms);
    }

    /// Whether the peers still have to be asked what they know (once after starting,
    /// before the first proposal).
    pub fn peers_unasked(&self) -> bool {
        !self.inner.peers_asked.load(Ordering::Acquire)
    }

    /// Records that the peers were asked (whether or not any answered).
    pub fn peers_asked(&self) {
        self.inner.peers_asked.store(true, Ordering::Release);
    }

    /// This node's monotonic clock (ms), for timing the questions to its peers.
    pub fn monotonic_ms(&self) -> u64 {
        self.inner.clock.monotonic_ms()
    }

    /// Takes the peers' answers to [`LedgerTime::clocks`] (possibly none): each one's
    /// ledger time for the bound, and all of them together for what is known of real
    /// time (see `real_time`).
    pub fn settle(&self, answers: &[PeerAnswer]) {
        self.observe_applied();
        let (wall_ms, monotonic_ms) = (self.inner.clock.wall_ms(), self.inner.clock.monotonic_ms());
        let mut state = self.state();
        for answer in answers {
            let clocks = &answer.clocks;
            let age_ms = clocks
                .age_ms
                .saturating_add(monotonic_ms.saturating_sub(answer.received_at_ms));
            state
                .bound
                .observe_peer(clocks.ledger_ms, age_ms, monotonic_ms);
        }
        let peers: Vec<PeerReal> = answers
            .iter()
            .map(|a| PeerReal {
                view: a.clocks.real,
                wall_ms: a.clocks.wall_ms,
                received_at_ms: a.received_at_ms,
                round_trip_ms: a.received_at_ms.saturating_sub(a.asked_at_ms),
            })
            .collect();
        let ledger_ms = state.bound.read(wall_ms, monotonic_ms).at_ms;
        state.real.settle(&peers, ledger_ms, wall_ms, monotonic_ms);
        if state.real.lagging() {
            let (real_ms_min, real_ms_max) = state.real.read(ledger_ms, wall_ms, monotonic_ms);
            tracing::warn!(
                ledger_ms,
                real_ms_min,
                real_ms_max,
                answers = answers.len(),
                "ledger time lags real time after an outage no running node measured: leases \
                 and retention follow ledger time (they run out late), provider horizons are \
                 judged by the real time the clocks tell"
            );
        }
    }

    /// What this node knows, for a peer that asks: the largest ledger time it stamped or
    /// saw, and how long ago (ms) its monotonic clock says that was.
    pub fn known(&self) -> (u64, u64) {
        self.observe_applied();
        let monotonic_ms = self.inner.clock.monotonic_ms();
        self.state().bound.known(monotonic_ms)
    }

    /// What this node knows of time, for a peer that asks: [`LedgerTime::known`], its wall
    /// clock and what it vouches for about real time.
    pub fn clocks(&self) -> PeerClocks {
        self.observe_applied();
        let (wall_ms, monotonic_ms) = (self.inner.clock.wall_ms(), self.inner.clock.monotonic_ms());
        let state = self.state();
        let (ledger_ms, age_ms) = state.bound.known(monotonic_ms);
        PeerClocks {
            ledger_ms,
            age_ms,
            wall_ms,
            real: state.real.view(monotonic_ms),
        }
    }

    /// Ledger time now, as the next stamp would at least be: for deciding what is due.
    pub fn now_ms(&self) -> u64 {
        self.observe_applied();
        let (wall_ms, monotonic_ms) = (self.inner.clock.wall_ms(), self.inner.clock.monotonic_ms());
        self.state().bound.read(wall_ms, monotonic_ms).at_ms
    }

    /// The stamp of the next replicated command: ledger time, never smaller than an
    /// earlier one, and the bounds on real time at it.
    pub fn stamp(&self) -> Stamp {
        self.observe_applied();
        let (wall_ms, monotonic_ms) = (self.inner.clock.wall_ms(), self.inner.clock.monotonic_ms());
        let mut state = self.state();
        let State { bound, real, .. } = &mut *state;
        let (stamp, reading) = stamp_with(bound, real, wall_ms, monotonic_ms);
        if reading.clamped {
            let due = state
                .warned_at_ms
                .is_none_or(|at| monotonic_ms.saturating_sub(at) >= WARN_INTERVAL_MS);
            if due {
                state.warned_at_ms = Some(monotonic_ms);
                warn_clamped(&reading, wall_ms, state.bound.skew_ms_max());
            }
        }
        stamp
    }
}

fn warn_clamped(reading: &Reading, wall_ms: u64, skew_ms_max: u64) {
    let direction = if reading.wall_ahead_ms > 0 {
        "ahead of"
    } else {
        "behind"
    };
    tracing::warn!(
        wall_ms,
        stamp_ms = reading.at_ms,
        wall_ahead_ms = reading.wall_ahead_ms,
        clock_skew_ms_max = skew_ms_max,
        "this node's wall clock is {} ms {direction} the time its monotonic clock says has \
         passed, more than clock_skew_ms_max: ledger time follows the monotonic clock \
         instead (leases and retention are not cut short); check NTP on this machine",
        reading.wall_ahead_ms.unsigned_abs(),
    );
}
