//! Each ledger machine's own clock, over the simulator's single one.
//!
//! madsim keeps one clock for every machine of a run: `madsim::time::advance` moves them
//! all at once, wall and monotonic alike, as if real time had passed for everyone. That
//! cannot model one machine whose wall clock is wrong, so the harness wraps it: each node
//! reads a [`SimClock`] (handed to `ledger_node::start_with_clock`) that adds to the
//! simulator's clock
//! - a wall clock offset, set at the start (machines never agree exactly) and stepped by
//!   faults (an operator or a broken NTP setting the date days ahead, or back);
//! - a drift: an oscillator running fast or slow, which moves the wall and the monotonic
//!   clock alike (so no bound on ledger time can notice it; only its size is bounded).
//!
//! The clock lives outside the simulated machine, like its disk, so a restarted node reads
//! the same wrong clock it crashed with. The monotonic clock never goes back, whatever
//! faults do.

use std::sync::{Arc, Mutex};
use std::time::UNIX_EPOCH;

use madsim::time::TimeHandle;

use ledger_node::Clock;

/// One machine's clock. Faults change it while the node runs.
#[derive(Debug, Default)]
pub struct SimClock {
    state: Mutex<State>,
}

#[derive(Debug, Default, Clone, Copy)]
struct State {
    /// Added to the simulator's wall clock (ms).
    wall_offset_ms: i64,
    /// Drift rate in parts per million (positive: fast).
    drift_ppm: i64,
    /// Simulated elapsed time at which the current drift rate began (ms).
    drift_since_ms: u64,
    /// Drift accumulated before `drift_since_ms` (ms).
    drifted_ms: i64,
}

impl State {
    fn drift_at(&self, elapsed_ms: u64) -> i64 {
        let span = i128::from(elapsed_ms.saturating_sub(self.drift_since_ms));
        let drift = span * i128::from(self.drift_ppm) / 1_000_000;
        self.drifted_ms + drift as i64
    }
}

/// The simulator's clock: elapsed time since the run began, and the wall clock (ms).
fn simulator_now() -> (u64, u64) {
    let time = TimeHandle::current();
    let elapsed_ms = time.elapsed().as_millis() as u64;
    let wall_ms = time
        .now_time()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    (elapsed_ms, wall_ms)
}

fn add(ms: u64, delta: i64) -> u64 {
    ms.saturating_add_signed(delta)
}

impl SimClock {
    /// A clock whose wall clock is `wall_offset_ms` off the simulator's, without drift.
    pub fn with_offset(wall_offset_ms: i64) -> Arc<SimClock> {
        let clock = SimClock::default();
        clock.lock().wall_offset_ms = wall_offset_ms;
        Arc::new(clock)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("clock lock")
    }

    /// Steps the wall clock by `delta_ms` (negative: back). The monotonic clock is not
    /// affected, as when a machine's date is set.
    pub fn step_wall(&self, delta_ms: i64) {
        self.lock().wall_offset_ms += delta_ms;
    }

    /// Makes the oscillator run `ppm` parts per million fast (negative: slow) from now.
    pub fn set_drift(&self, ppm: i64) {
        assert!(ppm > -1_000_000, "a clock cannot run backwards");
        let (elapsed_ms, _) = simulator_now();
        let mut state = self.lock();
        state.drifted_ms = state.drift_at(elapsed_ms);
        state.drift_since_ms = elapsed_ms;
        state.drift_ppm = ppm;
    }

    /// Ends every fault: no more drift, and the wall clock set back to the simulator's
    /// plus `wall_offset_ms` (its offset from the start). The monotonic clock keeps what
    /// it drifted, since it may not go back.
    pub fn correct(&self, wall_offset_ms: i64) {
        self.set_drift(0);
        let mut state = self.lock();
        state.wall_offset_ms = wall_offset_ms - state.drifted_ms;
    }

    /// How far the wall clock is off the simulator's now (ms).
    pub fn wall_error_ms(&self) -> i64 {
        let (elapsed_ms, _) = simulator_now();
        let state = *self.lock();
        state.wall_offset_ms + state.drift_at(elapsed_ms)
    }
}

impl Clock for SimClock {
    fn wall_ms(&self) -> u64 {
        let (elapsed_ms, wall_ms) = simulator_now();
        let state = *self.lock();
        add(wall_ms, state.wall_offset_ms + state.drift_at(elapsed_ms))
    }

    fn monotonic_ms(&self) -> u64 {
        let (elapsed_ms, _) = simulator_now();
        add(elapsed_ms, self.lock().drift_at(elapsed_ms))
    }
}
