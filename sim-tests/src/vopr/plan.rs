//! What one seed decides for a randomized run: the cluster's size and spares, how often
//! it snapshots, the workload (contending ledger clients, agents on the providers with
//! boundary faults), a background of message loss and delay, and the schedule of cluster
//! faults. Everything is drawn from the run's RNG at its start, so the seed alone replays
//! it, and the plan is written to the trace.

use madsim::rand::{thread_rng, Rng};

use crate::actors::KeyMode;
use crate::bench::plan::FaultPoint;
use crate::world::ProviderKind;

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
    /// Every clock jumps forward (madsim has one clock for all machines).
    ClockJump {
        /// How far (s).
        secs: u64,
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
            FaultEvent::ClockJump { .. } => "clock_jump",
            FaultEvent::ReplaceMember => "membership_change",
        }
    }
}

/// One agent: a benchmark episode (fault point and provider) run on the ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AgentSpec {
    /// Its boundary faults.
    pub point: FaultPoint,
    /// Its provider.
    pub kind: ProviderKind,
    /// Where its keys come from.
    pub key_mode: KeyMode,
    /// Declared multiplicity of each intent.
    pub slots: u32,
}

/// Everything a seed decides.
#[derive(Debug, Clone)]
pub struct VoprPlan {
    /// Voting members at the start: 3 or 5.
    pub nodes: u64,
    /// Spare machines (0 or 1), for a membership change.
    pub spares: u64,
    /// Raft log entries between snapshots.
    pub snapshot_after_logs: u64,
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

fn event(nodes: u64, spare_left: &mut bool, jumps_left: &mut u32) -> FaultEvent {
    let mut rng = thread_rng();
    let hold_ms = rng.gen_range(500..6_000);
    let down_ms = rng.gen_range(200..5_000);
    loop {
        return match rng.gen_range(0..11) {
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
            8 if *jumps_left > 0 => {
                *jumps_left -= 1;
                FaultEvent::ClockJump {
                    secs: rng.gen_range(1..=45),
                }
            }
            9 | 10 if *spare_left => {
                *spare_left = false;
                FaultEvent::ReplaceMember
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
        let agents = (0..rng.gen_range(2..=5))
            .map(|_| {
                let kind = ProviderKind::ALL[rng.gen_range(0..ProviderKind::ALL.len())];
                AgentSpec {
                    point: FaultPoint::ALL[rng.gen_range(0..FaultPoint::ALL.len())],
                    kind,
                    key_mode: if rng.gen_bool(0.5) {
                        KeyMode::Explicit
                    } else {
                        KeyMode::Derived
                    },
                    slots: if kind == ProviderKind::Message {
                        rng.gen_range(1..=3)
                    } else {
                        1
                    },
                }
            })
            .collect();
        let (mut spare_left, mut jumps_left) = (spares > 0, 2);
        let events = (0..rng.gen_range(3..=7))
            .map(|_| {
                let gap_ms = rng.gen_range(200..3_000);
                (gap_ms, event(nodes, &mut spare_left, &mut jumps_left))
            })
            .collect();
        VoprPlan {
            nodes,
            spares,
            snapshot_after_logs: [16, 64, 256][rng.gen_range(0..3)],
            clients: rng.gen_range(2..=4),
            effects: rng.gen_range(6..=20),
            vanish_percent: rng.gen_range(0..=10),
            agents,
            agent_seed: rng.gen(),
            background: rng.gen_bool(0.4).then(|| chaos(false)),
            events,
        }
    }

    /// One line for the trace.
    pub fn describe(&self) -> String {
        let events: Vec<String> = self
            .events
            .iter()
            .map(|(gap, e)| format!("+{gap}ms {e:?}"))
            .collect();
        format!(
            "plan: {} nodes + {} spare, snapshot every {} entries, {} clients on {} effects \
             (vanish {}%), agents {:?}, background {:?}, faults [{}]",
            self.nodes,
            self.spares,
            self.snapshot_after_logs,
            self.clients,
            self.effects,
            self.vanish_percent,
            self.agents,
            self.background,
            events.join(", ")
        )
    }
}
