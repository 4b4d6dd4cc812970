//! Ledger time on one node: its [`Clock`] read through the [`StampBound`], fed with the
//! other leaders' stamps as the node learns them.
//!
//! The proposer stamps every replicated command with [`LedgerTime::stamp_ms`]; the
//! sweeper decides what is due with [`LedgerTime::now_ms`]. On every node the Raft
//! service passes on the stamps of arriving entries ([`LedgerTime::observe_received`])
//! and the sweeper the applied state's time ([`LedgerTime::observe_applied`]). After the
//! node starts, before its first proposal, it asks its peers what they know
//! ([`LedgerTime::known`], [`LedgerTime::observe_peer`]; `LedgerNode` does the asking).
//! Nothing else in the node reads a clock for ledger time. A wall clock outside the bound
//! is logged, at most once per [`WARN_INTERVAL_MS`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use ledger_raft_store::LedgerReader;

use crate::clock::ClockRef;
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
    warned_at_ms: Option<u64>,
}

impl LedgerTime {
    /// Ledger time for a node reading `clock`, anchored at the largest ledger time in the
    /// state `reader` shows now (the node's restored state, when it starts).
    pub fn new(clock: ClockRef, reader: LedgerReader, clock_skew_ms_max: u64) -> Self {
        let ledger_ms = reader.read(|l| l.clock_ms());
        let bound = StampBound::new(clock_skew_ms_max, ledger_ms, clock.monotonic_ms());
        LedgerTime {
            inner: Arc::new(Inner {
                clock,
                reader,
                state: Mutex::new(State {
                    bound,
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
        let ledger_ms = self.inner.reader.read(|l| l.clock_ms());
        let monotonic_ms = self.inner.clock.monotonic_ms();
        self.state().bound.observe(ledger_ms, monotonic_ms);
    }

    /// Tells the bound a leader's stamp that just arrived in a Raft message (before it is
    /// committed and applied: a stamp a leader made is bounded whether or not it commits).
    pub fn observe_received(&self, stamped_ms: u64) {
        let monotonic_ms = self.inner.clock.monotonic_ms();
        self.state().bound.observe(stamped_ms, monotonic_ms);
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

    /// Takes a peer's answer to [`LedgerTime::known`]: the largest ledger time it knows
    /// and how long ago (ms) it learned it.
    pub fn observe_peer(&self, ledger_ms: u64, age_ms: u64) {
        self.observe_applied();
        let monotonic_ms = self.inner.clock.monotonic_ms();
        self.state()
            .bound
            .observe_peer(ledger_ms, age_ms, monotonic_ms);
    }

    /// What this node knows, for a peer that asks: the largest ledger time it stamped or
    /// saw, and how long ago (ms) its monotonic clock says that was.
    pub fn known(&self) -> (u64, u64) {
        self.observe_applied();
        let monotonic_ms = self.inner.clock.monotonic_ms();
        self.state().bound.known(monotonic_ms)
    }

    /// Ledger time now, as the next stamp would at least be: for deciding what is due.
    pub fn now_ms(&self) -> u64 {
        self.observe_applied();
        let (wall_ms, monotonic_ms) = (self.inner.clock.wall_ms(), self.inner.clock.monotonic_ms());
        self.state().bound.read(wall_ms, monotonic_ms).at_ms
    }

    /// The time stamp of the next replicated command. Never smaller than an earlier one.
    pub fn stamp_ms(&self) -> u64 {
        self.observe_applied();
        let (wall_ms, monotonic_ms) = (self.inner.clock.wall_ms(), self.inner.clock.monotonic_ms());
        let mut state = self.state();
        let reading = state.bound.stamp(wall_ms, monotonic_ms);
        if reading.clamped {
            let due = state
                .warned_at_ms
                .is_none_or(|at| monotonic_ms.saturating_sub(at) >= WARN_INTERVAL_MS);
            if due {
                state.warned_at_ms = Some(monotonic_ms);
                warn_clamped(&reading, wall_ms, state.bound.skew_ms_max());
            }
        }
        reading.at_ms
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
