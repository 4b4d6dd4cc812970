//! Payloads of the internal Raft service: openraft's messages and the forwarding of
//! commands and reads from a follower to the leader.
//!
//! Everything is bincode 2 (serde, standard configuration) inside a versioned envelope, so
//! nodes of two adjacent versions can talk during a rolling upgrade, and bytes that do not
//! decode are an error, never a panic.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use ledger_core::{
    Command, EffectKey, EffectRecord, EffectState, ListPage, ListQuery, Outcome, TenantConfig,
};

use ledger_proto::pb;

use crate::ledger_time::PeerClocks;

/// Largest payload decoded from a peer.
const PAYLOAD_BYTES_MAX: usize = 256 << 20;

#[derive(Serialize, Deserialize)]
enum Envelope<T> {
    V1(T),
}

/// Encodes `value` for the wire.
pub fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    bincode::serde::encode_to_vec(Envelope::V1(value), config())
        .expect("encoding into memory cannot fail")
}

/// `value` as a message of the internal service.
pub fn message<T: Serialize>(value: &T) -> pb::RaftMessage {
    pb::RaftMessage {
        payload: encode(value),
    }
}

/// Decodes a payload from a peer.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    let (Envelope::V1(value), _): (Envelope<T>, usize) =
        bincode::serde::decode_from_slice(bytes, config()).map_err(|e| e.to_string())?;
    Ok(value)
}

fn config() -> impl bincode::config::Config {
    bincode::config::standard().with_limit::<PAYLOAD_BYTES_MAX>()
}

/// A read that decides a dispatch: served by the leader after it confirmed its leadership.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReadRequest {
    /// One record.
    Get(EffectKey),
    /// A page of records, asked without the escalation filter: the form nodes of the
    /// previous version send and read.
    List(ListQueryV1),
    /// A tenant's configuration.
    Tenant(String),
    /// A page of records, with every filter: the form nodes of the version before
    /// [`ReadRequest::ListPage`] send and read.
    ListV2(ListQuery),
    /// A page of records that visits a bounded number of entries and says where the
    /// listing goes on; answered with [`ReadResponse::Page`].
    ListPage(ListQuery),
}

impl ReadRequest {
    /// The read of a page of records in the form leaders before [`ReadRequest::ListPage`]
    /// read: the oldest form that carries its filters, so that a leader of either earlier
    /// version can serve it during a rolling upgrade.
    pub fn list_before_pages(query: ListQuery) -> ReadRequest {
        if query.escalated {
            ReadRequest::ListV2(query)
        } else {
            ReadRequest::List(ListQueryV1 {
                tenant: query.tenant,
                state: query.state,
                workflow_id: query.workflow_id,
                updated_at_or_before_ms: query.updated_at_or_before_ms,
                after: query.after,
                limit: query.limit,
            })
        }
    }
}

/// A [`ListQuery`] as the previous version encodes it: no escalation filter.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListQueryV1 {
    tenant: String,
    state: Option<EffectState>,
    workflow_id: Option<String>,
    updated_at_or_before_ms: Option<u64>,
    after: Option<EffectKey>,
    limit: usize,
}

impl From<ListQueryV1> for ListQuery {
    fn from(q: ListQueryV1) -> Self {
        ListQuery {
            tenant: q.tenant,
            escalated: false,
            state: q.state,
            workflow_id: q.workflow_id,
            updated_at_or_before_ms: q.updated_at_or_before_ms,
            after: q.after,
            limit: q.limit,
        }
    }
}

/// The answer to a [`ReadRequest`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReadResponse {
    /// The record, if it exists.
    Record(Option<Box<EffectRecord>>),
    /// A page of records.
    Records(Vec<EffectRecord>),
    /// The tenant's configuration, if registered.
    Tenant(Option<TenantConfig>),
    /// A page of records and where the listing goes on.
    Page(ListPage),
}

/// What a follower asks of the leader (and, for ledger time, what any node asks a peer).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ForwardRequest {
    /// Propose these commands.
    Commands(Vec<Command>),
    /// Serve this read.
    Read(ReadRequest),
    /// What the receiver knows of ledger time; any node answers, leader or not. Asked by
    /// nodes of the previous version (see `stamp_bound`).
    LedgerTime,
    /// What the receiver knows of time: ledger time, its wall clock and what it vouches
    /// for about real time; any node answers. Asked by a node that restarted, before it
    /// stamps anything (see `stamp_bound` and `real_time`).
    Clocks,
}

/// The leader's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ForwardResponse {
    /// One outcome per command, in order.
    Outcomes(Vec<Outcome>),
    /// The read's answer.
    Read(ReadResponse),
    /// The receiver is not the leader; it knows this one, if any.
    NotLeader(Option<u64>),
    /// The receiver could not serve it; retry.
    Unavailable(String),
    /// The largest ledger time the receiver knows, and how long ago (ms, by its monotonic
    /// clock) it learned it.
    LedgerTime {
        /// The ledger time.
        ledger_ms: u64,
        /// How long ago it was learned.
        age_ms: u64,
    },
    /// What the receiver knows of time.
    Clocks(PeerClocks),
    /// The receiver (the leader) admits no more calls now; nothing of this one was
    /// proposed. Retry after `retry_after_ms`.
    Overloaded {
        /// The suggested wait.
        retry_after_ms: u64,
    },
    /// One result per command of a group, in order, when some of them failed and not all
    /// alike (a group that failed alike gets the single answer a follower of the previous
    /// version reads; such a follower reports this one as an internal error, which its
    /// caller's client retries with the same command ids).
    Each(Vec<Result<Outcome, ForwardFailure>>),
}

/// Why the leader could not serve one command of a forwarded group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ForwardFailure {
    /// The receiver stopped being the leader; it knows this one, if any. The command may
    /// have been committed: send it again, with its command id, to the new leader.
    NotLeader(Option<u64>),
    /// The receiver could not serve it; the command may have been committed.
    Unavailable(String),
    /// The receiver's proposer admitted no more commands; this one was not proposed.
    Overloaded {
        /// The suggested wait.
        retry_after_ms: u64,
    },
    /// Proposed and not committed within the leader's request timeout (ms): the leader is
    /// slow; it may still be committed.
    Timeout(u64),
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`ReadRequest`] and [`ForwardRequest`] as nodes before paged lists read them.
    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    enum ReadRequestBeforePages {
        Get(EffectKey),
        List(ListQueryV1),
        Tenant(String),
        ListV2(ListQuery),
    }

    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    enum ForwardRequestBeforePages {
        Commands(Vec<Command>),
        Read(ReadRequestBeforePages),
        LedgerTime,
        Clocks,
    }

    fn query(escalated: bool) -> ListQuery {
        ListQuery {
            tenant: "acme".into(),
            escalated,
            state: Some(EffectState::UnknownAfterDispatch),
            workflow_id: None,
            updated_at_or_before_ms: Some(7),
            after: Some(EffectKey::new("acme", "ns", "k")),
            limit: 10,
        }
    }

    /// What `LedgerNode::list` relies on during a rolling upgrade: a leader of the earlier
    /// version fails to read the paged form (and answers that it could not), and reads the
    /// form sent instead.
    #[test]
    fn a_leader_before_paged_lists_reads_the_form_sent_in_their_place() {
        for escalated in [false, true] {
            let paged = encode(&ForwardRequest::Read(ReadRequest::ListPage(query(
                escalated,
            ))));
            assert!(decode::<ForwardRequestBeforePages>(&paged).is_err());
            let before = ReadRequest::list_before_pages(query(escalated));
            let sent = encode(&ForwardRequest::Read(before));
            let read = decode::<ForwardRequestBeforePages>(&sent).expect("the earlier form");
            let ForwardRequestBeforePages::Read(read) = read else {
                panic!("read as {read:?}");
            };
            let read = match read {
                ReadRequestBeforePages::List(q) => ListQuery::from(q),
                ReadRequestBeforePages::ListV2(q) => q,
                other => panic!("read as {other:?}"),
            };
            assert_eq!(read, query(escalated));
        }
    }
}
