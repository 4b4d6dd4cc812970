//! `--etcd`: the same closed-loop clients writing new keys to etcd instead (its KV `Put`
//! over gRPC), so that etcd and the ledger are measured by one tool at one offered load,
//! with the same percentiles. Each put writes a new key with a 256-byte value, as etcd's
//! own `benchmark put` is usually run; etcd replicates and syncs it before answering, as
//! the ledger does a claim or a report.
//!
//! Only `Put` is spoken, so its two messages are declared here rather than generated
//! from etcd's protos: `PutRequest { key = 1, value = 2 }`; the response's fields
//! (header, previous value) are not read.

use std::time::{Duration, Instant};

use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::{Channel, Endpoint};

use crate::report::{Failure, Samples};

/// The gRPC method of etcd's v3 API that writes one key.
const PUT: &str = "/etcdserverpb.KV/Put";
/// Bytes in each value.
const VALUE_BYTES: usize = 256;

#[derive(Clone, PartialEq, prost::Message)]
struct PutRequest {
    #[prost(bytes = "vec", tag = "1")]
    key: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    value: Vec<u8>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct PutResponse {}

/// One channel per etcd member (`host:port`); clients take them in turn, as the ledger's
/// clients spread over the nodes. A member that is not the leader forwards the put.
pub fn channels(endpoints: &[String]) -> Result<Vec<Channel>, String> {
    endpoints
        .iter()
        .map(|e| {
            let url = if e.contains("://") {
                e.clone()
            } else {
                format!("http://{e}")
            };
            Endpoint::from_shared(url)
                .map(|e| e.connect_timeout(Duration::from_secs(5)).connect_lazy())
                .map_err(|err| format!("{e}: {err}"))
        })
        .collect()
}

/// Puts `key`; the call's latency, counted from `since` (now, or in an open loop the
/// put's scheduled start).
async fn put(channel: Channel, key: Vec<u8>, since: Instant) -> Result<Duration, Failure> {
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready()
        .await
        .map_err(|e| Failure::Other(format!("etcd not ready: {e}")))?;
    let request = PutRequest {
        key,
        value: vec![b'v'; VALUE_BYTES],
    };
    let codec = tonic_prost::ProstCodec::<PutRequest, PutResponse>::default();
    grpc.unary(
        tonic::Request::new(request),
        PathAndQuery::from_static(PUT),
        codec,
    )
    .await
    .map_err(|status| match status.code() {
        tonic::Code::ResourceExhausted => Failure::BackPressure,
        _ => Failure::Other(format!("etcd put: {status}")),
    })?;
    Ok(since.elapsed())
}

/// Client `c`'s puts of new keys until `deadline`, on `channel`.
pub async fn puts(channel: Channel, c: u64, run_id: u128, deadline: Instant) -> Samples {
    let mut s = Samples::default();
    let mut seq = 0u64;
    while Instant::now() < deadline {
        seq += 1;
        let key = format!("/ledger-load/{run_id}/{c}/{seq}").into_bytes();
        s.count_put(put(channel.clone(), key, Instant::now()).await);
    }
    s
}

/// Put `seq` of an open loop, due at `scheduled`: its latency counts from then.
pub async fn scheduled_put(
    channel: Channel,
    run_id: u128,
    seq: u64,
    scheduled: Instant,
) -> Samples {
    let mut s = Samples::default();
    let key = format!("/ledger-load/{run_id}/rate/{seq}").into_bytes();
    s.count_put(put(channel, key, scheduled).await);
    s
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::*;

    #[test]
    fn a_put_request_encodes_as_etcds_does() {
        let request = PutRequest {
            key: b"k".to_vec(),
            value: b"vv".to_vec(),
        };
        // Field 1 (key) and field 2 (value), both length-delimited.
        assert_eq!(
            request.encode_to_vec(),
            [0x0a, 1, b'k', 0x12, 2, b'v', b'v']
        );
    }

    #[tokio::test]
    async fn endpoints_without_a_scheme_are_plain_http() {
        assert!(channels(&["127.0.0.1:2379".into()]).is_ok());
        assert!(channels(&["http://127.0.0.1:2379".into()]).is_ok());
        assert!(channels(&["not a uri".into()]).is_err());
    }
}
