//! What one seed decides for a randomized run: the cluster's size and spares, how often
//! it snapshots, how far the nodes' clocks start apart, the workload (contending ledger
//! clients, agents on the providers with boundary faults), a background of message loss
//! and delay, and the schedule of cluster faults (power failures tear the last write;
//! at most one node has a bit of its synced data flipped). Everything is drawn from the run's RNG at its start, so the seed alone replays
//! it, and the plan is written to the trace.

use madsim::rand::{thread_rng, Rng};

use crate::fleet::AgentSpec;

/// Network conditions: loss rate and the range of one-way latency.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Chaos {
    /// Chance that a message (or connection attempt) is lost.
    pub loss_rate: f64,
    /// Longest one-way latency (ms); the shortest is 1 ms. Varying latency reorders.
    pub latency_ms_max: u64,
}

/// One cluster fault; each is healed before the next.
#[derive(Debug, Clone, PartialEq)]
pub enum FaultEvent {
    /// Members split in two, both ways; the minority has `minority` members.
    Partition {
        /// Members in the minority.
        minority: usize,
        /// How long it lasts (ms).
        hold_ms: u64,
    },
    /// One link cut one way only (from the leader, half the time).
    OneWayLink {
        /// How long it lasts (ms).
        hold_ms: u64,
    },
    /// The leader cut off from everyone, clients included.
    IsolateLeader {
        /// How long it lasts (ms).
        hold_ms: u64,
    },
    /// The leader cut off from its peers; clients still reach it.
    CutLeaderFromPeers {
        /// How long it lasts (ms).
        hold_ms: u64,
    },
    /// A node (the leader, half the time) sends nothing but still receives.
    Mute {
        /// How long it lasts (ms).
        hold_ms: u64,
    },
    /// Heavier loss and delay for a while.
    Chaos {
        /// The conditions.
        chaos: Chaos,
        /// How long they last (ms).
        hold_ms: u64,
    },
    /// A process crash (everything written survives) and restart.
    Crash {
        /// Whether the leader is the victim.
        leader: bool,
        /// Time down (ms).
        down_ms: u64,
    },
    /// A power failure (what was not synced is lost) and restart.
    PowerFail {
        /// Whether the leader is the victim.
        leader: bool,
        /// Time down (ms).
        down_ms: u64,
    },
    /// A node (the leader, if `leader`) loses power and, while down, a bit of its synced
    /// data flips; it restarts on the damaged disk, and recovers safely or refuses to
    /// start and stays down. At most one per run, so damaged nodes stay a minority.
    BitFlip {
        /// Whether the leader is the victim.
        leader: bool,
        /// Time down (ms).
        down_ms: u64,
    },
    /// Every clock jumps forward (madsim has one clock for all machines): real time
    /// passes at once, as after a pause of every machine.
    ClockJump {
        /// How far (s).
        secs: u64,
    },
    /// One node's clock goes wrong (the leader's, half the time), then is corrected.
    WrongClock {
        /// What goes wrong.
        fault: ClockFault,
        /// Whether the leader is the victim.
        leader: bool,
        /// How long until it is corrected (ms).
        hold_ms: u64,
    },
    /// The spare joins and replaces a member, under load.
    ReplaceMember,
}

impl FaultEvent {
    /// A short name of its kind, for tables.
    pub fn kind_name(&self) -> &'static str {
        match self {
            FaultEvent::Partition { .. } => "partition",
            FaultEvent::OneWayLink { .. } => "one_way_link",
            FaultEvent::IsolateLeader { .. } => "isolate_leader",
            FaultEvent::CutLeaderFromPeers { .. } => "cut_leader_from_peers",
            FaultEvent::Mute { .. } => "mute_node",
            FaultEvent::Chaos { .. } => "loss_delay_burst",
            FaultEvent::Crash { .. } => "crash_restart",
            FaultEvent::PowerFail { .. } => "power_failure",
            FaultEvent::BitFlip { .. } => "bit_flip",
            FaultEvent::ClockJump { .. } => "clock_jump",
            FaultEvent::WrongClock { fault, .. } => fault.kind_name(),
            FaultEvent::ReplaceMember => "membership_change",
        }
    }
}

/// How one node's clock goes wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClockFault {
    /// Its wall clock is set this far ahead (ms): days, as by a wrong date.
    Ahead {
        /// How far (ms).
        ms: u64,
    },
    /// Its wall clock is set this far back (ms).
    Behind {
        /// How far (ms).
        ms: u64,
    },
    /// Its oscillator runs fast (positive) or slow, wall and monotonic clock alike.
    Drift {
        /// Parts per million.
        ppm: i64,
    },
}

impl ClockFault {
    /// A short name of its kind, for tables.
    pub fn kind_name(&self) -> &'static str {
        match self {
            ClockFault::Ahead { .. } => "wall_clock_ahead",
            ClockFault::Behind { .. } => "wall_clock_behind",
            ClockFault::Drift { .. } => "clock_drift",
        }
    }

    fn draw() -> ClockFault {
        const DAY_MS: u64 = 24 * 60 * 60 * 1000;
        let mut rng = thread_rng();
        match rng.gen_range(0..3) {
            0 => ClockFault::Ahead {
                ms: rng.gen_range(1..=10) * DAY_MS,
            },
            1 => ClockFault::Behind {
                ms: rng.gen_range(1_000..=DAY_MS),
            },
            _ => ClockFault::Drift {
                ppm: rng.gen_range(-DRIFT_PPM_MAX..=DRIFT_PPM_MAX),
            },
        }
    }
}

/// Fastest drift of a wrong clock (parts per million; 1 %). A drift moves the monotonic
/// clock too, so the bound on ledger time cannot see it: it must stay small beside the
/// margins clients keep (`EffectRunner` confirms a grant after two thirds of its lease).
pub const DRIFT_PPM_MAX: i64 = 10_000;

/// Longest a node's clock stays wrong (ms).
pub const WRONG_CLOCK_HOLD_MS_MAX: u64 = 15_000;

/// The nodes' `clock_skew_ms_max` in randomized runs: the agents' leases are 3 s, and a
/// wall clock ahead may move ledger time this far beyond real time, which must stay well
/// inside the margin clients keep before a lease ends (a third of it, and the workload
/// clients' 500 ms).
pub const CLOCK_SKEW_MS_MAX: u64 = 250;

/// Everything a seed decides.
#[derive(Debug, Clone)]
pub struct VoprPlan {
    /// Voting members at the start: 3 or 5.
    pub nodes: u64,
    /// Spare machines (0 or 1), for a membership change.
    pub spares: u64,
    /// Raft log entries between snapshots.
    pub snapshot_after_logs: u64,
    /// How far (ms) each node's wall clock may start off the simulator's, either way.
    pub clock_offset_ms_max: u64,
    /// Contending ledger clients.
    pub clients: usize,
    /// Effects they share.
    pub effects: usize,
    /// Chance (percent) that a holder vanishes mid-dispatch.
    pub vanish_percent: u32,
    /// The agents.
    pub agents: Vec<AgentSpec>,
    /// Seed of the agents' episode plans.
    pub agent_seed: u64,
    /// Loss and delay for the whole fault phase, if any.
    pub background: Option<Chaos>,
    /// The faults, each after a pause (ms).
    pub events: Vec<(u64, FaultEvent)>,
}

fn chaos(heavy: bool) -> Chaos {
    let mut rng = thread_rng();
    Chaos {
        loss_rate: if heavy {
            rng.gen_range(0.02..0.08)
        } else {
            rng.gen_range(0.0..0.03)
        },
        latency_ms_max: if heavy {
            rng.gen_range(50..250)
        } else {
            rng.gen_range(2..40)
        },
    }
}

/// How many of each limited fault a plan may still draw.
struct Budget {
    spare: bool,
    jumps: u32,
    wrong_clocks: u32,
    bit_flips: u32,
}

fn event(nodes: u64, budget: &mut Budget) -> FaultEvent {
    let mut rng = thread_rng();
    let hold_ms = rng.gen_range(500..6_000);
    let down_ms = rng.gen_range(200..5_000);
    loop {
        return match rng.gen_range(0..14) {
            0 => FaultEvent::Partition {
                minority: rng.gen_range(1..=(nodes as usize - 1) / 2),
                hold_ms,
            },
            1 => FaultEvent::OneWayLink { hold_ms },
            2 => FaultEvent::IsolateLeader { hold_ms },
            3 => FaultEvent::CutLeaderFromPeers { hold_ms },
            4 => FaultEvent::Mute { hold_ms },
            5 => FaultEvent::Chaos {
                chaos: chaos(true),
                hold_ms,
            },
            6 => FaultEvent::Crash {
                leader: rng.gen_bool(0.5),
                down_ms,
            },
            7 => FaultEvent::PowerFail {
                leader: rng.gen_bool(0.5),
                down_ms,
            },
            8 if budget.jumps > 0 => {
                budget.jumps -= 1;
                FaultEvent::ClockJump {
                    secs: rng.gen_range(1..=45),
                }
            }
            9 | 10 if budget.spare => {
                budget.spare = false;
                FaultEvent::ReplaceMember
            }
            11 | 12 if budget.wrong_clocks > 0 => {
                budget.wrong_clocks -= 1;
                FaultEvent::WrongClock {
                    fault: ClockFault::draw(),
                    leader: rng.gen_bool(0.5),
                    // Long enough for a lease to run out while it lasts.
                    hold_ms: rng.gen_range(2_000..WRONG_CLOCK_HOLD_MS_MAX),
                }
            }
            13 if budget.bit_flips > 0 => {
                budget.bit_flips -= 1;
                FaultEvent::BitFlip {
                    leader: rng.gen_bool(0.5),
                    down_ms,
                }
            }
            _ => continue,
        };
    }
}

impl VoprPlan {
    /// Draws a plan from the run's RNG.
    pub fn draw() -> VoprPlan {
        let mut rng = thread_rng();
        let nodes = if rng.gen_bool(0.5) { 3 } else { 5 };
        let spares = u64::from(rng.gen_bool(0.5));
        let count = rng.gen_range(2..=5);
        let agents = AgentSpec::draw(&mut rng, count);
        let mut budget = Budget {
            spare: spares > 0,
            jumps: 2,
            wrong_clocks: 2,
            bit_flips: 1,
        };
        let events = (0..rng.gen_range(3..=7))
            .map(|_| {
                let gap_ms = rng.gen_range(200..3_000);
                (gap_ms, event(nodes, &mut budget))
            })
            .collect();
        VoprPlan {
            nodes,
            spares,
            snapshot_after_logs: [16, 64, 256][rng.gen_range(0..3)],
            clock_offset_ms_max: [0, 20, 100][rng.gen_range(0..3)],
            clients: rng.gen_range(2..=4),
            effects: rng.gen_range(6..=20),
            vanish_percent: rng.gen_range(0..=10),
            agents,
            agent_seed: rng.gen(),
            background: rng.gen_bool(0.4).then(|| chaos(false)),
            events,
        }
    }

    /// How far ledger time may run ahead of the simulator's clock in this run (ms): a
    /// wall clock ahead moves it at most the skew beyond what the leader's monotonic clock
    /// says, once per leadership, and a clock is wrong at most once at a time (twice the
    /// skew covers a leader elected while the last one's lead is not yet made up); then
    /// the start offsets, and what a drift gathers while it lasts (up to
    /// [`DRIFT_PPM_MAX`] for [`WRONG_CLOCK_HOLD_MS_MAX`]).
    pub fn ledger_time_lead_ms_max(&self) -> u64 {
        let drift_ms = WRONG_CLOCK_HOLD_MS_MAX * DRIFT_PPM_MAX as u64 / 1_000_000;
        2 * CLOCK_SKEW_MS_MAX + self.clock_offset_ms_max + drift_ms
    }

    /// How far a node's wall clock may run ahead of the simulator's clock in this run
    /// (ms): the furthest a clock is set ahead by a fault, beyond what clocks differ by
    /// anyway.
    pub fn wall_clock_lead_ms_max(&self) -> u64 {
        let set_ahead_ms = self
            .events
            .iter()
            .filter_map(|(_, event)| match event {
                FaultEvent::WrongClock {
                    fault: ClockFault::Ahead { ms },
                    ..
                } => Some(*ms),
                _ => None,
            })
            .max()
            .unwrap_or(0);
        set_ahead_ms + self.ledger_time_lead_ms_max()
    }

    /// One line for the trace.
    pub fn describe(&self) -> String {
        let events: Vec<String> = self
            .events
            .iter()
            .map(|(gap, e)| format!("+{gap}ms {e:?}"))
            .collect();
        format!(
            "plan: {} nodes + {} spare, snapshot every {} entries, clocks up to {} ms apart, \
             {} clients on {} effects (vanish {}%), agents {:?}, background {:?}, faults [{}]",
            self.nodes,
            self.spares,
            self.snapshot_after_logs,
            self.clock_offset_ms_max,
            self.clients,
            self.effects,
            self.vanish_percent,
            self.agents,
            self.background,
            events.join(", ")
        )
    }
}
