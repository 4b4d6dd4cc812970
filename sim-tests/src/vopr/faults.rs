//! Carrying out a plan's cluster faults, one after the other: inject, hold, heal, then
//! require that the members agree on a leader again within a bound (a cluster that
//! cannot recover from a healed fault is a failure too).
//!
//! Message loss, delay and reordering are the simulator's network settings (madsim
//! delivers each message after a latency drawn from a range, so messages overtake each
//! other); the background conditions are restored after a heavier burst.

use std::time::Duration;

use madsim::net::NetSim;
use madsim::rand::{seq::SliceRandom, thread_rng, Rng};

use super::plan::{Chaos, ClockFault, FaultEvent};
use crate::cluster::Cluster;

/// How long the members may take to agree on a leader after a fault is healed.
const RECOVERY_TIMEOUT: Duration = Duration::from_secs(60);

/// Sets the network's loss and latency (`None`: the simulator's defaults, no loss).
pub fn set_network(chaos: Option<Chaos>) {
    NetSim::current().update_config(|net| match chaos {
        Some(c) => {
            net.packet_loss_rate = c.loss_rate;
            net.send_latency = Duration::from_millis(1)..Duration::from_millis(c.latency_ms_max);
        }
        None => {
            net.packet_loss_rate = 0.0;
            net.send_latency = Duration::from_millis(1)..Duration::from_millis(10);
        }
    });
}

async fn leader_or_any(cluster: &Cluster) -> u64 {
    let members = cluster.ids();
    match cluster
        .wait_for_leader(&members, Duration::from_secs(10))
        .await
    {
        Ok(leader) => leader,
        Err(_) => *members.choose(&mut thread_rng()).expect("members"),
    }
}

async fn victim(cluster: &Cluster, leader: bool) -> u64 {
    if leader {
        leader_or_any(cluster).await
    } else {
        *cluster.ids().choose(&mut thread_rng()).expect("members")
    }
}

async fn hold(ms: u64) {
    tokio::time::sleep(Duration::from_millis(ms)).await;
}

/// Injects `event`, holds it, heals it, and waits for a leader again.
pub async fn inject(cluster: &Cluster, event: &FaultEvent, background: Option<Chaos>) {
    let trace = cluster.trace();
    trace.note(format!("fault: {event:?}"));
    match event {
        FaultEvent::Partition { minority, hold_ms } => {
            let mut members = cluster.ids();
            members.shuffle(&mut thread_rng());
            let majority = members.split_off(*minority);
            cluster.partition(&[members, majority]);
            hold(*hold_ms).await;
            cluster.heal();
        }
        FaultEvent::OneWayLink { hold_ms } => {
            let members = cluster.ids();
            let from = if thread_rng().gen_bool(0.5) {
                leader_or_any(cluster).await
            } else {
                *members.choose(&mut thread_rng()).expect("members")
            };
            let others: Vec<u64> = members.into_iter().filter(|m| *m != from).collect();
            let to = *others.choose(&mut thread_rng()).expect("two members");
            cluster.cut_one_way(from, to);
            hold(*hold_ms).await;
            cluster.heal();
        }
        FaultEvent::IsolateLeader { hold_ms } => {
            let leader = leader_or_any(cluster).await;
            cluster.isolate(leader);
            hold(*hold_ms).await;
            cluster.heal();
        }
        FaultEvent::CutLeaderFromPeers { hold_ms } => {
            let leader = leader_or_any(cluster).await;
            cluster.cut_from_peers(leader);
            hold(*hold_ms).await;
            cluster.heal();
        }
        FaultEvent::Mute { hold_ms } => {
            let node = victim(cluster, thread_rng().gen_bool(0.5)).await;
            cluster.mute(node);
            hold(*hold_ms).await;
            cluster.heal();
        }
        FaultEvent::Chaos { chaos, hold_ms } => {
            set_network(Some(*chaos));
            hold(*hold_ms).await;
            set_network(background);
            trace.note(format!("network back to {background:?}"));
        }
        FaultEvent::Crash { leader, down_ms } => {
            let node = victim(cluster, *leader).await;
            cluster.crash(node);
            hold(*down_ms).await;
            cluster.restart(node);
        }
        FaultEvent::PowerFail { leader, down_ms } => {
            let node = victim(cluster, *leader).await;
            cluster.power_fail(node);
            hold(*down_ms).await;
            cluster.restart(node);
        }
        FaultEvent::BitFlip { leader, down_ms } => {
            let node = victim(cluster, *leader).await;
            cluster.power_fail(node);
            // In the log or its metadata, which a node checks when it opens. Damage to
            // the ledger's tables is found when read and stops the node while it runs
            // (raft-store's corruption tests); the checkers here read every replica.
            let _ = cluster
                .flip_bit(node, Some(ledger_raft_store::Keyspace::Log))
                .or_else(|| cluster.flip_bit(node, Some(ledger_raft_store::Keyspace::Meta)));
            hold(*down_ms).await;
            cluster.restart(node);
        }
        FaultEvent::ClockJump { secs } => {
            madsim::time::TimeHandle::current().advance(Duration::from_secs(*secs));
            trace.note(format!("every clock jumped {secs} s forward"));
        }
        FaultEvent::WrongClock {
            fault,
            leader,
            hold_ms,
        } => {
            let node = victim(cluster, *leader).await;
            match *fault {
                ClockFault::Ahead { ms } => cluster.step_wall_clock(node, ms as i64),
                ClockFault::Behind { ms } => cluster.step_wall_clock(node, -(ms as i64)),
                ClockFault::Drift { ppm } => cluster.drift_clock(node, ppm),
            }
            hold(*hold_ms).await;
            cluster.correct_clock(node);
        }
        FaultEvent::ReplaceMember => {
            let spare = cluster.all_ids().into_iter().max().expect("machines");
            let leave = *cluster.ids().choose(&mut thread_rng()).expect("members");
            cluster
                .replace_member(spare, leave)
                .await
                .unwrap_or_else(|e| panic!("membership change failed: {e}"));
        }
    }
    let leader = cluster
        .wait_for_leader(&cluster.ids(), RECOVERY_TIMEOUT)
        .await
        .unwrap_or_else(|e| panic!("no recovery after {event:?}: {e}"));
    trace.note(format!("recovered: node {leader} leads"));
}
