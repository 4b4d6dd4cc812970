//! The replicated state machine: the effect ledger in memory, snapshots on disk.
//!
//! Committed entries are applied to an in-memory [`Ledger`]; each normal entry's
//! commands run in order at the stamp the leader put on the entry, never at a local
//! clock. Durability comes from two places: snapshots, which are written and synced to
//! [`Keyspace::Snapshot`](crate::disk::Keyspace::Snapshot), and the Raft log itself. On
//! restart the state machine starts from the kept snapshot and openraft re-applies the
//! committed entries after it (the log store keeps the committed log id for that).
//!
//! The ledger sits behind an `RwLock` shared with any number of [`LedgerReader`]s, so the
//! node can serve reads while the state machine belongs to openraft.

use std::io;
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard};

use futures::{Stream, TryStreamExt};
use ledger_core::Ledger;
use openraft::entry::RaftEntry;
use openraft::storage::{EntryResponder, RaftStateMachine};
use openraft::{EntryPayload, OptionalSend, RaftSnapshotBuilder};

use crate::disk::DiskRef;
use crate::error::StoreError;
use crate::runtime::blocking;
use crate::snapshot::{decode_meta, decode_snapshot, encode_snapshot, read_current, write_current};
use crate::types::{
    Entry, LedgerResponse, LogId, Snapshot, SnapshotData, SnapshotMeta, StoredMembership,
    TypeConfig,
};

/// The ledger and the Raft position it reflects, always changed together.
#[derive(Debug, Default)]
struct Applied {
    ledger: Ledger,
    last_applied: Option<LogId>,
    membership: StoredMembership,
}

impl Applied {
    fn apply(&mut self, entry: Entry) -> Result<LedgerResponse, StoreError> {
        let log_id = entry.log_id();
        if let Some(last) = &self.last_applied {
            if last.index() >= log_id.index() {
                return Err(StoreError::Inconsistent(format!(
                    "entry {log_id} applied after {last}"
                )));
            }
        }
        let response = match entry.payload {
            EntryPayload::Blank => LedgerResponse::default(),
            EntryPayload::Normal(request) => LedgerResponse {
                outcomes: request
                    .commands
                    .iter()
                    .map(|command| self.ledger.apply_stamped(command, request.stamp))
                    .collect(),
            },
            EntryPayload::Membership(membership) => {
                self.membership = StoredMembership::new(Some(log_id), membership);
                LedgerResponse::default()
            }
        };
        self.last_applied = Some(log_id);
        Ok(response)
    }
}

/// openraft's state machine and snapshot builder for the ledger. Cheap to clone: clones
/// share the state and the disk (openraft uses a clone as the snapshot builder).
#[derive(Clone)]
pub struct LedgerStateMachine {
    applied: Arc<RwLock<Applied>>,
    disk: DiskRef,
    /// Metadata of the snapshot on disk, `None` before the first. Its lock also
    /// serialises snapshot writes, so an older build never replaces a newer snapshot.
    kept_snapshot: Arc<Mutex<Option<SnapshotMeta>>>,
}

impl std::fmt::Debug for LedgerStateMachine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LedgerStateMachine").finish_non_exhaustive()
    }
}

/// A read-only handle on the applied ledger, for serving queries. Cheap to clone.
#[derive(Clone)]
pub struct LedgerReader {
    applied: Arc<RwLock<Applied>>,
}

impl std::fmt::Debug for LedgerReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LedgerReader").finish_non_exhaustive()
    }
}

impl LedgerReader {
    fn lock(&self) -> RwLockReadGuard<'_, Applied> {
        // Poisoned only if applying an entry panicked (a ledger invariant assertion):
        // openraft has then stopped the node, and no decision may rest on that state.
        self.applied
            .read()
            .expect("ledger state poisoned: an apply panicked and the node must restart")
    }

    /// Runs `f` on the ledger as of the last applied entry. Holds a read lock for the
    /// duration of `f`, which delays applying; keep `f` short.
    ///
    /// # Panics
    ///
    /// If an earlier apply panicked (the node is then stopped).
    pub fn read<R>(&self, f: impl FnOnce(&Ledger) -> R) -> R {
        f(&self.lock().ledger)
    }

    /// Runs `f` on the ledger and the index of the last entry applied to it, read together
    /// so that they describe one moment.
    pub fn read_at<R>(&self, f: impl FnOnce(&Ledger, Option<u64>) -> R) -> R {
        let applied = self.lock();
        f(
            &applied.ledger,
            applied.last_applied.as_ref().map(|l| l.index()),
        )
    }

    /// The log id of the last applied entry.
    pub fn last_applied(&self) -> Option<LogId> {
        self.lock().last_applied
    }

    /// The index of the last applied entry.
    pub fn last_applied_index(&self) -> Option<u64> {
        self.lock()
            .last_applied
            .as_ref()
            .map(|log_id| log_id.index())
    }
}

impl LedgerStateMachine {
    /// Opens the state machine on `disk`, restored from the snapshot kept there if any.
    pub async fn open(disk: DiskRef) -> Result<LedgerStateMachine, StoreError> {
        let reading = disk.clone();
        let restored = blocking(move || {
            read_current(&reading)?
                .map(|bytes| decode_snapshot(&bytes))
                .transpose()
        })
        .await?;
        let (applied, kept) = match restored {
            None => (Applied::default(), None),
            Some((meta, ledger)) => {
                let applied = Applied {
                    ledger,
                    last_applied: meta.last_log_id,
                    membership: meta.last_membership.clone(),
                };
                (applied, Some(meta))
            }
        };
        Ok(LedgerStateMachine {
            applied: Arc::new(RwLock::new(applied)),
            disk,
            kept_snapshot: Arc::new(Mutex::new(kept)),
        })
    }

    /// A read handle that stays valid after the state machine moves into `Raft::new`.
    pub fn reader(&self) -> LedgerReader {
        LedgerReader {
            applied: self.applied.clone(),
        }
    }

    /// Writes a snapshot to disk and syncs; with `only_if_newer`, skips it unless it
    /// covers more of the log than the kept one.
    async fn keep_snapshot(
        &self,
        meta: SnapshotMeta,
        bytes: Vec<u8>,
        only_if_newer: bool,
    ) -> Result<Vec<u8>, StoreError> {
        let disk = self.disk.clone();
        let kept_snapshot = self.kept_snapshot.clone();
        blocking(move || {
            let mut kept = kept_snapshot.lock().map_err(|_| StoreError::Poisoned)?;
            let newer = kept
                .as_ref()
                .is_none_or(|kept| meta.last_log_id > kept.last_log_id);
            if newer || !only_if_newer {
                write_current(&disk, bytes.clone())?;
                *kept = Some(meta);
            }
            Ok(bytes)
        })
        .await
    }
}

impl RaftSnapshotBuilder<TypeConfig> for LedgerStateMachine {
    type SnapshotData = SnapshotData;

    async fn build_snapshot(&mut self) -> Result<Snapshot, io::Error> {
        let (meta, bytes) = {
            let applied = self.applied.read().map_err(|_| StoreError::Poisoned)?;
            encode_snapshot(&applied.ledger, &applied.last_applied, &applied.membership)?
        };
        let bytes = self.keep_snapshot(meta.clone(), bytes, true).await?;
        Ok(Snapshot {
            meta,
            snapshot: SnapshotData::new(bytes),
        })
    }
}

impl RaftStateMachine<TypeConfig> for LedgerStateMachine {
    type SnapshotData = SnapshotData;
    type SnapshotBuilder = Self;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), io::Error> {
        let applied = self.applied.read().map_err(|_| StoreError::Poisoned)?;
        Ok((applied.last_applied, applied.membership.clone()))
    }

    async fn apply<Strm>(&mut self, mut entries: Strm) -> Result<(), io::Error>
    where
        Strm: Stream<Item = Result<EntryResponder<TypeConfig>, io::Error>> + Unpin + OptionalSend,
    {
        while let Some((entry, responder)) = entries.try_next().await? {
            let response = {
                let mut applied = self.applied.write().map_err(|_| StoreError::Poisoned)?;
                applied.apply(entry)?
            };
            if let Some(responder) = responder {
                responder.send(response);
            }
        }
        Ok(())
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        snapshot: SnapshotData,
    ) -> Result<(), io::Error> {
        let bytes = snapshot.into_inner();
        let ((decoded_meta, ledger), bytes) =
            blocking(move || decode_snapshot(&bytes).map(|decoded| (decoded, bytes))).await?;
        if decoded_meta != *meta {
            return Err(StoreError::Inconsistent(format!(
                "snapshot data covers {decoded_meta}, its metadata says {meta}"
            ))
            .into());
        }
        // Kept first: if that fails, the state machine is untouched.
        self.keep_snapshot(decoded_meta, bytes, false).await?;
        let mut applied = self.applied.write().map_err(|_| StoreError::Poisoned)?;
        *applied = Applied {
            ledger,
            last_applied: meta.last_log_id,
            membership: meta.last_membership.clone(),
        };
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot>, io::Error> {
        let disk = self.disk.clone();
        let current = blocking(move || {
            read_current(&disk)?
                .map(|bytes| decode_meta(&bytes).map(|meta| (meta, bytes)))
                .transpose()
        })
        .await?;
        Ok(current.map(|(meta, bytes)| Snapshot {
            meta,
            snapshot: SnapshotData::new(bytes),
        }))
    }
}

#[cfg(test)]
mod tests {
    use ledger_core::{Caller, Command, CommandBody, Outcome, TenantSettings};
    use openraft::vote::RaftLeaderIdExt;
    use openraft::RaftTypeConfig;

    use super::*;
    use crate::types::LedgerRequest;

    fn log_id(index: u64) -> LogId {
        LogId::new(
            <TypeConfig as RaftTypeConfig>::LeaderId::new_committed(1, 1),
            index,
        )
    }

    fn put_tenant(command_id: &str) -> Command {
        Command {
            command_id: command_id.into(),
            caller: Caller::Operator,
            body: CommandBody::PutTenant {
                tenant: "acme".into(),
                settings: TenantSettings::default(),
            },
        }
    }

    #[test]
    fn normal_entry_answers_one_outcome_per_command_at_stamped_time() {
        let mut applied = Applied::default();
        let request = LedgerRequest::at(5_000, vec![put_tenant("a"), put_tenant("b")]);
        let response = applied
            .apply(Entry::new_normal(log_id(1), request))
            .expect("apply");
        assert_eq!(
            response.outcomes,
            vec![Outcome::Configured, Outcome::Configured]
        );
        assert_eq!(applied.ledger.clock_ms(), 5_000);
        assert_eq!(applied.last_applied, Some(log_id(1)));
    }

    #[test]
    fn blank_entry_answers_nothing_and_advances() {
        let mut applied = Applied::default();
        let response = applied.apply(Entry::new_blank(log_id(1))).expect("apply");
        assert!(response.outcomes.is_empty());
        assert_eq!(applied.last_applied, Some(log_id(1)));
    }

    #[test]
    fn entry_at_or_before_last_applied_is_refused() {
        let mut applied = Applied::default();
        applied.apply(Entry::new_blank(log_id(2))).expect("apply");
        let again = applied.apply(Entry::new_blank(log_id(2)));
        assert!(matches!(again, Err(StoreError::Inconsistent(_))));
        let earlier = applied.apply(Entry::new_blank(log_id(1)));
        assert!(matches!(earlier, Err(StoreError::Inconsistent(_))));
        assert_eq!(applied.last_applied, Some(log_id(2)));
    }
}
