//! Snapshots: the whole ledger as deterministic bytes, and back.
//!
//! The encoding is bincode 2 (standard configuration) of ordered maps, so one state has
//! exactly one encoding and replicas can compare snapshots byte for byte. The state is
//! wrapped in a versioned enum: a future format adds a variant and a migration, and old
//! snapshots stay readable. Indexes and per-tenant usage counters are not stored; they
//! are rebuilt on restore, and every record's invariants are checked before the snapshot
//! is accepted. Tombstones of collected records are state, and are stored.
//!
//! Versions: V1, the first format, is read and migrated by [`v1`]; V2 (written now) adds
//! record amendments and the provider timing, target fields and retry window of tool
//! policies, tombstones of collected records, and the tombstone window and quotas of
//! tenant settings (V1 tenants get the defaults).

use serde::{Deserialize, Serialize};

use crate::index::{Entries, Indexes};
use crate::ledger::{Ledger, State};
use crate::usage::Usage;

mod v1;

/// Largest snapshot accepted when decoding, so corrupt length fields cannot make the
/// decoder allocate without bound.
pub const SNAPSHOT_BYTES_MAX: usize = 1 << 34;

/// What is written. Variants encode by position, so every old version keeps its place.
#[derive(Serialize)]
enum SnapshotRef<'a> {
    /// Only ever read; here so that V2 encodes as the second variant.
    #[allow(dead_code)]
    V1(&'a v1::StateV1),
    V2(&'a State),
}

/// What is read.
#[derive(Deserialize)]
enum SnapshotOwned {
    V1(v1::StateV1),
    V2(State),
}

/// Why snapshot bytes were refused.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// The bytes do not decode as any known snapshot version.
    #[error("snapshot does not decode: {0}")]
    Decode(#[from] bincode::error::DecodeError),
    /// The bytes decode but describe an impossible ledger.
    #[error("snapshot is inconsistent: {0}")]
    Inconsistent(String),
}

fn config() -> impl bincode::config::Config {
    bincode::config::standard().with_limit::<SNAPSHOT_BYTES_MAX>()
}

impl Ledger {
    /// The whole state as bytes; equal ledgers give equal bytes.
    pub fn to_snapshot(&self) -> Vec<u8> {
        bincode::serde::encode_to_vec(SnapshotRef::V2(&self.state), config())
            .expect("encoding the ledger into memory cannot fail")
    }

    /// Restores a ledger from [`Ledger::to_snapshot`] bytes.
    pub fn from_snapshot(bytes: &[u8]) -> Result<Ledger, SnapshotError> {
        let (decoded, read): (SnapshotOwned, usize) =
            bincode::serde::decode_from_slice(bytes, config())?;
        if read != bytes.len() {
            return Err(SnapshotError::Inconsistent(format!(
                "{} trailing bytes",
                bytes.len() - read
            )));
        }
        let state = match decoded {
            SnapshotOwned::V1(old) => State::from(old),
            SnapshotOwned::V2(state) => state,
        };
        let mut index = Indexes::default();
        let mut usage = Usage::default();
        for (key, rec) in &state.effects {
            check_slot(key, rec).map_err(SnapshotError::Inconsistent)?;
            if *key != rec.key {
                return Err(SnapshotError::Inconsistent(format!(
                    "record {} under key {key}",
                    rec.key
                )));
            }
            rec.check_invariants()
                .map_err(SnapshotError::Inconsistent)?;
            if rec
                .latest_token()
                .is_some_and(|t| t >= state.next_fencing_token)
            {
                return Err(SnapshotError::Inconsistent(format!(
                    "{key}: token at or past next_fencing_token"
                )));
            }
            index.replace(key, None, Some(&Entries::of(rec)));
            usage.add_record(rec);
        }
        for (key, tombstone) in &state.tombstones {
            if *key != tombstone.key || state.effects.contains_key(key) {
                return Err(SnapshotError::Inconsistent(format!(
                    "tombstone of {} under key {key}, or next to its record",
                    tombstone.key
                )));
            }
            index
                .tombstone_expiry
                .insert((tombstone.expires_at_ms, key.clone()));
            usage.add_tombstone(tombstone);
        }
        for ((caller, id), entry) in &state.commands {
            index
                .command_expiry
                .insert((entry.expires_at_ms, caller.clone(), id.clone()));
        }
        Ok(Ledger {
            state,
            index,
            usage,
        })
    }
}

/// A record is a slot (`base#i`, with `i` below its count) exactly when its key names
/// one: slot groups are indexed and collected by their key.
fn check_slot(
    key: &crate::key::EffectKey,
    rec: &crate::record::EffectRecord,
) -> Result<(), String> {
    let consistent = match (rec.slot, key.slot()) {
        (None, None) => true,
        (Some(slot), Some((_, index))) => slot.index == index && index < slot.count,
        _ => false,
    };
    if consistent {
        Ok(())
    } else {
        Err(format!("{key}: slot {:?} does not match the key", rec.slot))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::{Caller, Command, CommandBody, Declaration};
    use crate::policy::{ReplayClass, TenantSettings, ToolName, ToolPolicy, ToolRef};
    use crate::record::Authority;
    use crate::EffectKey;

    fn ledger_with_one_effect() -> Ledger {
        let mut ledger = Ledger::new();
        let tool = ToolRef {
            provider: "pay".into(),
            name: "refund".into(),
            contract_version: "v1".into(),
        };
        let bodies = [
            CommandBody::PutTenant {
                tenant: "acme".into(),
                settings: TenantSettings::default(),
            },
            CommandBody::PutToolPolicy {
                tenant: "acme".into(),
                tool: ToolName {
                    provider: "pay".into(),
                    name: "refund".into(),
                },
                policy: ToolPolicy::for_class(ReplayClass::KeyedIdempotent),
            },
            CommandBody::Claim {
                declaration: Declaration {
                    key: EffectKey::new("acme", "ns", "r-1"),
                    workflow_id: "wf".into(),
                    tool,
                    authority: Authority::default(),
                    target: "order:1".into(),
                    intent_json: r#"{"amount":5}"#.into(),
                },
                holder: "h".into(),
                lease_ms: None,
                confirmation: None,
            },
        ];
        for (i, body) in bodies.into_iter().enumerate() {
            let command = Command {
                command_id: format!("c-{i}"),
                caller: Caller::Operator,
                body,
            };
            ledger.apply(&command, 1_000 + i as u64);
        }
        ledger
    }

    #[test]
    fn a_v1_snapshot_is_read_and_migrated() {
        #[derive(Serialize)]
        enum OldRef<'a> {
            V1(&'a v1::StateV1),
        }
        let ledger = ledger_with_one_effect();
        let old = v1::downgrade(&ledger.state);
        let bytes = bincode::serde::encode_to_vec(OldRef::V1(&old), config()).unwrap();
        let restored = Ledger::from_snapshot(&bytes).expect("a V1 snapshot restores");
        // Default policies migrate to themselves: the new fields take their defaults.
        assert_eq!(restored, ledger);
        assert_ne!(restored.to_snapshot(), bytes, "written as V2");
    }

    #[test]
    fn migrated_policies_stay_valid_when_retention_is_shorter_than_a_day() {
        let mut ledger = ledger_with_one_effect();
        for config in ledger.state.tenants.values_mut() {
            for policy in config.tools.values_mut() {
                policy.retention_ms = 3_600_000;
                policy.provider_horizon_ms = 60_000;
            }
        }
        let old = v1::downgrade(&ledger.state);
        let migrated = State::from(old);
        for config in migrated.tenants.values() {
            for policy in config.tools.values() {
                assert_eq!(policy.retry_window_ms, 3_600_000);
                assert_eq!(policy.validate(), Ok(()));
            }
        }
    }
}
