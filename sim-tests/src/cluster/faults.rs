//! Faults the harness injects into the cluster: process crashes and power failures of
//! ledger nodes, isolation, partitions (both ways or one way), answers held on their way
//! back to a client, crashes of client machines, and one node's clock going wrong (its
//! wall clock stepped ahead or back, its oscillator drifting).
//!
//! Partitions act on the links between ledger machines only (clients keep reaching every
//! node) unless they say otherwise; [`Cluster::heal`] undoes every one of them. Message
//! loss, delay and reordering are network-wide settings of the simulator (see
//! `crate::vopr::faults`).

use madsim::net::NetSim;
use madsim::runtime::Handle;

use ledger_raft_store::disk::{BitFlip, PowerFailure};

use super::{ClientNode, Cluster};

/// Kills a client machine: every task on it stops, as in a process crash.
pub fn kill_machine(machine: &ClientNode) {
    Handle::current().kill(machine.sim_id());
}

/// Brings a killed client machine back, with no task running on it, and returns its new
/// handle (the old one spawns onto the dead incarnation).
pub fn restart_machine(machine: &ClientNode) -> ClientNode {
    let handle = Handle::current();
    handle.restart(machine.sim_id());
    ClientNode {
        sim: handle
            .get_node(machine.sim_id())
            .expect("a restarted machine exists"),
        ..machine.clone()
    }
}

impl Cluster {
    /// Kills node `id` (a process crash: its disk keeps everything written).
    pub fn crash(&self, id: u64) {
        let member = &self.members[&id];
        self.handle.kill(member.sim.id());
        *member.running.lock().expect("member lock") = None;
        self.trace.note(format!("node {id} crashed"));
    }

    /// Kills node `id` and cuts its power: writes not yet synced are lost, except a
    /// prefix the run's RNG decides, whose last write may be torn.
    pub fn power_fail(&self, id: u64) -> PowerFailure {
        self.crash(id);
        let seed: u64 = madsim::rand::random();
        let failure = self.members[&id]
            .disk
            .power_fail_torn(seed)
            .unwrap_or_else(|e| panic!("power failure of node {id}'s disk: {e}"));
        self.trace.note(format!(
            "node {id} lost power: {} unsynced batches kept, {} lost, torn: {:?}",
            failure.batches_kept, failure.batches_lost, failure.torn
        ));
        failure
    }

    /// Flips one bit of a synced value on node `id`'s disk, in `space` or anywhere,
    /// drawn from the run's RNG. The node should be down: it meets the damage when it
    /// starts. Returns what was flipped (`None`: nothing synced there).
    pub fn flip_bit(&self, id: u64, space: Option<ledger_raft_store::Keyspace>) -> Option<BitFlip> {
        let seed: u64 = madsim::rand::random();
        let flip = self.members[&id]
            .disk
            .flip_random_bit(seed, space)
            .unwrap_or_else(|e| panic!("bit flip on node {id}'s disk: {e}"));
        self.trace
            .note(format!("node {id}'s disk: bit flipped: {flip:?}"));
        flip
    }

    /// Restarts node `id` on its disk.
    pub fn restart(&self, id: u64) {
        self.handle.restart(self.members[&id].sim.id());
        self.trace.note(format!("node {id} restarted"));
    }

    /// Cuts node `id` off the network, clients included.
    pub fn isolate(&self, id: u64) {
        NetSim::current().clog_node(self.members[&id].sim.id());
        self.trace.note(format!("node {id} isolated"));
    }

    /// Reconnects an isolated node.
    pub fn reconnect(&self, id: u64) {
        NetSim::current().unclog_node(self.members[&id].sim.id());
        self.trace.note(format!("node {id} reconnected"));
    }

    /// Cuts the links between node `id` and every other ledger node, both ways; clients
    /// still reach it.
    pub fn cut_from_peers(&self, id: u64) {
        let net = NetSim::current();
        let this = self.members[&id].sim.id();
        for (peer, member) in &self.members {
            if *peer != id {
                net.clog_link(this, member.sim.id());
                net.clog_link(member.sim.id(), this);
            }
        }
        self.trace.note(format!("node {id} cut from its peers"));
    }

    /// Restores the links cut by [`Cluster::cut_from_peers`].
    pub fn mend_links(&self, id: u64) {
        let net = NetSim::current();
        let this = self.members[&id].sim.id();
        for (peer, member) in &self.members {
            if *peer != id {
                net.unclog_link(this, member.sim.id());
                net.unclog_link(member.sim.id(), this);
            }
        }
        self.trace
            .note(format!("node {id} links to its peers restored"));
    }

    /// Holds every answer from the ledger nodes to `client`: its requests still arrive and
    /// are applied, but replies wait on the links, as after a one-way partition, until
    /// [`Cluster::release_answers_to`].
    pub fn hold_answers_to(&self, client: &ClientNode) {
        let net = NetSim::current();
        for member in self.members.values() {
            net.clog_link(member.sim.id(), client.sim_id());
        }
        self.trace
            .note(format!("answers to client {} held", client.name));
    }

    /// Delivers the answers held by [`Cluster::hold_answers_to`], and later ones.
    pub fn release_answers_to(&self, client: &ClientNode) {
        let net = NetSim::current();
        for member in self.members.values() {
            net.unclog_link(member.sim.id(), client.sim_id());
        }
        self.trace
            .note(format!("answers to client {} released", client.name));
    }

    /// Kills a client machine (the holder of its grants vanishes).
    pub fn kill_client(&self, client: &ClientNode) {
        kill_machine(client);
        self.trace.note(format!("client {} killed", client.name));
    }

    /// Brings a killed client machine back, with no task running on it, and returns its
    /// new handle (the old one spawns onto the dead incarnation).
    pub fn restart_client(&self, client: &ClientNode) -> ClientNode {
        let restarted = restart_machine(client);
        self.trace.note(format!("client {} restarted", client.name));
        restarted
    }

    /// Splits the ledger machines into `groups`: every link between two machines of
    /// different groups is cut, both ways. Machines in no group keep all their links.
    pub fn partition(&self, groups: &[Vec<u64>]) {
        let net = NetSim::current();
        for (i, a) in groups.iter().enumerate() {
            for b in groups.iter().skip(i + 1) {
                for x in a {
                    for y in b {
                        net.clog_link(self.members[x].sim.id(), self.members[y].sim.id());
                        net.clog_link(self.members[y].sim.id(), self.members[x].sim.id());
                    }
                }
            }
        }
        self.trace.note(format!("partitioned into {groups:?}"));
    }

    /// Cuts the link from ledger machine `from` to `to` one way only: `to` still reaches
    /// `from`, as with a broken route or a one-way firewall rule.
    pub fn cut_one_way(&self, from: u64, to: u64) {
        NetSim::current().clog_link(self.members[&from].sim.id(), self.members[&to].sim.id());
        self.trace
            .note(format!("link {from} -> {to} cut (one way)"));
    }

    /// Cuts everything node `id` sends (to peers and clients); it still receives, so it
    /// hears a leader it can no longer answer.
    pub fn mute(&self, id: u64) {
        NetSim::current().clog_node_out(self.members[&id].sim.id());
        self.trace
            .note(format!("node {id} muted (it still receives)"));
    }

    /// Steps node `id`'s wall clock by `delta_ms` (negative: back); its monotonic clock
    /// and every other machine's clock go on as before.
    pub fn step_wall_clock(&self, id: u64, delta_ms: i64) {
        self.members[&id].clock.step_wall(delta_ms);
        self.trace.note(format!(
            "node {id}'s wall clock stepped {delta_ms:+} ms (now {:+} ms off)",
            self.members[&id].clock.wall_error_ms()
        ));
    }

    /// Makes node `id`'s oscillator run `ppm` parts per million fast (negative: slow).
    pub fn drift_clock(&self, id: u64, ppm: i64) {
        self.members[&id].clock.set_drift(ppm);
        self.trace
            .note(format!("node {id}'s clock drifts {ppm:+} ppm"));
    }

    /// Puts node `id`'s clock right again: no drift, its wall clock back at its usual
    /// offset (as NTP would set it).
    pub fn correct_clock(&self, id: u64) {
        let member = &self.members[&id];
        member.clock.correct(member.clock_offset_ms);
        self.trace.note(format!("node {id}'s clock corrected"));
    }

    /// Restores every link between ledger machines and every machine's own links.
    pub fn heal(&self) {
        let net = NetSim::current();
        let ids: Vec<_> = self.members.values().map(|m| m.sim.id()).collect();
        for a in &ids {
            net.unclog_node(*a);
            for b in &ids {
                if a != b {
                    net.unclog_link(*a, *b);
                }
            }
        }
        self.trace.note("network healed");
    }
}
