//! Boundary faults of one episode, and the supervisor that carries out crashes.
//!
//! A [`FaultPlan`] says what happens to the n-th provider send of an episode and to the
//! n-th call its agent makes, counted across every instance and agent incarnation of the
//! episode, so that every strategy meets the same faults at the same logical moments
//! whatever it does in between. Crashes are carried out by the [`Supervisor`], a task
//! outside every machine it kills: the victim asks for its own crash and stops there.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use crate::cluster::{kill_machine, restart_machine, ClientNode};
use crate::world::SendFault;

/// What happens around one provider send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendPlan {
    /// The tool-server instance dies before sending.
    CrashBeforeSend,
    /// The provider receives it and crashes before applying it.
    ProviderCrash,
    /// The provider applies it; the answer is lost.
    LostResponse,
    /// The provider takes this long (ms) to apply it.
    Slow(u64),
    /// The provider applies it, then fails and answers 503.
    FailAfterCommit,
    /// The provider applies it and answers; the instance dies before using the answer.
    CrashAfterMutate,
}

impl SendPlan {
    /// The provider's side of it.
    pub fn provider_fault(self) -> SendFault {
        match self {
            SendPlan::ProviderCrash => SendFault::CrashBeforeMutate,
            SendPlan::LostResponse => SendFault::LostResponse,
            SendPlan::Slow(ms) => SendFault::Slow(ms),
            SendPlan::FailAfterCommit => SendFault::FailAfterCommit,
            SendPlan::CrashBeforeSend | SendPlan::CrashAfterMutate => SendFault::None,
        }
    }
}

/// What happens around one agent call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallPlan {
    /// The tool server answers, the answer never reaches the agent.
    LostReply,
    /// The agent cancels the call this long (ms) after making it, then goes on.
    Cancel(u64),
    /// The agent crashes this long (ms) after making the call and restarts after `down_ms`.
    AgentCrash {
        /// Delay before the crash.
        after_ms: u64,
        /// Time down.
        down_ms: u64,
    },
}

/// The faults of one episode.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FaultPlan {
    /// By send number (1-based).
    pub sends: BTreeMap<u32, SendPlan>,
    /// By call number (1-based).
    pub calls: BTreeMap<u32, CallPlan>,
    /// Extra wait before call number n (ms), e.g. a retry that comes back after the
    /// provider's horizon.
    pub delays: BTreeMap<u32, u64>,
}

/// A plan and its counters, shared by the episode's agent and instances.
pub struct EpisodeFaults {
    /// The plan.
    pub plan: FaultPlan,
    sends: AtomicU32,
    calls: AtomicU32,
    /// Carries out crashes.
    pub supervisor: Supervisor,
}

impl EpisodeFaults {
    /// Counters at zero.
    pub fn new(plan: FaultPlan, supervisor: Supervisor) -> Arc<EpisodeFaults> {
        Arc::new(EpisodeFaults {
            plan,
            sends: AtomicU32::new(0),
            calls: AtomicU32::new(0),
            supervisor,
        })
    }

    /// Numbers the next send and returns what happens to it.
    pub fn next_send(&self) -> Option<SendPlan> {
        let n = self.sends.fetch_add(1, Ordering::Relaxed) + 1;
        self.plan.sends.get(&n).copied()
    }

    /// Numbers the next call; returns its number and what happens to it.
    pub fn next_call(&self) -> (u32, Option<CallPlan>) {
        let n = self.calls.fetch_add(1, Ordering::Relaxed) + 1;
        (n, self.plan.calls.get(&n).copied())
    }

    /// How many sends were made.
    pub fn sends(&self) -> u32 {
        self.sends.load(Ordering::Relaxed)
    }
}

/// What runs on a machine once it is back.
pub type OnRestart = Box<dyn FnOnce(ClientNode) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send>;

struct Crash {
    machine: ClientNode,
    down_ms: u64,
    on_restart: OnRestart,
}

/// Kills and restarts machines on request, from outside them.
#[derive(Clone)]
pub struct Supervisor {
    requests: mpsc::UnboundedSender<Crash>,
}

impl Supervisor {
    /// Starts the supervisor task on the current (never killed) machine.
    pub fn start() -> Supervisor {
        let (requests, mut inbox) = mpsc::unbounded_channel::<Crash>();
        madsim::task::spawn(async move {
            while let Some(crash) = inbox.recv().await {
                kill_machine(&crash.machine);
                madsim::task::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(crash.down_ms)).await;
                    let machine = restart_machine(&crash.machine);
                    (crash.on_restart)(machine).await;
                });
            }
        });
        Supervisor { requests }
    }

    /// Crashes `machine` (the caller, typically) and, after `down_ms`, restarts it and
    /// runs `on_restart`. Never returns: the caller's machine is about to die.
    pub async fn crash(&self, machine: ClientNode, down_ms: u64, on_restart: OnRestart) {
        let crash = Crash {
            machine,
            down_ms,
            on_restart,
        };
        self.requests
            .send(crash)
            .unwrap_or_else(|_| panic!("the supervisor stopped"));
        std::future::pending::<()>().await;
    }
}
