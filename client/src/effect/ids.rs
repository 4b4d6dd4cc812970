//! Command ids of the ledger calls an effect run makes.
//!
//! Everything sent on behalf of a granted attempt is named after the effect and the
//! attempt's fencing token: a report, an observation, the n-th heartbeat. Sending it again
//! (a lost answer, a retry after a restart, the cancellation guard) re-sends the same id,
//! and the ledger answers with the first outcome instead of applying it twice.
//!
//! Claims and requests to reconcile are the exception, on purpose: they *mint* the
//! attempt, and the same id returns the same grant. Two invocations sending one claim id
//! (a retry through another tool-server instance, two requests on one instance) would
//! both hold the one grant and both dispatch. So their id is named after the effect and
//! the invocation: a transport retry inside one call re-sends it, a new call never does.
//! Declarations too: declaring what is already declared is answered from the records as
//! they are, while a remembered id answers what they were (a conflict the effect's
//! amend has since resolved, for one).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use ledger_core::intent::hex;
use ledger_core::{EffectKey, IntentHash};

/// Invocation tags of this process: unique per process start and per call.
#[derive(Debug)]
pub(crate) struct Invocations {
    process: String,
    next: AtomicU64,
}

impl Invocations {
    /// Tags unique to this runner: the holder (unique per live tool-server instance, as
    /// the holder of its leases) and the start time go into the prefix, so a restarted
    /// process with the same holder never repeats a tag. Nothing here depends on the
    /// process, so a simulated run replays identically from its seed.
    pub(crate) fn new(holder: &str) -> Self {
        let started_ns = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        let seed = format!("{holder}/{started_ns}");
        let digest = ledger_core::canonicalize(&serde_json::json!([seed]).to_string(), &[])
            .map(|c| hex(&c.hash.0[..8]))
            .unwrap_or_else(|_| format!("{started_ns:x}"));
        Invocations {
            process: digest,
            next: AtomicU64::new(0),
        }
    }

    /// A tag no other invocation of any process uses.
    pub(crate) fn next(&self) -> String {
        format!(
            "{}-{}",
            self.process,
            self.next.fetch_add(1, Ordering::Relaxed)
        )
    }
}

/// The id of a claim made by invocation `tag`.
pub(crate) fn claim(key: &EffectKey, tag: &str) -> String {
    format!("claim/{}/{tag}", key.provider_key())
}

/// The id of a request to reconcile made by invocation `tag`.
pub(crate) fn begin_reconcile(key: &EffectKey, tag: &str) -> String {
    format!("reconcile/{}/{tag}", key.provider_key())
}

/// The id of the declaration of `slots` slots made by invocation `tag`.
pub(crate) fn declare(key: &EffectKey, slots: u32, tag: &str) -> String {
    format!("declare/{}/{slots}/{tag}", key.provider_key())
}

/// The id of an amend to intent `hash` made by invocation `tag`: retries of one invocation
/// are one command; another invocation is another (amending back and forth is allowed
/// while nothing can have happened).
pub(crate) fn amend(key: &EffectKey, hash: &IntentHash, tag: &str) -> String {
    format!("amend/{}/{}/{tag}", key.provider_key(), &hex(&hash.0)[..32])
}

/// The id of the report of `kind` (`committed`, `failed`, `unknown`) by the attempt
/// holding `token`. Kinds differ so that a late fact (committed) after a cancellation
/// report (unknown) is its own command.
pub(crate) fn report(key: &EffectKey, token: u64, kind: &str) -> String {
    format!("report/{}/{token}/{kind}", key.provider_key())
}

/// The id of heartbeat `seq` of the attempt holding `token`.
pub(crate) fn heartbeat(key: &EffectKey, token: u64, seq: u64) -> String {
    format!("heartbeat/{}/{token}/{seq}", key.provider_key())
}

/// The id of confirmation `round` of a late grant holding `token` (a heartbeat).
pub(crate) fn confirm(key: &EffectKey, token: u64, round: u32) -> String {
    format!("heartbeat/{}/{token}/confirm-{round}", key.provider_key())
}

/// The id of the observation of the reconciliation attempt holding `token`.
pub(crate) fn observe(key: &EffectKey, token: u64) -> String {
    format!("observe/{}/{token}", key.provider_key())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ledger_core::key::validate_command_id;

    #[test]
    fn ids_fit_the_ledger_limits_for_the_longest_keys() {
        let key = EffectKey::new("t".repeat(64), "n".repeat(128), "k".repeat(256));
        let tags = Invocations::new(&"h".repeat(256));
        let tag = tags.next();
        for id in [
            claim(&key, &tag),
            begin_reconcile(&key, &tag),
            declare(&key, 1024, &tag),
            report(&key, u64::MAX, "committed"),
            heartbeat(&key, u64::MAX, u64::MAX),
            observe(&key, u64::MAX),
        ] {
            assert_eq!(validate_command_id(&id), Ok(()), "{id}");
        }
    }

    #[test]
    fn attempt_ids_are_stable_and_invocation_ids_are_not() {
        let key = EffectKey::new("acme", "mcp", "k");
        assert_eq!(report(&key, 7, "unknown"), report(&key, 7, "unknown"));
        assert_ne!(report(&key, 7, "unknown"), report(&key, 7, "committed"));
        assert_ne!(report(&key, 7, "unknown"), report(&key, 8, "unknown"));
        let a = Invocations::new("server-a");
        // A restart of the same holder happens later.
        std::thread::sleep(std::time::Duration::from_millis(2));
        let b = Invocations::new("server-a");
        let (a1, a2, b1) = (a.next(), a.next(), b.next());
        assert_ne!(claim(&key, &a1), claim(&key, &a2));
        assert_ne!(a1, b1, "a restarted process must not repeat a tag");
    }
}
