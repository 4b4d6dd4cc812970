//! The times a leader stamps on each replicated command, and which judgment uses which
//! (DESIGN.md section 4, "Time is deterministic").
//!
//! Ledger time ([`Stamp::ledger_ms`]) moves at most as fast as real time (plus a bounded
//! skew), so it never runs out a lease or collects a record early: it is the time for
//! leases, retention, expiry and every time a record keeps. The price is that it can lag
//! real time: after an outage no running node measured (every node down at once) it
//! resumes from the last stamp, and it catches up only slowly.
//!
//! A provider horizon is the opposite case. The provider forgets a key a fixed real time
//! after it first saw it; judging "has the horizon passed?" by a time that lags would
//! re-send a key the provider has already forgotten, a second real effect. So the stamp
//! also carries bounds on real time as the stamping leader knows them
//! ([`Stamp::real_ms_min`], [`Stamp::real_ms_max`]), and horizons are judged with them:
//! - a horizon starts at the lower bound (a provider cannot have seen a key before the
//!   dispatch was granted), so the deadline is never later than the provider's;
//! - whether it has passed is judged at the upper bound: any clock that says it has
//!   passed wins, and the effect is reconciled or escalated rather than re-sent.
//!
//! As applied, both bounds are never below ledger time ([`Stamp::applied`]). While no
//! outage went unmeasured, the lower bound is ledger time, so horizons start where ledger
//! time alone would start them, and the upper bound is ledger time plus the clock skew
//! the cluster allows, or the stamping leader's wall clock plus that skew if it is later
//! (`ledger_node::real_time`). A stamp from before the bounds existed is [`Stamp::at`] its
//! ledger time.

use serde::{Deserialize, Serialize};

/// When a replicated command was stamped, as the leader that stamped it knew.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Stamp {
    /// Ledger time (ms since the Unix epoch): the leader's wall clock, bounded by the real
    /// time its monotonic clock saw pass. Leases, retention and expiry are judged by it.
    pub ledger_ms: u64,
    /// The earliest real time it may be (ms): where a provider horizon starts. One below
    /// `ledger_ms` says that the upper bound is the stamping leader's own wall clock and
    /// not a lag a follower should carry on (`ledger_node::real_time`); applied, it is
    /// ledger time.
    pub real_ms_min: u64,
    /// The latest real time it may be (ms): what a provider horizon is judged against.
    pub real_ms_max: u64,
}

impl Stamp {
    /// A stamp that knows no more of real time than ledger time `ledger_ms`.
    pub fn at(ledger_ms: u64) -> Stamp {
        Stamp {
            ledger_ms,
            real_ms_min: ledger_ms,
            real_ms_max: ledger_ms,
        }
    }

    /// The stamp as the state machine applies it, after ledger time `clock_ms`: ledger time
    /// never goes back, and neither bound is below ledger time (nor the lower above the
    /// upper).
    pub(crate) fn applied(self, clock_ms: u64) -> Stamp {
        let ledger_ms = self.ledger_ms.max(clock_ms);
        let real_ms_max = self.real_ms_max.max(ledger_ms);
        Stamp {
            ledger_ms,
            real_ms_min: self.real_ms_min.clamp(ledger_ms, real_ms_max),
            real_ms_max,
        }
    }

    /// The ledger time that lies as far ahead of this stamp's ledger time as `real_ms` lies
    /// ahead of its latest real time: a lease that must end before real time may reach
    /// `real_ms` must end, in ledger time, by then. Saturates at zero.
    pub fn ledger_ms_before(&self, real_ms: u64) -> u64 {
        let lead_ms = self.real_ms_max.saturating_sub(self.ledger_ms);
        real_ms.saturating_sub(lead_ms)
    }
}

#[cfg(test)]
mod tests;
