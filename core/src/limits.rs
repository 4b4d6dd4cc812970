//! Hard limits on everything a caller can send.
//!
//! Every replica checks these inside `apply`, so an oversized or malformed command is a
//! refusal recorded identically everywhere, never a panic and never an unbounded record.
//! The wire layer may check them earlier to fail fast, but the state machine does not rely
//! on it.

/// Longest tenant id, in bytes. Tenants are `[A-Za-z0-9._-]`.
pub const TENANT_BYTES_MAX: usize = 64;
/// Longest namespace, in bytes. Visible ASCII without `#`.
pub const NAMESPACE_BYTES_MAX: usize = 128;
/// Longest effect key chosen by a caller, in bytes. Visible ASCII without `#`
/// (`#` is reserved for declared slots, `key#3`).
pub const KEY_BYTES_MAX: usize = 256;
/// Most slots one declaration may create (one message to at most this many recipients).
pub const SLOTS_MAX: u32 = 1024;
/// Most bytes one declaration may store: its slots times its canonical intent (each slot
/// keeps its own copy). So a declaration may have many slots or a large intent, not both:
/// 1024 slots of a 64 KiB intent (64 MiB from one command) are refused.
pub const DECLARATION_BYTES_MAX: u64 = 4 * 1024 * 1024;
/// Longest command id, in bytes. Visible ASCII.
pub const COMMAND_ID_BYTES_MAX: usize = 128;
/// Longest free-text identifier (workflow id, holder, principal, target, tool names), in bytes.
pub const NAME_BYTES_MAX: usize = 256;
/// Largest intent as sent (JSON text before canonicalisation), in bytes.
pub const INTENT_BYTES_MAX: usize = 64 * 1024;
/// Deepest nesting of arrays and objects in an intent.
pub const INTENT_DEPTH_MAX: usize = 64;
/// Largest receipt (provider result or resource id) stored with a committed effect, in bytes.
pub const RECEIPT_BYTES_MAX: usize = 64 * 1024;
/// Longest proof, reason, observation detail or operator note, in bytes.
pub const DETAIL_BYTES_MAX: usize = 4 * 1024;
/// Most volatile fields one tool policy may exclude from the intent hash.
pub const VOLATILE_FIELDS_MAX: usize = 64;
/// Most target fields one tool policy may name (JSON pointers to the logical resource).
pub const TARGET_FIELDS_MAX: usize = 8;
/// Largest processing bound a tool policy may declare, in milliseconds (seven days).
/// Anything longer is not a bound a reconciler could wait out.
pub const PROCESSING_BOUND_MS_MAX: u64 = 7 * 24 * 60 * 60 * 1000;
/// Largest search-visibility lag a tool policy may declare, in milliseconds (seven days).
pub const VISIBILITY_LAG_MS_MAX: u64 = 7 * 24 * 60 * 60 * 1000;
/// Most not-found observations one record takes under attempts granted before its absence
/// deadline without counting them against the observation budget (they prove nothing).
/// Later ones count, so a reconciler that keeps looking too early cannot grow a record's
/// history without bound.
pub const EARLY_NOT_FOUND_MAX: usize = 32;
/// Most amendments one effect record keeps (and so accepts): a repair that needs more is
/// a new effect, not a repair.
pub const AMENDMENTS_MAX: usize = 16;
/// Upper bound on any budget in a tool policy (dispatch attempts, observations), which
/// also bounds the attempt and observation history of one record.
pub const BUDGET_MAX: u32 = 1000;
/// Longest lease any policy may grant, in milliseconds (one day).
pub const LEASE_MS_MAX: u64 = 24 * 60 * 60 * 1000;
/// Most records or command entries one sweep command may touch, so that one Raft entry
/// stays small however much is due. (A declaration's slots are collected together, so a
/// collection may exceed its limit by up to [`SLOTS_MAX`] - 1 records.)
pub const SWEEP_LIMIT_MAX: u32 = 10_000;
/// Most entries one page of a listing visits ([`crate::Ledger::list_page`] as nodes serve
/// it): a filter that few of a tenant's records match ends its page early, with where to
/// go on, instead of reading every record while applies wait. Above the largest page
/// (1,000 records), so a page whose entries all match is never cut short.
pub const LIST_PAGE_VISITS_MAX: usize = 2_048;

/// `text` as a proof, reason or observation detail the ledger accepts: whole when it fits
/// [`DETAIL_BYTES_MAX`], else its start (cut on a character boundary) and its length. A
/// sender fits what an upstream or provider said before reporting it: refused for its
/// length, a report that proves nothing happened would leave the effect unknown.
pub fn fit_detail(text: &str) -> String {
    if text.len() <= DETAIL_BYTES_MAX {
        return text.to_owned();
    }
    let tail = format!("... ({} bytes in all)", text.len());
    let mut end = DETAIL_BYTES_MAX - tail.len();
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{tail}", &text[..end])
}

/// `receipt` as a receipt the ledger accepts: whole when it fits [`RECEIPT_BYTES_MAX`],
/// else a JSON note of its length and SHA-256. Refused for its length, a receipt would
/// leave a committed effect unreported until its lease ran out.
pub fn fit_receipt(receipt: &str) -> String {
    use sha2::{Digest, Sha256};
    if receipt.len() <= RECEIPT_BYTES_MAX {
        return receipt.to_owned();
    }
    let digest: [u8; 32] = Sha256::digest(receipt.as_bytes()).into();
    serde_json::json!({
        "receipt_reduced": true,
        "receipt_bytes": receipt.len(),
        "receipt_sha256": crate::intent::hex(&digest),
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fitted_details_and_receipts_are_within_the_limits_and_short_ones_unchanged() {
        assert_eq!(fit_detail("short"), "short");
        assert_eq!(fit_receipt("{\"id\":1}"), "{\"id\":1}");
        for text in [
            "x".repeat(10_000),
            "é".repeat(5_000),
            "€".repeat(DETAIL_BYTES_MAX),
        ] {
            let fitted = fit_detail(&text);
            assert!(fitted.len() <= DETAIL_BYTES_MAX, "{}", fitted.len());
            assert!(fitted.ends_with(&format!("({} bytes in all)", text.len())));
            assert!(text.starts_with(fitted.split("...").next().unwrap()));
        }
        let exact = "x".repeat(DETAIL_BYTES_MAX);
        assert_eq!(fit_detail(&exact), exact);
        let large = "r".repeat(RECEIPT_BYTES_MAX + 1);
        let fitted = fit_receipt(&large);
        assert!(fitted.len() <= RECEIPT_BYTES_MAX);
        assert_eq!(
            fitted,
            fit_receipt(&large),
            "the same receipt, the same note"
        );
        let note: serde_json::Value = serde_json::from_str(&fitted).unwrap();
        assert_eq!(note["receipt_bytes"], serde_json::json!(large.len()));
    }
}
