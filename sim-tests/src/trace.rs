//! The run's trace: notable events (faults, elections, phase changes) stamped with
//! simulated time. Printed with the seed after each run, so two runs of one seed can be
//! compared line by line, and a failure shows what led to it.

use std::sync::{Arc, Mutex};

/// An append-only list of timestamped notes.
#[derive(Debug, Clone, Default)]
pub struct Trace {
    lines: Arc<Mutex<Vec<String>>>,
}

impl Trace {
    /// An empty trace.
    pub fn new() -> Self {
        Self::default()
    }

    /// Notes `event` at the current simulated time.
    pub fn note(&self, event: impl AsRef<str>) {
        let line = format!(
            "t={:>9.3}s {}",
            crate::sim_elapsed().as_secs_f64(),
            event.as_ref()
        );
        tracing::info!("{line}");
        self.lines.lock().expect("trace lock").push(line);
    }

    /// Every note so far.
    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().expect("trace lock").clone()
    }
}
