//! Cluster administration: each node's status, finding the leader, forming the cluster and
//! changing its membership.

use std::time::Duration;

use ledger_proto::pb;
use ledger_proto::pb::admin_client::AdminClient;

use crate::error::ClientError;
use crate::ledger::LedgerClient;

/// Deadline of one status call; a node that does not answer in this time is down for the
/// purpose of finding the leader.
const STATUS_TIMEOUT_MS: u64 = 1_000;
/// Deadline of a status call with the state digest, which streams the node's whole
/// state through SHA-256 (seconds at millions of records).
const DIGEST_TIMEOUT_MS: u64 = 600_000;

impl LedgerClient {
    /// The status of endpoint `i`, without retries: it is that node's view that is asked.
    /// Needs the operator key: a tenant key is refused (`PERMISSION_DENIED`).
    pub async fn status_of(&self, i: usize) -> Result<pb::StatusResponse, ClientError> {
        self.status_with(i, false).await
    }

    /// The status of endpoint `i` with a digest of its whole ledger state, to check that
    /// replicas agree (costs the node one serialisation of its state). Needs the operator
    /// key.
    pub async fn status_with_digest(&self, i: usize) -> Result<pb::StatusResponse, ClientError> {
        self.status_with(i, true).await
    }

    async fn status_with(
        &self,
        i: usize,
        with_state_digest: bool,
    ) -> Result<pb::StatusResponse, ClientError> {
        let timeout_ms = if with_state_digest {
            DIGEST_TIMEOUT_MS
        } else {
            STATUS_TIMEOUT_MS
        };
        self.transport()
            .status_of(i, with_state_digest, timeout_ms)
            .await
    }

    /// The leader's id and address as the first answering node reports it, and makes the
    /// leader the preferred endpoint. `None` when no node knows a leader. Any API key.
    pub async fn find_leader(&self) -> Option<(u64, String)> {
        for i in 0..self.transport().endpoints().len() {
            let Ok(answer) = self.transport().leader_of(i, STATUS_TIMEOUT_MS).await else {
                continue;
            };
            let (Some(leader), Some(addr)) = (answer.leader_id, answer.leader_addr) else {
                continue;
            };
            self.transport().prefer(&addr);
            return Some((leader, addr));
        }
        None
    }

    /// Waits until some node knows a leader, up to `timeout_ms`.
    pub async fn wait_for_leader(&self, timeout_ms: u64) -> Result<(u64, String), ClientError> {
        let deadline = tokio::time::Instant::now() + Duration::from_millis(timeout_ms);
        loop {
            if let Some(leader) = self.find_leader().await {
                return Ok(leader);
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(ClientError::Unavailable {
                    attempts: 0,
                    last: format!("no leader within {timeout_ms} ms"),
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Forms a new cluster of `members` (id, address) through the first endpoint.
    pub async fn initialize(&self, members: &[(u64, String)]) -> Result<(), ClientError> {
        let t = self.transport();
        let message = pb::InitializeRequest {
            members: members
                .iter()
                .map(|(id, addr)| pb::Member {
                    node_id: *id,
                    addr: addr.clone(),
                })
                .collect(),
        };
        AdminClient::new(t.channel(0))
            .initialize(t.request(message))
            .await
            .map(|_| ())
            .map_err(ClientError::from_status)
    }

    /// Writes a backup of the whole ledger, as the leader holds it now, to `out` (operator
    /// key). Restore it into a new cluster with `ledger-node restore`.
    pub async fn backup(&self, out: &mut dyn std::io::Write) -> Result<Backup, ClientError> {
        self.find_leader().await;
        let t = self.transport();
        let mut chunks = t
            .call(|ch| {
                let request = t.request(pb::BackupRequest {});
                async move { AdminClient::new(ch).backup(request).await }
            })
            .await?
            .into_inner();
        let mut bytes = 0;
        loop {
            let chunk = chunks
                .message()
                .await
                .map_err(ClientError::from_status)?
                .ok_or_else(|| {
                    ClientError::Malformed("the backup ended before its digest".into())
                })?;
            out.write_all(&chunk.data)
                .map_err(|e| ClientError::Malformed(format!("writing the backup: {e}")))?;
            bytes += chunk.data.len() as u64;
            if let Ok(state_digest) = <[u8; 32]>::try_from(chunk.state_digest.as_slice()) {
                return Ok(Backup {
                    bytes,
                    applied_index: chunk.applied_index,
                    state_digest,
                });
            }
        }
    }

    /// Adds a learner (it catches up before this returns).
    pub async fn add_learner(
        &self,
        node_id: u64,
        addr: &str,
    ) -> Result<pb::MembershipResponse, ClientError> {
        let t = self.transport();
        let message = pb::AddLearnerRequest {
            member: Some(pb::Member {
                node_id,
                addr: addr.to_owned(),
            }),
        };
        t.call(|ch| {
            let request = t.request(message.clone());
            async move { AdminClient::new(ch).add_learner(request).await }
        })
        .await
        .map(|r| r.into_inner())
    }

    /// Makes `voters` the voting members.
    pub async fn change_membership(
        &self,
        voters: Vec<u64>,
        retain: bool,
    ) -> Result<pb::MembershipResponse, ClientError> {
        let t = self.transport();
        let message = pb::ChangeMembershipRequest { voters, retain };
        t.call(|ch| {
            let request = t.request(message.clone());
            async move { AdminClient::new(ch).change_membership(request).await }
        })
        .await
        .map(|r| r.into_inner())
    }
}

/// A backup written by [`LedgerClient::backup`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backup {
    /// Its size.
    pub bytes: u64,
    /// The log index of the state it holds.
    pub applied_index: u64,
    /// The state digest of what it holds.
    pub state_digest: [u8; 32],
}
