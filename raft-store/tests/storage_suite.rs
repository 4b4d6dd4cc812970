//! openraft's own storage conformance suite against our log store and state machine, on
//! the simulated disk and on RocksDB.

use std::sync::Arc;

use ledger_raft_store::disk::{DiskRef, SimDisk};
use ledger_raft_store::{open, LedgerRuntime, LedgerStateMachine, RaftLogStore, TypeConfig};
use openraft::testing::log::{StoreBuilder, Suite};
use openraft::{AsyncRuntime, ErrorSubject, ErrorVerb, StorageError};

async fn open_on(
    disk: DiskRef,
) -> Result<(RaftLogStore, LedgerStateMachine), StorageError<TypeConfig>> {
    open(disk).await.map_err(|error| {
        StorageError::from_io_error(ErrorSubject::Store, ErrorVerb::Read, error.into())
    })
}

struct SimStoreBuilder;

impl StoreBuilder<TypeConfig, RaftLogStore, LedgerStateMachine> for SimStoreBuilder {
    async fn build(
        &self,
    ) -> Result<((), RaftLogStore, LedgerStateMachine), StorageError<TypeConfig>> {
        let (log_store, state_machine) = open_on(Arc::new(SimDisk::new())).await?;
        Ok(((), log_store, state_machine))
    }
}

#[test]
fn sim_disk_store_passes_openraft_suite() {
    LedgerRuntime::run(async {
        Suite::test_all(SimStoreBuilder)
            .await
            .expect("openraft storage suite");
    });
}

#[cfg(not(madsim))]
mod rocks {
    use super::*;

    /// Each store gets its own directory, removed when the guard drops.
    struct RocksStoreBuilder;

    impl StoreBuilder<TypeConfig, RaftLogStore, LedgerStateMachine, tempfile::TempDir>
        for RocksStoreBuilder
    {
        async fn build(
            &self,
        ) -> Result<(tempfile::TempDir, RaftLogStore, LedgerStateMachine), StorageError<TypeConfig>>
        {
            let dir = tempfile::tempdir().expect("temp dir");
            let disk = ledger_raft_store::RocksDisk::open(dir.path()).expect("open RocksDB");
            let (log_store, state_machine) = open_on(Arc::new(disk)).await?;
            Ok((dir, log_store, state_machine))
        }
    }

    #[test]
    fn rocks_disk_store_passes_openraft_suite() {
        LedgerRuntime::run(async {
            Suite::test_all(RocksStoreBuilder)
                .await
                .expect("openraft storage suite");
        });
    }
}
