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
/// Upper bound on any budget in a tool policy (dispatch attempts, observations), which
/// also bounds the attempt and observation history of one record.
pub const BUDGET_MAX: u32 = 1000;
/// Longest lease any policy may grant, in milliseconds (one day).
pub const LEASE_MS_MAX: u64 = 24 * 60 * 60 * 1000;
/// Most records or command entries one sweep command may touch, so that one Raft entry
/// stays small however much is due.
pub const SWEEP_LIMIT_MAX: u32 = 10_000;
