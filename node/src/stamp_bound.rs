//! The rule that keeps ledger time from jumping (DESIGN.md section 4, "Time is
//! deterministic"): the leader stamps its wall clock into each replicated command, but a
//! stamp may move ledger time only as far as real time has passed, give or take a bounded
//! skew. A wall clock stepped days ahead therefore cannot expire a lease or collect a
//! record early, and one stepped back cannot stop ledger time.
//!
//! Pure: times go in as arguments, the stamp comes out. The node feeds it its clocks
//! (`crate::ledger_time`); the tests here feed it numbers.
//!
//! # The rule
//!
//! The bound keeps an *anchor*: a ledger time and the reading of this node's monotonic
//! clock at which that ledger time was known to have been reached. From it the monotonic
//! clock *predicts* ledger time now: `anchor_ledger_ms + (monotonic_ms - anchor_monotonic_ms)`.
//! A stamp is the wall clock clamped to the prediction plus or minus `skew_ms_max`, and
//! never below the largest ledger time already stamped or seen:
//!
//! ```text
//! predicted = anchor_ledger_ms + (monotonic_ms - anchor_monotonic_ms)
//! stamp     = max(latest_ms, clamp(wall_ms, predicted - skew_ms_max, predicted + skew_ms_max))
//! ```
//!
//! The anchor is the latest ledger time the node learned from another leader, at the
//! moment it learned it: a follower re-anchors on every newer stamp it receives, so a
//! follower elected leader continues from the last stamp by the real time since (the
//! brief delay of receiving it only holds ledger time back). The anchor does not move with
//! the node's own stamps: re-anchoring on every stamp would grant the skew again each
//! time, and a wall clock days ahead would pull ledger time forward by `skew_ms_max` per
//! entry. So, across any span of real time and any changes of leader, ledger time gains at
//! most `skew_ms_max` per leadership on the real time that passed: a lease runs out at
//! most that much early, whoever stamps.
//!
//! Anchoring on a stamp that lags real time (a leader whose clock was behind) keeps the
//! lag rather than making it up at once: catching up by more than the skew would cut short
//! every lease granted during the lag. The lower clamp keeps ledger time moving at the
//! rate of real time when the leader's wall clock is stepped back: leases still run out,
//! a little late at worst.
//!
//! A node that restarts knows the last stamp on its disk but not how long ago it was made.
//! Before it stamps anything it asks its peers ([`StampBound::observe_peer`]): one that
//! kept running measured, on its own monotonic clock, how long ago it learned the same
//! stamp, and that is real time that passed.
//!
//! # What the rule cannot see
//!
//! A ledger that has never been stamped (a new cluster) has no time to anchor to: its
//! first stamp is the first leader's wall clock as it is, and the bound holds from there.
//!
//! Time that passed while no node's process ran (a whole cluster powered off) is measured
//! by no monotonic clock. After such an outage ledger time lags real time by the outage
//! and catches up by at most `skew_ms_max` per change of leader: leases and retention run
//! out late, never early. Judged by ledger time, a provider horizon would pass late by as
//! much; so stamps also carry bounds on real time, which the wall clocks give after such an
//! outage ([`crate::real_time`]), and horizons are judged by those.
//!
//! # Caller duties
//!
//! 1. Build the bound when the node starts, from the largest ledger time on its disk: in
//!    its snapshot or the last stamp in its log, which is applied again only later
//!    ([`StampBound::new`]; zero when the ledger was never stamped).
//! 2. Pass every stamp of another leader to [`StampBound::observe`] as soon as it arrives
//!    (in a Raft message, before it commits), and the applied state's largest ledger time
//!    whenever entries are applied, with the monotonic clock read then: the later the
//!    observation, the more ledger time lags.
//! 3. After starting, before the first stamp, ask the peers what they know
//!    ([`StampBound::known`] on their side) and pass each answer to
//!    [`StampBound::observe_peer`].
//! 4. Stamp every replicated command with [`StampBound::stamp`]; decide what is due with
//!    [`StampBound::read`], which stamps nothing.

/// A ledger time and the monotonic clock's reading when it was known to have been reached
/// (for a peer's answer, the last stamp plus the time the peer measured since).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Anchor {
    ledger_ms: u64,
    monotonic_ms: u64,
}

impl Anchor {
    /// Ledger time as the monotonic clock predicts it at `monotonic_ms`.
    fn predict(&self, monotonic_ms: u64) -> u64 {
        self.ledger_ms
            .saturating_add(monotonic_ms.saturating_sub(self.monotonic_ms))
    }
}

/// One reading of ledger time from the node's clocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reading {
    /// The ledger time: the stamp, or what the next stamp would at least be.
    pub at_ms: u64,
    /// How far the wall clock was ahead of the predicted ledger time (negative: behind).
    pub wall_ahead_ms: i64,
    /// Whether the wall clock lay outside the bound and was not used as it was.
    pub clamped: bool,
}

/// The bound on how fast ledger time may advance on one node. See the module docs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StampBound {
    skew_ms_max: u64,
    /// `None` until the ledger has a time (it was never stamped).
    anchor: Option<Anchor>,
    latest_ms: u64,
}

impl StampBound {
    /// A bound anchored at `ledger_ms`, the largest ledger time in the applied state, read
    /// at `monotonic_ms`; zero when the ledger was never stamped.
    pub fn new(skew_ms_max: u64, ledger_ms: u64, monotonic_ms: u64) -> Self {
        StampBound {
            skew_ms_max,
            anchor: (ledger_ms > 0).then_some(Anchor {
                ledger_ms,
                monotonic_ms,
            }),
            latest_ms: ledger_ms,
        }
    }

    /// The largest ledger time stamped or observed so far.
    pub fn latest_ms(&self) -> u64 {
        self.latest_ms
    }

    /// The largest skew allowed (ms).
    pub fn skew_ms_max(&self) -> u64 {
        self.skew_ms_max
    }

    /// Learns that ledger time reached `ledger_ms` by `monotonic_ms` (the applied state
    /// holds it). A time no larger than what this node stamped or saw is not news: it may
    /// be this node's own stamp, which must not widen the bound. A larger one came from
    /// another leader and becomes the anchor, ahead of the prediction or behind it.
    pub fn observe(&mut self, ledger_ms: u64, monotonic_ms: u64) {
        if ledger_ms <= self.latest_ms {
            return;
        }
        self.latest_ms = ledger_ms;
        self.anchor = Some(Anchor {
            ledger_ms,
            monotonic_ms,
        });
    }

    /// Learns from a peer, at `monotonic_ms`, that the largest ledger time it knows is
    /// `ledger_ms` and that it learned it `age_ms` ago by its own monotonic clock. A peer
    /// that knows an older stamp than this node is not news. One that knows a newer stamp,
    /// or the same stamp for longer than this node's prediction accounts for (this node
    /// restarted since), gives the anchor: the stamp plus the real time since.
    pub fn observe_peer(&mut self, ledger_ms: u64, age_ms: u64, monotonic_ms: u64) {
        // Zero: the peer knows no ledger time (the ledger was never stamped).
        if ledger_ms == 0 || ledger_ms < self.latest_ms {
            return;
        }
        let candidate = Anchor {
            ledger_ms: ledger_ms.saturating_add(age_ms),
            monotonic_ms,
        };
        let ahead = self
            .anchor
            .is_none_or(|anchor| candidate.ledger_ms > anchor.predict(monotonic_ms));
        if ledger_ms > self.latest_ms || ahead {
            self.latest_ms = ledger_ms;
            self.anchor = Some(candidate);
        }
    }

    /// What this node knows, for a peer's [`StampBound::observe_peer`]: the largest ledger
    /// time it stamped or saw, and how much real time its prediction says has passed since
    /// (zero when it knows no time yet, or stamped ahead of its prediction).
    pub fn known(&self, monotonic_ms: u64) -> (u64, u64) {
        let age_ms = self.anchor.map_or(0, |anchor| {
            anchor.predict(monotonic_ms).saturating_sub(self.latest_ms)
        });
        (self.latest_ms, age_ms)
    }

    /// Ledger time now, from the wall clock within the bound; stamps nothing.
    pub fn read(&self, wall_ms: u64, monotonic_ms: u64) -> Reading {
        let Some(anchor) = self.anchor else {
            // Nothing to bound against yet: the ledger's first time is the wall clock.
            return Reading {
                at_ms: self.latest_ms.max(wall_ms),
                wall_ahead_ms: 0,
                clamped: false,
            };
        };
        let predicted = anchor.predict(monotonic_ms);
        let low = predicted.saturating_sub(self.skew_ms_max);
        let high = predicted.saturating_add(self.skew_ms_max);
        let bounded = wall_ms.clamp(low, high);
        let wall_ahead_ms = if wall_ms >= predicted {
            i64::try_from(wall_ms - predicted).unwrap_or(i64::MAX)
        } else {
            i64::try_from(predicted - wall_ms).map_or(i64::MIN, |behind| -behind)
        };
        Reading {
            at_ms: self.latest_ms.max(bounded),
            wall_ahead_ms,
            clamped: bounded != wall_ms,
        }
    }

    /// Stamps a replicated command: [`StampBound::read`], remembered so that no later
    /// stamp is smaller.
    pub fn stamp(&mut self, wall_ms: u64, monotonic_ms: u64) -> Reading {
        let reading = self.read(wall_ms, monotonic_ms);
        self.latest_ms = reading.at_ms;
        if self.anchor.is_none() {
            self.anchor = Some(Anchor {
                ledger_ms: reading.at_ms,
                monotonic_ms,
            });
        }
        reading
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SKEW_MS: u64 = 2_000;
    const DAY_MS: u64 = 24 * 60 * 60 * 1000;
    /// Some ledger time in 2026.
    const T0: u64 = 1_780_000_000_000;

    #[test]
    fn a_wall_clock_in_step_is_stamped_as_it_is() {
        let mut bound = StampBound::new(SKEW_MS, T0, 500);
        for step in 1..=100u64 {
            let reading = bound.stamp(T0 + step * 10 + 3, 500 + step * 10);
            assert_eq!(reading.at_ms, T0 + step * 10 + 3);
            assert!(!reading.clamped);
        }
    }

    #[test]
    fn wall_days_ahead_advances_ledger_time_only_by_elapsed_plus_skew() {
        let mut bound = StampBound::new(SKEW_MS, T0, 0);
        // One stamp every 10 ms for 60 s, the wall clock eight days ahead throughout: the
        // skew is granted once, not once per stamp.
        for elapsed_ms in (10..=60_000u64).step_by(10) {
            let reading = bound.stamp(T0 + 8 * DAY_MS + elapsed_ms, elapsed_ms);
            assert_eq!(reading.at_ms, T0 + elapsed_ms + SKEW_MS);
            assert!(reading.clamped);
            assert!(reading.wall_ahead_ms >= (8 * DAY_MS) as i64);
        }
        // Its own stamps, seen again in the applied state, do not widen the bound.
        bound.observe(bound.latest_ms(), 60_000);
        let reading = bound.stamp(T0 + 8 * DAY_MS, 61_000);
        assert_eq!(reading.at_ms, T0 + 61_000 + SKEW_MS);
    }

    #[test]
    fn wall_going_backwards_never_moves_a_stamp_back() {
        let mut bound = StampBound::new(SKEW_MS, T0, 0);
        let before = bound.stamp(T0 + 1_000, 1_000).at_ms;
        assert_eq!(before, T0 + 1_000);
        let mut last = before;
        // The wall clock steps back an hour; real time goes on.
        for elapsed_ms in (1_010..=30_000u64).step_by(10) {
            let reading = bound.stamp(T0 - 60 * 60 * 1000 + elapsed_ms, elapsed_ms);
            assert!(reading.at_ms >= last, "ledger time went back");
            last = reading.at_ms;
        }
        // Ledger time kept moving with real time, at most the skew behind.
        assert_eq!(last, T0 + 30_000 - SKEW_MS);
    }

    #[test]
    fn a_new_leader_inherits_the_bound() {
        // A follower applies the old leader's stamps as they come.
        let mut follower = StampBound::new(SKEW_MS, T0, 7_000);
        for i in 1..=50u64 {
            follower.observe(T0 + i * 100, 7_000 + i * 100);
        }
        // It is elected 300 ms after the last one, its wall clock eight days ahead: it may
        // go no further than the old leader's last stamp, the time since, and the skew.
        let reading = follower.stamp(T0 + 8 * DAY_MS, 7_000 + 5_000 + 300);
        assert_eq!(reading.at_ms, T0 + 5_000 + 300 + SKEW_MS);
    }

    #[test]
    fn a_restarted_node_counts_from_the_time_on_its_disk() {
        // Started with the largest ledger time of its restored state, a wall clock a day
        // ahead, and a monotonic clock that began again at zero.
        let mut bound = StampBound::new(SKEW_MS, T0, 0);
        assert_eq!(bound.stamp(T0 + DAY_MS, 400).at_ms, T0 + 400 + SKEW_MS);
    }

    #[test]
    fn a_follower_anchors_on_the_latest_stamp_it_applied() {
        let mut node = StampBound::new(SKEW_MS, T0, 0);
        // Another leader ran the skew ahead: this node learns it, and may add its own.
        node.observe(T0 + 1_000 + SKEW_MS, 1_000);
        assert_eq!(
            node.read(T0 + DAY_MS, 2_000).at_ms,
            T0 + 2_000 + 2 * SKEW_MS
        );
        // A leader whose stamps lag real time by a minute: ledger time keeps the lag (a
        // correct wall clock catches up only the skew), so that no lease granted during
        // the lag is cut short.
        node.observe(T0 + 50_000 - 60_000, 50_000);
        assert_eq!(node.latest_ms(), T0 + 1_000 + SKEW_MS, "not news: older");
        node.observe(T0 + 70_000 - 60_000, 70_000);
        assert_eq!(
            node.read(T0 + 71_000, 71_000),
            Reading {
                at_ms: T0 + 11_000 + SKEW_MS,
                wall_ahead_ms: 60_000,
                clamped: true,
            }
        );
    }

    #[test]
    fn a_restarted_node_learns_from_a_peer_how_much_time_passed() {
        // A node restarts ten minutes after the last stamp on its disk, which a peer that
        // kept running applied then.
        let peer = StampBound::new(SKEW_MS, T0, 5_000);
        let answer = peer.known(5_000 + 600_000);
        assert_eq!(answer, (T0, 600_000));
        let mut restarted = StampBound::new(SKEW_MS, T0, 30);
        restarted.observe_peer(answer.0, answer.1, 80);
        // A peer that learned the same stamp more recently, or knows only an older one,
        // or none, teaches nothing.
        let before = restarted.clone();
        restarted.observe_peer(T0, 1_000, 90);
        restarted.observe_peer(T0 - 1, DAY_MS, 90);
        restarted.observe_peer(0, 0, 90);
        assert_eq!(restarted, before);
        let mut new = StampBound::new(SKEW_MS, 0, 0);
        new.observe_peer(0, 0, 10);
        assert_eq!(
            new.stamp(T0, 20).at_ms,
            T0,
            "a new ledger's first time is the wall clock"
        );
        assert_eq!(restarted.stamp(T0 + 600_100, 130).at_ms, T0 + 600_100);
        assert_eq!(
            restarted.stamp(T0 + DAY_MS, 140).at_ms,
            T0 + 600_060 + SKEW_MS
        );
    }

    #[test]
    fn a_new_ledger_takes_its_first_time_from_the_wall_clock_then_bounds_it() {
        let mut bound = StampBound::new(SKEW_MS, 0, 40);
        assert_eq!(bound.read(T0, 40).at_ms, T0);
        assert_eq!(bound.stamp(T0, 50).at_ms, T0);
        assert_eq!(bound.stamp(T0 + DAY_MS, 1_050).at_ms, T0 + 1_000 + SKEW_MS);
        // A follower of a new cluster anchors at the first time it learns.
        let mut follower = StampBound::new(SKEW_MS, 0, 0);
        follower.observe(T0, 70);
        assert_eq!(
            follower.stamp(T0 + DAY_MS, 1_070).at_ms,
            T0 + 1_000 + SKEW_MS
        );
    }

    #[test]
    fn reading_stamps_nothing() {
        let mut bound = StampBound::new(SKEW_MS, T0, 0);
        let read = bound.read(T0 + 500, 500);
        assert_eq!(bound.latest_ms(), T0);
        assert_eq!(bound.stamp(T0 + 500, 500), read);
        assert_eq!(bound.latest_ms(), T0 + 500);
    }

    #[test]
    fn extreme_values_saturate() {
        let mut bound = StampBound::new(u64::MAX, u64::MAX - 5, 0);
        let reading = bound.stamp(u64::MAX, u64::MAX);
        assert_eq!(reading.at_ms, u64::MAX);
        let mut bound = StampBound::new(SKEW_MS, 1, 0);
        assert_eq!(bound.stamp(0, 10).at_ms, 1);
    }
}
