//! Backups: a ledger saved from a point-in-time view and restored into a node that has
//! never been part of a cluster gives the same state digest, keeps its records, applies
//! what comes next, and is refused by a node that holds anything already.

mod common;

use std::sync::Arc;

use common::*;
use futures::stream;
use ledger_core::EffectKey;
use ledger_raft_store::disk::{DiskRef, SimDisk};
use ledger_raft_store::{open, restore, LedgerRuntime, StreamDigest};
use openraft::storage::RaftStateMachine;
use openraft::AsyncRuntime;

/// A state machine on its own disk with the setup and `claims` applied.
async fn applied(claims: &[&str]) -> ledger_raft_store::LedgerStateMachine {
    let disk: DiskRef = Arc::new(SimDisk::new());
    let (_, mut state_machine) = open(disk).await.expect("open");
    let mut entries = vec![
        membership_entry(1, 1, &[NODE_ID]),
        normal_entry(1, 2, STAMPED_AT_MS, setup_commands()),
    ];
    for (i, key) in claims.iter().enumerate() {
        let command = claim(&format!("c-{key}"), key);
        entries.push(normal_entry(1, 3 + i as u64, STAMPED_AT_MS, vec![command]));
    }
    let items = entries.into_iter().map(|entry| Ok((entry, None)));
    state_machine
        .apply(stream::iter(items))
        .await
        .expect("apply");
    state_machine
}

/// The backup of `state_machine` as one buffer, with the digest read from it.
fn backup_bytes(state_machine: &ledger_raft_store::LedgerStateMachine) -> (Vec<u8>, [u8; 32]) {
    let (data, _index) = state_machine
        .reader()
        .backup()
        .expect("backup")
        .expect("something applied");
    let bytes = data.to_bytes().expect("read");
    let mut digest = StreamDigest::new();
    digest.feed(&bytes).expect("a snapshot stream");
    (bytes, digest.finish())
}

#[test]
fn a_restored_backup_has_the_same_state_and_applies_what_follows() {
    LedgerRuntime::run(async {
        let source = applied(&["refund-1", "refund-2"]).await;
        let (bytes, digest) = backup_bytes(&source);
        let (source_digest, source_index) = source.reader().state_digest().expect("digest");
        assert_eq!(
            digest, source_digest,
            "the stream's digest is the state digest"
        );

        let disk: DiskRef = Arc::new(SimDisk::new());
        let restored = restore(disk.clone(), std::io::Cursor::new(bytes))
            .await
            .expect("restore");
        assert_eq!(restored.state_digest, source_digest);
        assert_eq!(restored.source_index, source_index);

        let (_, mut state_machine) = open(disk.clone()).await.expect("open after restore");
        let reader = state_machine.reader();
        assert_eq!(
            reader.last_applied_index(),
            None,
            "nothing applied in the new cluster"
        );
        assert_eq!(reader.state_digest().expect("digest").0, source_digest);
        let key = EffectKey::new(TENANT, "agent-runtime", "refund-2");
        assert!(reader.read(|l| l.get(&key)).expect("read").is_some());
        // The new cluster's first entries apply on top of the restored state.
        let next = [
            membership_entry(1, 1, &[NODE_ID]),
            normal_entry(
                1,
                2,
                STAMPED_AT_MS + 1,
                vec![claim("c-refund-3", "refund-3")],
            ),
        ];
        state_machine
            .apply(stream::iter(next.into_iter().map(|e| Ok((e, None)))))
            .await
            .expect("apply after restore");
        let third = EffectKey::new(TENANT, "agent-runtime", "refund-3");
        assert!(reader.read(|l| l.get(&third)).expect("read").is_some());
        assert!(reader.read(|l| l.get(&key)).expect("read").is_some());

        // A node that has applied anything refuses a restore, and keeps its state.
        let again = restore(disk, std::io::Cursor::new(backup_bytes(&source).0)).await;
        assert!(again.is_err(), "{again:?}");
        assert!(reader.read(|l| l.get(&third)).expect("read").is_some());
    });
}

#[test]
fn a_truncated_or_foreign_backup_is_refused() {
    LedgerRuntime::run(async {
        let (bytes, _) = backup_bytes(&applied(&["refund-1"]).await);
        for broken in [
            bytes[..bytes.len() - 3].to_vec(),
            b"not a backup at all".to_vec(),
            vec![],
        ] {
            let disk: DiskRef = Arc::new(SimDisk::new());
            let restored = restore(disk.clone(), std::io::Cursor::new(broken)).await;
            assert!(restored.is_err(), "{restored:?}");
            let (_, state_machine) = open(disk).await.expect("the node still opens");
            assert_eq!(state_machine.reader().last_applied_index(), None);
        }
    });
}
