//! The benchmark's episodes for one seed: one per fault point and provider, each with its
//! faults, timings and intents, drawn from a generator of its own (not the simulator's),
//! so that every strategy run on the seed meets exactly the same plan.
//!
//! Ground truth is declared here: each intent names the effect the user wants
//! (`intent_id`), so a model repair shares its first intent's effect and an intended new
//! effect has its own; a message to several recipients declares one effect per recipient.

use std::collections::BTreeMap;

use crate::actors::faults::{CallPlan, FaultPlan, SendPlan};
use crate::actors::Intent;
use crate::world::{ProviderKind, HORIZON_MS};

/// SplitMix64: a tiny, stable generator for plans (its output never changes with a
/// dependency upgrade).
#[derive(Debug, Clone)]
pub struct SplitMix(u64);

impl SplitMix {
    /// A generator for `seed` and a stream name.
    pub fn new(seed: u64, stream: &str) -> SplitMix {
        SplitMix(seed ^ crate::fnv64(stream.as_bytes()))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `lo..hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo).max(1)
    }
}

/// Where the benchmark strikes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FaultPoint {
    /// The tool server dies after deciding to send, before sending.
    BeforeDispatch,
    /// The provider received the request and crashed before applying it.
    ReceivedNotApplied,
    /// The provider applied it; its answer was lost.
    AppliedAnswerLost,
    /// The provider applied it, then failed and answered 503.
    AppliedThenError,
    /// The tool server got the answer; the agent did not.
    AnswerLostToAgent,
    /// The agent cancels the call while the provider is processing it.
    DuringCancellation,
    /// The agent times out while the backend is still working.
    AgentTimeout,
    /// The agent crashes mid-call and restarts from its workflow state.
    AgentCrash,
    /// The instance dies after the provider applied; the retry lands on another one.
    RetryOnOtherInstance,
    /// As the previous, and the retry comes after the provider's horizon.
    HorizonExpired,
    /// The answer is lost, then the model issues the step again with one parameter
    /// changed: a repair of the same effect. The user wants one refund, so applying both
    /// is an extra application; the ledger answers the repair with a conflict.
    ModelRepair,
    /// The answer is lost, then the agent issues a second effect on the same target in
    /// the same step, one parameter changed, and means it: ground truth is two effects.
    /// On the ledger's conflict it says so (a new key or sequence number); a strategy
    /// that suppresses the second effect is a false deduplication.
    IntendedNewEffect,
    /// Two or three of the above at once.
    Mixed,
}

impl FaultPoint {
    /// Every fault point, in table order.
    pub const ALL: [FaultPoint; 13] = [
        FaultPoint::BeforeDispatch,
        FaultPoint::ReceivedNotApplied,
        FaultPoint::AppliedAnswerLost,
        FaultPoint::AppliedThenError,
        FaultPoint::AnswerLostToAgent,
        FaultPoint::DuringCancellation,
        FaultPoint::AgentTimeout,
        FaultPoint::AgentCrash,
        FaultPoint::RetryOnOtherInstance,
        FaultPoint::HorizonExpired,
        FaultPoint::ModelRepair,
        FaultPoint::IntendedNewEffect,
        FaultPoint::Mixed,
    ];

    /// Its name in tables.
    pub fn name(self) -> &'static str {
        match self {
            FaultPoint::BeforeDispatch => "before-dispatch",
            FaultPoint::ReceivedNotApplied => "received-not-applied",
            FaultPoint::AppliedAnswerLost => "applied-answer-lost",
            FaultPoint::AppliedThenError => "applied-then-5xx",
            FaultPoint::AnswerLostToAgent => "answer-lost-to-agent",
            FaultPoint::DuringCancellation => "during-cancellation",
            FaultPoint::AgentTimeout => "agent-timeout",
            FaultPoint::AgentCrash => "agent-crash-restart",
            FaultPoint::RetryOnOtherInstance => "retry-other-instance",
            FaultPoint::HorizonExpired => "horizon-expired",
            FaultPoint::ModelRepair => "model-repair",
            FaultPoint::IntendedNewEffect => "intended-new-effect",
            FaultPoint::Mixed => "mixed",
        }
    }
}

/// One agent, its intents and the faults it meets.
#[derive(Debug, Clone)]
pub struct EpisodePlan {
    /// Unique within the seed.
    pub id: String,
    /// The fault point.
    pub point: FaultPoint,
    /// The provider.
    pub kind: ProviderKind,
    /// The faults.
    pub faults: FaultPlan,
    /// Provider processing time without a fault (ms).
    pub processing_ms: u64,
    /// What the agent intends, in order.
    pub intents: Vec<Intent>,
    /// Jitter added to the agent's retry pauses (ms).
    pub backoff_jitter_ms: Vec<u64>,
    /// When the agent starts (ms after the run's start).
    pub start_ms: u64,
}

/// Every episode of `seed`: one per fault point and provider.
pub fn episodes(seed: u64) -> Vec<EpisodePlan> {
    FaultPoint::ALL
        .into_iter()
        .flat_map(|point| ProviderKind::ALL.map(|kind| episode(seed, point, kind, "")))
        .collect()
}

/// The episode of `seed` for `point` and `kind`; `prefix` goes before its id (and so
/// before its keys), for runs that hold several episodes of one kind.
pub fn episode(seed: u64, point: FaultPoint, kind: ProviderKind, prefix: &str) -> EpisodePlan {
    let id = format!("{prefix}{}-{}", point.name(), kind.name());
    let mut rng = SplitMix::new(seed, &id);
    let faults = faults_for(point, &mut rng);
    let mut intents = intents_for(&id, point, kind, &mut rng);
    let processing_ms = rng.range(20, 300);
    let backoff_jitter_ms = (0..8).map(|_| rng.range(0, 500)).collect();
    let start_ms = rng.range(0, 2_000);
    // A message goes to two or three recipients: one declared effect per recipient.
    // Drawn last, so that the other draws are those of single-recipient plans.
    if kind == ProviderKind::Message {
        let recipients = rng.range(2, 4) as u32;
        for intent in &mut intents {
            intent.slots = recipients;
        }
    }
    EpisodePlan {
        id,
        point,
        kind,
        faults,
        processing_ms,
        intents,
        backoff_jitter_ms,
        start_ms,
    }
}

fn faults_for(point: FaultPoint, rng: &mut SplitMix) -> FaultPlan {
    let mut plan = FaultPlan::default();
    let slow_past_timeout = SendPlan::Slow(rng.range(11_000, 14_000));
    let slow_short = SendPlan::Slow(rng.range(300, 1_500));
    match point {
        FaultPoint::BeforeDispatch => {
            plan.sends.insert(1, SendPlan::CrashBeforeSend);
        }
        FaultPoint::ReceivedNotApplied => {
            plan.sends.insert(1, SendPlan::ProviderCrash);
        }
        FaultPoint::AppliedAnswerLost | FaultPoint::ModelRepair | FaultPoint::IntendedNewEffect => {
            plan.sends.insert(1, SendPlan::LostResponse);
        }
        FaultPoint::AppliedThenError => {
            plan.sends.insert(1, SendPlan::FailAfterCommit);
        }
        FaultPoint::AnswerLostToAgent => {
            plan.calls.insert(1, CallPlan::LostReply);
        }
        FaultPoint::DuringCancellation => {
            plan.sends.insert(1, slow_short);
            plan.calls.insert(1, CallPlan::Cancel(rng.range(50, 250)));
        }
        FaultPoint::AgentTimeout => {
            plan.sends.insert(1, slow_past_timeout);
        }
        FaultPoint::AgentCrash => {
            plan.sends.insert(1, slow_short);
            let crash = CallPlan::AgentCrash {
                after_ms: rng.range(50, 250),
                down_ms: rng.range(2_000, 5_000),
            };
            plan.calls.insert(1, crash);
        }
        FaultPoint::RetryOnOtherInstance => {
            plan.sends.insert(1, SendPlan::CrashAfterMutate);
        }
        FaultPoint::HorizonExpired => {
            plan.sends.insert(1, SendPlan::CrashAfterMutate);
            plan.delays.insert(2, HORIZON_MS + rng.range(5_000, 10_000));
        }
        FaultPoint::Mixed => mixed(&mut plan, rng),
    }
    plan
}

/// Two or three faults from different boundaries.
fn mixed(plan: &mut FaultPlan, rng: &mut SplitMix) {
    let first_sends = [
        SendPlan::CrashBeforeSend,
        SendPlan::ProviderCrash,
        SendPlan::LostResponse,
        SendPlan::Slow(rng.range(11_000, 14_000)),
        SendPlan::CrashAfterMutate,
        SendPlan::FailAfterCommit,
    ];
    let second_sends = [
        SendPlan::LostResponse,
        SendPlan::ProviderCrash,
        SendPlan::CrashAfterMutate,
    ];
    let first_calls = [
        CallPlan::LostReply,
        CallPlan::AgentCrash {
            after_ms: rng.range(50, 250),
            down_ms: rng.range(2_000, 5_000),
        },
    ];
    let mut boundaries: Vec<u64> = (0..5).collect();
    let count = rng.range(2, 4) as usize;
    for _ in 0..count {
        let pick = boundaries.remove(rng.range(0, boundaries.len() as u64) as usize);
        match pick {
            0 => {
                let f = first_sends[rng.range(0, first_sends.len() as u64) as usize];
                plan.sends.insert(1, f);
            }
            1 => {
                let f = second_sends[rng.range(0, 3) as usize];
                plan.sends.insert(2, f);
            }
            2 => {
                let f = first_calls[rng.range(0, 2) as usize];
                plan.calls.insert(1, f);
            }
            3 => {
                plan.calls.insert(2, CallPlan::LostReply);
            }
            _ => {
                plan.delays.insert(2, HORIZON_MS + rng.range(5_000, 10_000));
            }
        }
    }
}

fn intents_for(id: &str, point: FaultPoint, kind: ProviderKind, rng: &mut SplitMix) -> Vec<Intent> {
    let params: BTreeMap<String, String> = [
        ("item".to_owned(), format!("item-{}", rng.range(1, 1_000))),
        ("amount".to_owned(), format!("{}", rng.range(1, 500) * 100)),
        ("to".to_owned(), format!("customer-{}", rng.range(1, 100))),
    ]
    .into();
    let first = Intent {
        kind,
        intent_id: format!("{id}/a"),
        params,
        workflow_id: format!("wf-{id}"),
        step_id: "step-1".into(),
        key: format!("wf-{id}/step-1"),
        slots: 1,
        new_action: false,
        sequence: None,
    };
    if !matches!(
        point,
        FaultPoint::ModelRepair | FaultPoint::IntendedNewEffect
    ) {
        return vec![first];
    }
    // The same step and target, one parameter changed. A repair is the same effect (its
    // ground-truth id is the first intent's); an intended new effect is another one.
    let mut second = first.clone();
    let item = format!("item-{}", rng.range(1_000, 2_000));
    second.params.insert("item".into(), item);
    if point == FaultPoint::IntendedNewEffect {
        second.intent_id = format!("{id}/b");
        second.new_action = true;
    }
    vec![first, second]
}
