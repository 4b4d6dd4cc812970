//! Raft storage for the effect ledger: openraft log storage and the replicated state
//! machine over `ledger-core`, on a small disk trait with a RocksDB implementation and a
//! simulated disk that loses unsynced writes on power failure. Not yet built.
