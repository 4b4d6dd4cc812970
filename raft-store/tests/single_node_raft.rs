//! A one-node Raft on the simulated disk: client writes come back as ledger outcomes,
//! and a node restarted on the same disk recovers its ledger. Also how the node wires
//! `Raft::new` with these types.

mod common;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use ledger_core::{ClaimOutcome, Outcome};
use ledger_raft_store::disk::{DiskRef, SimDisk};
use ledger_raft_store::types::{SnapshotData, Vote};
use ledger_raft_store::{open, LedgerRequest, LedgerRuntime, Raft, TypeConfig};
use openraft::errors::{RPCError, ReplicationClosed, StreamingError, Unreachable};
use openraft::network::RPCOption;
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, VoteRequest, VoteResponse,
};
use openraft::{AsyncRuntime, BasicNode, Config, OptionalSend, RaftNetworkFactory, RaftNetworkV2};

/// A network for a cluster of one: there is never anybody to call.
struct NoPeers;

fn unreachable() -> Unreachable<TypeConfig> {
    Unreachable::new(&std::io::Error::other("single-node cluster has no peers"))
}

impl RaftNetworkFactory<TypeConfig> for NoPeers {
    type Network = NoPeers;

    async fn new_client(&mut self, _target: u64, _node: &BasicNode) -> Self::Network {
        NoPeers
    }
}

impl RaftNetworkV2<TypeConfig> for NoPeers {
    type SnapshotData = SnapshotData;

    async fn append_entries(
        &mut self,
        _rpc: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<TypeConfig>, RPCError<TypeConfig>> {
        Err(RPCError::Unreachable(unreachable()))
    }

    async fn vote(
        &mut self,
        _rpc: VoteRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        Err(RPCError::Unreachable(unreachable()))
    }

    async fn full_snapshot(
        &mut self,
        _vote: Vote,
        _snapshot: ledger_raft_store::types::Snapshot,
        _cancel: impl Future<Output = ReplicationClosed> + OptionalSend + 'static,
        _option: RPCOption,
    ) -> Result<SnapshotResponse<TypeConfig>, StreamingError<TypeConfig>> {
        Err(StreamingError::Unreachable(unreachable()))
    }
}

const WAIT: Option<Duration> = Some(Duration::from_secs(10));

async fn start(disk: DiskRef) -> (Raft, ledger_raft_store::LedgerReader) {
    let (log_store, state_machine) = open(disk).await.expect("open store");
    let reader = state_machine.reader();
    let config = Arc::new(Config::default().validate().expect("valid config"));
    let raft = Raft::new(NODE_ID, config, NoPeers, log_store, state_machine)
        .await
        .expect("raft starts");
    (raft, reader)
}

async fn write(raft: &Raft, commands: Vec<ledger_core::Command>) -> Vec<Outcome> {
    let request = LedgerRequest::at(STAMPED_AT_MS, commands);
    raft.client_write(request)
        .await
        .expect("client write")
        .data
        .outcomes
}

/// First life: initialize, write, snapshot, write again. Returns the ledger bytes and
/// the last applied index at shutdown.
async fn first_life(disk: DiskRef) -> (Vec<u8>, Option<u64>) {
    let (raft, reader) = start(disk).await;
    let members = BTreeMap::from([(NODE_ID, BasicNode::new("local"))]);
    raft.initialize(members).await.expect("initialize");
    raft.wait(WAIT)
        .current_leader(NODE_ID, "leader")
        .await
        .expect("elected");

    let outcomes = write(&raft, setup_commands()).await;
    assert_eq!(outcomes, vec![Outcome::Configured, Outcome::Configured]);
    let retry = vec![claim("c-1", "refund-1"), claim("c-1", "refund-1")];
    let outcomes = write(&raft, retry).await;
    assert_eq!(outcomes.len(), 2, "one outcome per command");
    assert!(matches!(
        outcomes[0],
        Outcome::Claim(ClaimOutcome::Proceed(_))
    ));
    assert_eq!(
        outcomes[1], outcomes[0],
        "a retried command id replays its outcome"
    );

    raft.trigger().snapshot().await.expect("trigger snapshot");
    raft.wait(WAIT)
        .metrics(|m| m.snapshot.is_some(), "snapshot built")
        .await
        .expect("snapshot built");
    let outcomes = write(&raft, vec![claim("c-2", "refund-2")]).await;
    assert!(matches!(
        outcomes[0],
        Outcome::Claim(ClaimOutcome::Proceed(_))
    ));

    let state = (
        reader.read(|l| l.to_snapshot()).expect("read"),
        reader.last_applied_index(),
    );
    raft.shutdown().await.expect("shutdown");
    state
}

/// Writes through a fresh one-node cluster, cuts the power and restarts on the same disk:
/// the node recovers the ledger from its snapshot and log.
async fn write_power_fail_restart() {
    let disk = Arc::new(SimDisk::new());
    let (ledger_before, applied_before) = first_life(disk.clone()).await;

    disk.power_fail(1).expect("power failure");
    let (raft, reader) = start(disk).await;
    raft.wait(WAIT)
        .current_leader(NODE_ID, "re-elected")
        .await
        .expect("elected");
    raft.wait(WAIT)
        .applied_index_at_least(applied_before, "recovered")
        .await
        .expect("applied");
    assert_eq!(
        reader.read(|l| l.to_snapshot()).expect("read"),
        ledger_before
    );
    raft.shutdown().await.expect("shutdown");
}

#[test]
fn client_writes_return_outcomes_and_survive_restart() {
    LedgerRuntime::run(write_power_fail_restart());
}

/// The same seed gives the same run twice in one process: madsim records every random
/// draw, and when it happened, and compares the second run with the first. One node
/// exercises the runtime and the storage path only; multi-node determinism (where tokio's
/// RNG-sharded watch showed up) is the simulation tests' job.
#[cfg(madsim)]
#[test]
fn simulated_run_is_deterministic() {
    madsim::runtime::Runtime::check_determinism(7, madsim::Config::default(), || {
        write_power_fail_restart()
    });
}
