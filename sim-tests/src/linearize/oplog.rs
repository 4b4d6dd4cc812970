//! The history the linearizability checker judges: every ledger operation a workload
//! client invoked, with its invocation time, and its response time and result once the
//! answer arrived. An operation whose answer never arrived stays pending: it may or may
//! not have taken effect.
//!
//! Times are the simulated wall clock in milliseconds, the clock the leader stamps into
//! every command (madsim has one clock for every machine), so a command's stamp lies
//! between its invocation and its response.

use std::sync::{Arc, Mutex, MutexGuard};

use ledger_core::{CommandBody, EffectKey, EffectRecord, Outcome};

/// What was invoked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    /// A replicated command with its id.
    Command {
        /// The command id.
        command_id: String,
        /// The command.
        body: Box<CommandBody>,
    },
    /// A linearizable read of the record.
    Read,
}

/// What came back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// A command's outcome (a refusal included).
    Outcome(Outcome),
    /// A read's record (`None`: no such effect).
    Record(Option<Box<EffectRecord>>),
}

/// One operation of the history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Op {
    /// The client that invoked it.
    pub client: String,
    /// The effect.
    pub key: EffectKey,
    /// What was invoked.
    pub call: Call,
    /// Invocation time (ms, rounded down).
    pub invoked_ms: u64,
    /// Response time (ms, rounded up) and result; `None` while pending.
    pub answer: Option<(u64, Answer)>,
}

/// The shared, append-only operation log of one run.
#[derive(Debug, Clone, Default)]
pub struct OpLog {
    ops: Arc<Mutex<Vec<Op>>>,
}

impl OpLog {
    fn lock(&self) -> MutexGuard<'_, Vec<Op>> {
        self.ops.lock().expect("op log lock")
    }

    /// Records an invocation now; returns its handle for [`OpLog::answer`].
    pub fn invoke(&self, client: &str, key: &EffectKey, call: Call) -> usize {
        let mut ops = self.lock();
        ops.push(Op {
            client: client.to_owned(),
            key: key.clone(),
            call,
            invoked_ms: crate::workload::wall_clock_ms(),
            answer: None,
        });
        ops.len() - 1
    }

    /// Records the answer to invocation `handle`, arrived now.
    pub fn answer(&self, handle: usize, answer: Answer) {
        let responded_ms = crate::workload::wall_clock_ms() + 1;
        self.lock()[handle].answer = Some((responded_ms, answer));
    }

    /// Every operation so far.
    pub fn ops(&self) -> Vec<Op> {
        self.lock().clone()
    }
}
