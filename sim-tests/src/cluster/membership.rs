//! Membership change while the cluster serves: a spare machine joins as a learner, catches
//! up, and replaces a voter in one joint-consensus change; the removed node is then
//! decommissioned (killed), as an operator would retire it.
//!
//! The harness's idea of the members ([`Cluster::ids`]) follows the change, so
//! convergence and every per-replica check from then on are about the new configuration.

use std::time::Duration;

use crate::fixtures;
use crate::wait;

use super::Cluster;

/// How long one membership step may take, retries included.
const STEP_TIMEOUT: Duration = Duration::from_secs(60);

impl Cluster {
    /// Adds spare `join` as a learner, then makes it a voter in place of `leave`, and
    /// retires `leave`. Returns the new voters. Each step is retried (through the
    /// operator client, which follows the leader) until it succeeds or times out.
    pub async fn replace_member(&self, join: u64, leave: u64) -> Result<Vec<u64>, String> {
        assert!(
            !self.ids().contains(&join),
            "node {join} is already a member"
        );
        let addr = fixtures::node_addr(join).to_string();
        self.trace.note(format!(
            "adding node {join} as a learner to replace node {leave}"
        ));
        self.as_operator(move |client| async move {
            wait::until_async("the learner added", STEP_TIMEOUT, || {
                let (client, addr) = (client.clone(), addr.clone());
                async move {
                    client
                        .add_learner(join, &addr)
                        .await
                        .map_err(|e| e.to_string())
                }
            })
            .await
        })
        .await?;
        self.voters.lock().expect("voters lock").insert(join);
        let voters: Vec<u64> = self.ids().into_iter().filter(|id| *id != leave).collect();
        self.trace.note(format!(
            "node {join} caught up; changing voters to {voters:?}"
        ));
        let new_voters = voters.clone();
        self.as_operator(move |client| async move {
            wait::until_async("the membership changed", STEP_TIMEOUT, || {
                let (client, voters) = (client.clone(), new_voters.clone());
                async move {
                    client
                        .change_membership(voters, false)
                        .await
                        .map_err(|e| e.to_string())
                }
            })
            .await
        })
        .await?;
        self.voters.lock().expect("voters lock").remove(&leave);
        self.crash(leave);
        self.trace
            .note(format!("voters are now {voters:?}; node {leave} retired"));
        Ok(voters)
    }
}
