//! The node's two clocks, behind one seam: the wall clock (milliseconds since the Unix
//! epoch, which an operator or NTP may step anywhere) and a monotonic clock (milliseconds
//! since an arbitrary origin, which only moves forward, at the rate real time passes).
//!
//! Every time the node reads (the leader's stamp, the sweeper's "what is due") goes
//! through a [`Clock`]. Production uses [`SystemClock`]; the simulation hands each node a
//! clock of its own (an offset, a drift, a wall clock stepped days ahead or back), since
//! the simulator itself has a single clock shared by every machine. Which clock a node
//! reads is decided once, when it is built ([`crate::start_with_clock`]); nothing else in
//! the node knows or asks.

use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// A source of wall and monotonic time.
pub trait Clock: Send + Sync + 'static {
    /// The wall clock in milliseconds since the Unix epoch. May jump either way.
    fn wall_ms(&self) -> u64;
    /// Milliseconds since an origin fixed for the life of this clock. Never decreases.
    fn monotonic_ms(&self) -> u64;
}

/// A shared clock.
pub type ClockRef = Arc<dyn Clock>;

/// The operating system's clocks: `SystemTime` and `Instant`.
#[derive(Debug, Clone, Copy)]
pub struct SystemClock {
    origin: Instant,
}

impl SystemClock {
    /// A clock whose monotonic origin is now.
    #[allow(clippy::disallowed_methods)] // The one place the node reads the system clocks.
    pub fn new() -> Self {
        SystemClock {
            origin: Instant::now(),
        }
    }

    /// The system clock as a [`ClockRef`].
    pub fn shared() -> ClockRef {
        Arc::new(SystemClock::new())
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for SystemClock {
    #[allow(clippy::disallowed_methods)] // The one place the node reads the system clocks.
    fn wall_ms(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64)
    }

    fn monotonic_ms(&self) -> u64 {
        self.origin.elapsed().as_millis() as u64
    }
}
