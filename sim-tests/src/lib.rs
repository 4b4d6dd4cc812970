//! Deterministic simulation of the effect ledger under madsim: cluster harness, fault
//! injection, workloads and checkers, every run replayable from its seed. Not yet built.
