use super::*;
use crate::ledger_time::stamp_with;
use crate::stamp_bound::StampBound;

const SKEW_MS: u64 = 2_000;
const DAY_MS: u64 = 24 * 60 * 60 * 1000;
/// The last stamp before every node went down (some time in 2026).
const T0: u64 = 1_780_000_000_000;
/// How long every node was down: no monotonic clock measured it.
const OUTAGE_MS: u64 = 3 * 60 * 60 * 1000;
/// Real time when the restarted nodes settle.
const REAL_MS: u64 = T0 + OUTAGE_MS;
/// The monotonic clock of the restarted node when it settles.
const SETTLED_AT_MS: u64 = 700;

fn unmeasured_peer(wall_ms: u64) -> PeerReal {
    PeerReal {
        view: RealView::Unmeasured,
        wall_ms,
        received_at_ms: SETTLED_AT_MS,
        round_trip_ms: 0,
    }
}

/// A node restarted from a disk whose last stamp is `T0`.
fn restarted() -> RealTimeBound {
    RealTimeBound::new(SKEW_MS)
}

#[test]
fn after_a_cold_start_the_upper_bound_covers_the_outage_whatever_clock_is_slow() {
    // Every clock is behind real time by almost the skew: the fastest plus the skew is
    // still not before real time.
    let slow_ms = SKEW_MS - 1;
    let mut real = restarted();
    let peers = [
        unmeasured_peer(REAL_MS - slow_ms),
        unmeasured_peer(REAL_MS - slow_ms),
    ];
    real.settle(&peers, T0 + 100, REAL_MS - slow_ms, SETTLED_AT_MS);
    let ledger_ms = T0 + 100;
    let (min_ms, max_ms) = real.read(ledger_ms, REAL_MS - slow_ms, SETTLED_AT_MS);
    assert!(max_ms >= REAL_MS, "upper bound {max_ms} before real time");
    assert!(min_ms <= REAL_MS, "lower bound {min_ms} after real time");
    assert!(min_ms >= REAL_MS - 2 * SKEW_MS);
    // Both move on with the monotonic clock, whatever the wall clock does next.
    let (min_later, max_later) = real.read(ledger_ms + 500, 0, SETTLED_AT_MS + 60_000);
    assert_eq!((min_later, max_later), (min_ms + 60_000, max_ms + 60_000));
}

#[test]
fn any_clock_that_answered_can_raise_the_upper_bound_but_not_the_lower() {
    // The restarted leader's own clock is behind by a day; a peer's is right and another
    // is ten days ahead.
    let mut real = restarted();
    let peers = [
        unmeasured_peer(REAL_MS),
        unmeasured_peer(REAL_MS + 10 * DAY_MS),
    ];
    real.settle(&peers, T0 + 100, REAL_MS - DAY_MS, SETTLED_AT_MS);
    let (min_ms, max_ms) = real.read(T0 + 100, REAL_MS - DAY_MS, SETTLED_AT_MS);
    assert_eq!(max_ms, REAL_MS + 10 * DAY_MS + SKEW_MS);
    // The slowest clock minus the skew is before the last stamp: horizons start at
    // ledger time, as they would without the outage.
    assert_eq!(min_ms, T0 + 100);
}

#[test]
fn a_peers_answer_counts_its_round_trip_and_its_age() {
    let mut real = restarted();
    let peer = PeerReal {
        view: RealView::Unmeasured,
        wall_ms: REAL_MS,
        received_at_ms: SETTLED_AT_MS - 300,
        round_trip_ms: 40,
    };
    real.settle(&[peer], T0, REAL_MS - SKEW_MS, SETTLED_AT_MS);
    let (_, max_ms) = real.read(T0, 0, SETTLED_AT_MS);
    assert_eq!(max_ms, REAL_MS + 300 + 40 + SKEW_MS);
}

#[test]
fn with_nobody_answering_the_own_clock_decides() {
    let mut real = restarted();
    real.settle(&[], T0, REAL_MS - SKEW_MS + 1, SETTLED_AT_MS);
    let (_, max_ms) = real.read(T0, 0, SETTLED_AT_MS);
    assert_eq!(max_ms, REAL_MS + 1);
    assert!(real.lagging());
}

#[test]
fn a_restart_a_running_peer_measured_stays_in_step_whatever_the_wall_clock() {
    let mut real = restarted();
    let peers = [
        unmeasured_peer(REAL_MS + 8 * DAY_MS),
        PeerReal {
            view: RealView::InStep,
            ..unmeasured_peer(REAL_MS)
        },
    ];
    real.settle(&peers, T0 + 5, REAL_MS + 8 * DAY_MS, SETTLED_AT_MS);
    assert_eq!(real.view(SETTLED_AT_MS), RealView::InStep);
    assert_eq!(
        real.read(T0 + 5, T0 + 5, SETTLED_AT_MS),
        (T0 + 5, T0 + 5 + SKEW_MS),
        "in step: ledger time, and ledger time plus the skew"
    );
    // Its own wall clock eight days ahead still raises the upper bound it stamps (every
    // horizon passes early: reconciled or escalated, never re-sent), marked as its own,
    // and nothing else.
    assert_eq!(
        real.read(T0 + 5, REAL_MS + 8 * DAY_MS, SETTLED_AT_MS),
        (T0 + 4, REAL_MS + 8 * DAY_MS + SKEW_MS),
    );
    assert_eq!(real.view(SETTLED_AT_MS), RealView::InStep);
}

/// Seed 2653 of the randomized simulation: a follower received its leader's stamp 26 s
/// after it was made (the entry was on its way while every machine paused), anchored
/// ledger time on it, and was elected. Its ledger time then lagged real time by 26 s
/// while it was in step, and with the upper bound at ledger time plus the skew a keyed
/// refund was re-sent 32 s after the provider first saw its key, 2 s after the provider
/// forgot it: two refunds. Its wall clock knew better.
#[test]
fn a_stamp_received_late_leaves_the_leaders_wall_clock_above_real_time() {
    const PAUSE_MS: u64 = 26_000;
    // The stamp was made at T0 and received, in step, after the pause.
    let mut bound = StampBound::new(SKEW_MS, 0, 0);
    let mut real = RealTimeBound::new(SKEW_MS);
    let received_at_ms = 1_000 + PAUSE_MS;
    bound.observe(T0, received_at_ms);
    real.observe(&Stamp::at(T0), true, received_at_ms);
    assert_eq!(real.view(received_at_ms), RealView::InStep);
    // Elected 3 s later, it stamps with a wall clock that is right.
    let now_ms = received_at_ms + 3_000;
    let real_now_ms = T0 + PAUSE_MS + 3_000;
    let (stamp, reading) = stamp_with(&mut bound, &mut real, real_now_ms, now_ms);
    assert!(reading.clamped, "ledger time is held to the late anchor");
    assert!(
        stamp.ledger_ms <= real_now_ms - PAUSE_MS + SKEW_MS,
        "ledger time lags by the pause: {stamp:?}"
    );
    assert!(
        stamp.real_ms_max >= real_now_ms,
        "the upper bound {} is before real time {real_now_ms}",
        stamp.real_ms_max
    );
    assert_eq!(
        stamp.real_ms_min,
        stamp.ledger_ms - 1,
        "horizons start no later; the upper bound is marked as the wall clock's"
    );
}

/// The stamp of a leader lagging after a cold start in which one answering clock was
/// hours behind: the lower bound is held at ledger time, the upper bound is real time
/// plus the skew.
fn cold_start_lag() -> Stamp {
    Stamp {
        ledger_ms: T0,
        real_ms_min: T0,
        real_ms_max: REAL_MS + SKEW_MS,
    }
}

/// A lag after a cold start whose lower bound one slow clock held at ledger time raises
/// only the upper bound, as a leader's wall clock ahead does; the stamp tells them apart
/// by its lower bound. The lag is carried on, so that a later leader whose own clock is
/// behind still judges horizons by it.
#[test]
fn a_lag_with_its_lower_bound_at_ledger_time_is_carried_on() {
    let mut follower = RealTimeBound::new(SKEW_MS);
    let lag = cold_start_lag();
    follower.observe(&lag, true, 1_000);
    assert!(follower.lagging());
    // Elected with its own wall clock still at the old ledger time (hours behind), it
    // stamps the upper bound it learned, moved on by its monotonic clock.
    assert_eq!(
        follower.read(T0 + 10, T0 + 10, 1_010),
        (T0 + 10, REAL_MS + SKEW_MS + 10)
    );
}

/// A leader whose wall clock is days ahead stamps it as the upper bound, marked as its own
/// witness; its followers stay in step, so once another node leads (or its clock is put
/// right) horizons are judged by that node's clocks again, not days early on every node.
#[test]
fn a_leaders_wall_clock_ahead_is_its_own_witness_not_a_lag_to_carry() {
    let mut leader = RealTimeBound::new(SKEW_MS);
    leader.settle(&[], T0, T0, 1_000);
    assert_eq!(leader.view(1_000), RealView::InStep);
    let (min_ms, max_ms) = leader.read(T0 + 10, T0 + 8 * DAY_MS, 1_010);
    assert_eq!(
        (min_ms, max_ms),
        (T0 + 9, T0 + 8 * DAY_MS + SKEW_MS),
        "the raise is marked by a lower bound one below ledger time"
    );
    let stamp = Stamp {
        ledger_ms: T0 + 10,
        real_ms_min: min_ms,
        real_ms_max: max_ms,
    };
    let mut follower = RealTimeBound::new(SKEW_MS);
    follower.observe(&stamp, true, 1_010);
    assert_eq!(follower.view(1_010), RealView::InStep);
    // Elected with a right clock, it stamps ledger time plus the skew again.
    assert_eq!(
        follower.read(T0 + 20, T0 + 20, 1_020),
        (T0 + 20, T0 + 20 + SKEW_MS)
    );
    // A node already lagging keeps its own lag.
    let mut lagging = RealTimeBound::new(SKEW_MS);
    let lag = cold_start_lag();
    lagging.observe(&lag, true, 1_000);
    lagging.observe(&stamp, true, 1_010);
    assert_eq!(
        lagging.view(1_010),
        RealView::Lagging {
            min_ms: T0 + 10,
            max_ms: REAL_MS + SKEW_MS + 10,
        }
    );
    // A leader that knows of a lag and whose wall clock is further ahead still stamps
    // the larger upper bound as a lag: the stamp cannot say which part is which.
    assert_eq!(
        lagging.read(T0 + 20, T0 + 8 * DAY_MS, 1_020),
        (T0 + 20, T0 + 8 * DAY_MS + SKEW_MS)
    );
}

#[test]
fn a_lag_a_peer_vouches_for_is_inherited() {
    let mut real = restarted();
    let lagging = PeerReal {
        view: RealView::Lagging {
            min_ms: REAL_MS - 3_000,
            max_ms: REAL_MS + 3_000,
        },
        wall_ms: 0,
        received_at_ms: SETTLED_AT_MS,
        round_trip_ms: 20,
    };
    real.settle(
        &[lagging, unmeasured_peer(REAL_MS + DAY_MS)],
        T0,
        0,
        SETTLED_AT_MS,
    );
    assert_eq!(
        real.view(SETTLED_AT_MS + 10),
        RealView::Lagging {
            min_ms: REAL_MS - 3_000 + 10,
            max_ms: REAL_MS + 3_000 + 20 + 10,
        },
        "the unmeasured peer's wall clock is not a witness when another can vouch"
    );
    // Beside a peer that vouches for no lag, the lower bound falls back to ledger time
    // (horizons start no later than ledger time says), the upper bound is kept.
    let mut mixed = restarted();
    let in_step = PeerReal {
        view: RealView::InStep,
        ..unmeasured_peer(REAL_MS)
    };
    mixed.settle(&[lagging, in_step], T0, 0, SETTLED_AT_MS);
    let (min_ms, max_ms) = mixed.read(T0, 0, SETTLED_AT_MS);
    assert_eq!((min_ms, max_ms), (T0, REAL_MS + 3_000 + 20));
}

#[test]
fn a_follower_learns_the_lag_from_a_stamp_and_drops_it_once_made_up() {
    let mut follower = restarted();
    let stamp = Stamp {
        ledger_ms: T0 + 100,
        real_ms_min: REAL_MS - SKEW_MS,
        real_ms_max: REAL_MS + SKEW_MS,
    };
    follower.observe(&stamp, false, 1_000);
    assert_eq!(
        follower.read(T0 + 200, 0, 1_100),
        (REAL_MS - SKEW_MS + 100, REAL_MS + SKEW_MS + 100)
    );
    // A stamp without a lag does not end it while ledger time is still behind.
    follower.observe(&Stamp::at(T0 + 300), true, 1_200);
    assert!(follower.lagging());
    // Once ledger time is past the upper bound, the node is in step.
    let caught_up_ms = REAL_MS + SKEW_MS + 5_000;
    follower.observe(&Stamp::at(caught_up_ms), false, 1_000 + 4_000);
    assert_eq!(follower.view(5_000), RealView::InStep);
    assert_eq!(
        follower.read(caught_up_ms, 0, 5_000),
        (caught_up_ms, caught_up_ms + SKEW_MS)
    );
    // A node that restarted and saw only old stamps without a lag (entries of earlier
    // terms, sent to it because it was behind) vouches for nothing; a stamp its leader made
    // in its term says the leader settled in step.
    let mut other = restarted();
    other.observe(&Stamp::at(T0 + 300), false, 1_200);
    assert_eq!(other.view(1_300), RealView::Unmeasured);
    other.observe(&Stamp::at(T0 + 400), true, 1_300);
    assert_eq!(other.view(1_400), RealView::InStep);
}

#[test]
fn clocks_no_further_ahead_than_ledger_time_leave_a_node_in_step() {
    // A new cluster: the first stamp is the wall clock itself.
    let mut new = RealTimeBound::new(SKEW_MS);
    new.settle(&[unmeasured_peer(T0 - 30)], T0, T0, SETTLED_AT_MS);
    assert_eq!(new.view(SETTLED_AT_MS), RealView::InStep);
    // Nodes that restarted one at a time: whoever answered has not settled since, but
    // ledger time (heard from them) is not behind any clock.
    let mut restarted_again = restarted();
    let peers = [unmeasured_peer(REAL_MS - 80), unmeasured_peer(REAL_MS - 20)];
    restarted_again.settle(&peers, REAL_MS, REAL_MS - 50, SETTLED_AT_MS);
    assert_eq!(restarted_again.view(SETTLED_AT_MS), RealView::InStep);
    // Clocks ahead of ledger time by less than the skew (a stamp delivered late holds
    // ledger time back that much) are clocks, not an outage.
    let mut spread = restarted();
    let peers = [unmeasured_peer(REAL_MS + SKEW_MS - 1)];
    spread.settle(&peers, REAL_MS, REAL_MS + SKEW_MS, SETTLED_AT_MS);
    assert_eq!(spread.view(SETTLED_AT_MS), RealView::InStep);
}

#[test]
fn an_unsettled_node_raises_only_the_upper_bound_with_its_wall_clock() {
    let unsettled = restarted();
    assert_eq!(unsettled.read(T0, REAL_MS, 10), (T0 - 1, REAL_MS + SKEW_MS));
    assert_eq!(unsettled.read(T0, 0, 10), (T0, T0 + SKEW_MS));
}

#[test]
fn a_leader_stamps_lagging_ledger_time_with_real_time_bounds_after_a_cold_start() {
    // The node restarts from its disk three hours after the last stamp; nobody kept
    // running, so ledger time resumes from it while the wall clocks tell the outage.
    let mut bound = StampBound::new(SKEW_MS, T0, 50);
    let mut real = restarted();
    let wall_ms = REAL_MS - SKEW_MS / 2;
    real.settle(&[unmeasured_peer(REAL_MS)], T0, wall_ms, SETTLED_AT_MS);
    let (stamp, reading) = stamp_with(&mut bound, &mut real, wall_ms, SETTLED_AT_MS);
    assert!(reading.clamped, "the wall clock lies outside the bound");
    assert_eq!(stamp.ledger_ms, T0 + (SETTLED_AT_MS - 50) + SKEW_MS);
    assert!(stamp.real_ms_max >= REAL_MS);
    assert!(stamp.real_ms_min <= REAL_MS && stamp.real_ms_min > stamp.ledger_ms);
    // A node in step whose wall clock is right stamps ledger time, and ledger time plus
    // the skew.
    let mut bound = StampBound::new(SKEW_MS, T0, 50);
    let mut in_step = restarted();
    let vouching = PeerReal {
        view: RealView::InStep,
        ..unmeasured_peer(T0 + 1_000)
    };
    in_step.settle(&[vouching], T0 + 1_000, T0 + 8 * DAY_MS, 1_050);
    let (stamp, reading) = stamp_with(&mut bound, &mut in_step, T0 + 1_000, 1_050);
    assert_eq!(
        stamp,
        Stamp {
            ledger_ms: reading.at_ms,
            real_ms_min: reading.at_ms,
            real_ms_max: reading.at_ms + SKEW_MS,
        }
    );
    // With its wall clock eight days ahead, ledger time is bounded as before; only the
    // upper bound of real time follows the clock.
    let (ahead, reading) = stamp_with(&mut bound, &mut in_step, T0 + 8 * DAY_MS, 1_060);
    assert!(reading.clamped);
    assert_eq!(ahead.real_ms_min, ahead.ledger_ms - 1);
    assert_eq!(ahead.real_ms_max, T0 + 8 * DAY_MS + SKEW_MS);
    assert!(ahead.ledger_ms <= T0 + 1_000 + 10 + SKEW_MS);
}
