//! Bad input on the wire gets a gRPC error, never a crash, and changes nothing stored:
//! garbage bytes on the port, oversized messages, malformed requests, unknown or missing
//! API keys, an unregistered tenant, invalid keys, another tenant's effect, and batches
//! of such calls.

mod common;

use std::io::Write;
use std::net::TcpStream;

use common::*;
use ledger_client::{ClientError, LedgerClient};
use ledger_core::key::FieldError;
use ledger_core::{Authority, ClaimOutcome, Declaration, EffectKey, Refusal, ToolRef};
use ledger_proto::pb;
use ledger_proto::pb::ledger_client::LedgerClient as Grpc;
use tonic::Code;

fn refund(tenant: &str, key: &str, intent_json: String) -> Declaration {
    Declaration {
        key: EffectKey::new(tenant, "wire", key),
        workflow_id: "wire".into(),
        tool: ToolRef {
            provider: "pay".into(),
            name: "refund".into(),
            contract_version: "v1".into(),
        },
        authority: Authority {
            principal: "user:wire".into(),
            policy_generation: 1,
        },
        target: "refund".into(),
        intent_json,
    }
}

/// A plain channel to the first node, for calls the client library would not make.
fn raw_channel(cluster: &ProcessCluster) -> tonic::transport::Channel {
    tonic::transport::Endpoint::from_shared(format!("http://{}", cluster.endpoints()[0]))
        .expect("endpoint")
        .connect_lazy()
}

/// The one-node cluster still answers, and still leads.
async fn assert_still_serves(cluster: &ProcessCluster) {
    let status = cluster
        .client(OPERATOR_KEY)
        .status_with_digest(0)
        .await
        .expect("the node still serves");
    assert_eq!(status.leader_id, Some(1));
}

async fn claim(
    client: &LedgerClient,
    id: &str,
    d: Declaration,
) -> Result<ClaimOutcome, ClientError> {
    client.claim(id, d, "wire-test", None, None).await
}

fn code(result: Result<impl std::fmt::Debug, ClientError>) -> Code {
    match result {
        Err(ClientError::Status { code, .. }) => code,
        Err(ClientError::Refused(r)) => ledger_proto::status::refusal_code(&r),
        other => panic!("expected an error, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_a_grpc_error_and_the_node_keeps_serving() {
    let cluster = ProcessCluster::start(1);
    cluster.form().await;
    let tenant = cluster.client(TENANT_KEY);
    let kept = refund(TENANT, "kept", r#"{"amount":1}"#.into());
    let grant = match claim(&tenant, "kept-claim", kept.clone()).await.unwrap() {
        ClaimOutcome::Proceed(g) => g,
        other => panic!("{other:?}"),
    };

    // Garbage bytes straight onto the port.
    for garbage in [
        &b"\x00\x01\x02 not http/2 at all \xff\xfe"[..],
        &[0u8; 100_000][..],
    ] {
        let mut stream = TcpStream::connect(&cluster.endpoints()[0]).unwrap();
        let _ = stream.write_all(garbage);
    }

    // A message far above the node's limit (the client's own limit lifted, so that it is
    // the node that refuses it).
    let huge = format!(r#"{{"blob":"{}"}}"#, "x".repeat(8 << 20));
    let mut unlimited =
        Grpc::new(tenant.transport().channel(0)).max_encoding_message_size(usize::MAX);
    let request = tenant.transport().request(pb::ClaimRequest::new(
        "huge",
        refund(TENANT, "huge", huge),
        "x",
        None,
        None,
    ));
    let status = unlimited.claim(request).await.unwrap_err();
    assert_eq!(status.code(), Code::OutOfRange, "{status:?}");
    assert!(
        status.message().contains("message length too large"),
        "{status:?}"
    );

    // An intent above the ledger's limit, but within the message limit.
    let big = format!(r#"{{"blob":"{}"}}"#, "x".repeat(100 << 10));
    match claim(&tenant, "big", refund(TENANT, "big", big)).await {
        Err(ClientError::Refused(Refusal::InvalidIntent(_))) => {}
        other => panic!("expected InvalidIntent, got {other:?}"),
    }

    // Invalid keys.
    for (id, key) in [
        ("empty-key", ""),
        ("space-key", "has space"),
        ("hash-key", "a#b"),
    ] {
        match claim(&tenant, id, refund(TENANT, key, "{}".into())).await {
            Err(ClientError::Refused(Refusal::InvalidField(
                FieldError::Empty { .. } | FieldError::BadChar { .. },
            ))) => {}
            other => panic!("{key:?}: expected InvalidField, got {other:?}"),
        }
    }

    // A request missing a required message.
    let mut raw = Grpc::new(tenant.transport().channel(0));
    let request = tenant.transport().request(pb::ClaimRequest {
        command_id: "no-declaration".into(),
        declaration: None,
        holder: "x".into(),
        lease_ms: None,
        confirmation: None,
    });
    let status = raw.claim(request).await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(
        status.message().contains("declaration"),
        "{}",
        status.message()
    );

    // Unknown and missing API keys.
    let stranger = cluster.client("not-a-configured-key-000");
    let status = code(claim(&stranger, "stranger", kept.clone()).await);
    assert_eq!(status, Code::Unauthenticated);
    let mut anonymous = Grpc::new(tenant.transport().channel(0));
    let status = anonymous
        .claim(tonic::Request::new(pb::ClaimRequest::new(
            "anon",
            kept.clone(),
            "x",
            None,
            None,
        )))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Unauthenticated);

    // A key whose tenant the operator never registered.
    let ghost = cluster.client(GHOST_KEY);
    match claim(&ghost, "ghost", refund("ghost", "g", "{}".into())).await {
        Err(ClientError::Refused(Refusal::UnknownTenant(t))) => assert_eq!(t, "ghost"),
        other => panic!("expected UnknownTenant, got {other:?}"),
    }
    // A tenant reaching for another tenant's effect.
    match claim(&ghost, "ghost-2", kept.clone()).await {
        Err(ClientError::Refused(Refusal::UnknownTenant(_) | Refusal::WrongTenant { .. })) => {}
        other => panic!("expected a tenant refusal, got {other:?}"),
    }
    match ghost.get(kept.key.clone()).await {
        Err(ClientError::Refused(Refusal::WrongTenant { .. })) => {}
        other => panic!("expected WrongTenant, got {other:?}"),
    }
    // A tenant using the admin service.
    let status = code(tenant.change_membership(vec![1], false).await);
    assert_eq!(status, Code::PermissionDenied);
    tenant_key_is_refused_cluster_status(&cluster, &tenant).await;

    // Still serving, and what was stored is intact.
    let record = tenant
        .get(kept.key.clone())
        .await
        .unwrap()
        .expect("kept record");
    assert_eq!(record.attempts.len(), 1);
    assert_eq!(record.attempts[0].fencing_token, grant.fencing_token);
    for absent in ["huge", "big", "g"] {
        let key = EffectKey::new(TENANT, "wire", absent);
        assert!(
            tenant.get(key).await.unwrap().is_none(),
            "{absent} was stored"
        );
    }
    match claim(&tenant, "after", refund(TENANT, "after", "{}".into())).await {
        Ok(ClaimOutcome::Proceed(_)) => {}
        other => panic!("the node stopped serving: {other:?}"),
    }
}

/// A `Batch` call: too many items or no API key turn the whole call away; otherwise each
/// item is answered as its own call would be, malformed and refused items included, and
/// only the good ones change anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_answers_each_item_as_its_own_call() {
    use pb::batch_item::Command as Item;
    use pb::batch_result::Result as Answer;
    let cluster = ProcessCluster::start(1);
    cluster.form().await;
    let tenant = cluster.client(TENANT_KEY);
    let mut raw = Grpc::new(tenant.transport().channel(0));
    let claim_item = |id: &str, key: &str| pb::BatchItem {
        command: Some(Item::Claim(pb::ClaimRequest::new(
            id,
            refund(TENANT, key, "{}".into()),
            "wire-test",
            None,
            None,
        ))),
    };

    let too_many = pb::BatchRequest {
        items: vec![pb::BatchItem::default(); ledger_node::ledger_service::BATCH_ITEMS_MAX + 1],
    };
    let status = raw.batch(tenant.transport().request(too_many)).await;
    assert_eq!(status.unwrap_err().code(), Code::InvalidArgument);
    let anonymous = pb::BatchRequest {
        items: vec![claim_item("anon", "anon")],
    };
    let status = raw.batch(tonic::Request::new(anonymous)).await;
    assert_eq!(status.unwrap_err().code(), Code::Unauthenticated);

    let earlier = refund(TENANT, "earlier", "{}".into());
    let granted = claim(&tenant, "earlier-claim", earlier.clone()).await;
    assert!(
        matches!(granted, Ok(ClaimOutcome::Proceed(_))),
        "{granted:?}"
    );
    let stale = pb::ReportRequest::new(
        "stale-report",
        earlier.key.clone(),
        999,
        ledger_core::Report::Committed {
            receipt: "r".into(),
        },
    );
    let request = pb::BatchRequest {
        items: vec![
            pb::BatchItem { command: None },
            claim_item("batched-claim", "batched"),
            claim_item("bad-key-claim", "has space"),
            pb::BatchItem {
                command: Some(Item::Report(stale)),
            },
        ],
    };
    let results = raw
        .batch(tenant.transport().request(request))
        .await
        .unwrap()
        .into_inner()
        .results;
    assert_eq!(results.len(), 4);
    let status_of = |i: usize| match &results[i].result {
        Some(Answer::Error(e)) => ledger_proto::item_error_to_status(e.clone()),
        other => panic!("item {i}: expected an error, got {other:?}"),
    };
    assert_eq!(status_of(0).code(), Code::InvalidArgument);
    match &results[1].result {
        Some(Answer::Claim(response)) => match ClaimOutcome::try_from(response.clone()) {
            Ok(ClaimOutcome::Proceed(_)) => {}
            other => panic!("expected a grant, got {other:?}"),
        },
        other => panic!("expected a claim's answer, got {other:?}"),
    }
    match ledger_proto::status_to_refusal(&status_of(2)) {
        Some(Refusal::InvalidField(_)) => {}
        other => panic!("expected InvalidField, got {other:?}"),
    }
    match ledger_proto::status_to_refusal(&status_of(3)) {
        Some(Refusal::StaleToken { .. }) => {}
        other => panic!("expected StaleToken, got {other:?}"),
    }
    assert_eq!(status_of(3).code(), Code::FailedPrecondition);

    let record = tenant
        .get(EffectKey::new(TENANT, "wire", "batched"))
        .await
        .unwrap()
        .expect("the batched claim's record");
    assert_eq!(record.attempts.len(), 1);
    assert_eq!(record.state, ledger_core::EffectState::InProgress);
    let bad = tenant.get(EffectKey::new(TENANT, "wire", "anon")).await;
    assert!(bad.unwrap().is_none());
}

/// Cluster status and its state digest need the operator key; a tenant key is refused
/// with a typed, clear error. Finding the leader stays open to any key.
async fn tenant_key_is_refused_cluster_status(cluster: &ProcessCluster, tenant: &LedgerClient) {
    for (what, refused) in [
        ("status", tenant.status_of(0).await),
        ("status with digest", tenant.status_with_digest(0).await),
    ] {
        match refused {
            Err(ClientError::Status { code, message }) => {
                assert_eq!(code, Code::PermissionDenied, "{what}: {message}");
                assert!(
                    message.contains("operator key") && message.contains(TENANT),
                    "{what}: unclear refusal {message:?}"
                );
            }
            other => panic!("{what} with a tenant key answered {other:?}"),
        }
    }
    let operator = cluster.client(OPERATOR_KEY);
    let status = operator
        .status_with_digest(0)
        .await
        .expect("operator status");
    assert!(!status.state_digest.is_empty());
    let (leader, _) = tenant
        .find_leader()
        .await
        .expect("a tenant finds the leader");
    assert_eq!(Some(leader), status.leader_id);
}

/// A snapshot stream from a leader of an earlier term is answered with the node's own,
/// higher vote, as openraft answers it, before its body is read: the body here is no
/// snapshot at all, which the node would otherwise refuse as `INVALID_ARGUMENT`.
#[tokio::test]
async fn a_stale_leaders_snapshot_is_answered_with_the_nodes_vote_unread() {
    use ledger_raft_store::types::{SnapshotMeta, Vote};
    use openraft::raft::SnapshotResponse;

    let cluster = ProcessCluster::start(1);
    cluster.form().await;
    let stale = Vote::new(0, 9);
    let chunks = vec![
        pb::SnapshotChunk {
            header: ledger_node::wire::encode(&(stale, SnapshotMeta::default())),
            data: Vec::new(),
        },
        pb::SnapshotChunk {
            header: Vec::new(),
            data: b"not a snapshot stream".to_vec(),
        },
    ];
    let mut request = tonic::Request::new(futures::stream::iter(chunks));
    request.metadata_mut().insert(
        ledger_node::network::CLUSTER_SECRET_HEADER,
        SECRET.parse().expect("header"),
    );
    let channel = raw_channel(&cluster);
    let response = pb::raft_client::RaftClient::new(channel)
        .install_snapshot(request)
        .await
        .expect("answered, not refused");
    let answer: Result<SnapshotResponse<ledger_raft_store::TypeConfig>, String> =
        ledger_node::wire::decode(&response.into_inner().payload).expect("decodes");
    let vote = answer.expect("a vote").vote;
    assert!(
        vote > stale,
        "answered with {vote}, not above the stale {stale}"
    );
}

/// Fields past the ledger's limits but within a gRPC message (a holder of almost 4 MiB),
/// many at once: each call is refused before it is proposed. Proposed, a few of them would
/// make one Raft entry larger than a message to a follower may be, and nothing after it
/// could ever commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_fields_are_refused_before_they_are_replicated() {
    let cluster = ProcessCluster::start(3);
    cluster.form().await;
    let leader = cluster.leader().await;
    let tenant = cluster.client_of(leader, TENANT_KEY);
    let holder = "h".repeat((4 << 20) - (64 << 10));
    let calls = (0..20).map(|i| {
        let mut raw =
            Grpc::new(tenant.transport().channel(0)).max_encoding_message_size(usize::MAX);
        let request = tenant.transport().request(pb::ClaimRequest::new(
            format!("oversized-{i}"),
            refund(TENANT, &format!("oversized-{i}"), "{}".into()),
            &holder,
            None,
            None,
        ));
        async move { raw.claim(request).await }
    });
    for answer in futures::future::join_all(calls).await {
        let status = answer.expect_err("an oversized claim is refused");
        assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
        assert!(status.message().contains("too long"), "{status:?}");
    }
    match claim(&tenant, "after", refund(TENANT, "after", "{}".into())).await {
        Ok(ClaimOutcome::Proceed(_)) => {}
        other => panic!("the cluster stopped committing: {other:?}"),
    }
    cluster.converged().await;
    let key = EffectKey::new(TENANT, "wire", "oversized-0");
    assert!(tenant.get(key).await.unwrap().is_none(), "stored");
}

/// The streamed AppendEntries of the internal service asks for the cluster secret like
/// every other internal call, and a message on it that does not decode ends the stream
/// with `INVALID_ARGUMENT`; the node goes on serving.
#[tokio::test]
async fn an_append_stream_needs_the_secret_and_refuses_garbage() {
    let cluster = ProcessCluster::start(1);
    cluster.form().await;
    let channel = raw_channel(&cluster);
    let garbage = || {
        futures::stream::iter([pb::RaftMessage {
            payload: b"\xff\x00 not an AppendEntries request".to_vec(),
        }])
    };

    let mut wrong = tonic::Request::new(garbage());
    wrong.metadata_mut().insert(
        ledger_node::network::CLUSTER_SECRET_HEADER,
        "not-the-cluster-secret".parse().expect("header"),
    );
    let refused = pb::raft_client::RaftClient::new(channel.clone())
        .append_stream(wrong)
        .await
        .map(|_| ());
    assert_eq!(refused.expect_err("refused").code(), Code::Unauthenticated);

    let mut request = tonic::Request::new(garbage());
    request.metadata_mut().insert(
        ledger_node::network::CLUSTER_SECRET_HEADER,
        SECRET.parse().expect("header"),
    );
    let mut answers = pb::raft_client::RaftClient::new(channel)
        .append_stream(request)
        .await
        .expect("a stream with the secret is taken")
        .into_inner();
    let status = answers
        .message()
        .await
        .expect_err("garbage is not answered as a request");
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert!(status.message().contains("undecodable"), "{status:?}");

    assert_still_serves(&cluster).await;
}

/// A call sent with a message whose body never comes: a caller without the credentials
/// the service asks for (an API key, the cluster secret) is refused on its headers at
/// once, never made to wait while the node holds the message it declared; a caller with
/// them is read as usual (and so waits for the body).
#[tokio::test]
async fn a_caller_without_credentials_is_refused_before_its_message_is_read() {
    use tonic::codegen::http::uri::PathAndQuery;

    let cluster = ProcessCluster::start(1);
    cluster.form().await;
    let channel = raw_channel(&cluster);
    // A unary method called with a request stream that sends nothing and never ends.
    let call = |path: &'static str, header: Option<(&'static str, String)>| {
        let channel = channel.clone();
        async move {
            let mut grpc = tonic::client::Grpc::new(channel);
            grpc.ready().await.expect("ready");
            let mut request = tonic::Request::new(futures::stream::pending::<pb::RaftMessage>());
            if let Some((name, value)) = header {
                request
                    .metadata_mut()
                    .insert(name, value.parse().expect("header"));
            }
            let codec = tonic_prost::ProstCodec::<pb::RaftMessage, pb::RaftMessage>::default();
            let answer = grpc.client_streaming(request, PathAndQuery::from_static(path), codec);
            tokio::time::timeout(std::time::Duration::from_secs(3), answer)
                .await
                .map(|r| r.map(|_| ()).map_err(|s| s.code()))
        }
    };
    let secret = ledger_node::network::CLUSTER_SECRET_HEADER;
    let forward = "/ledger.v1.Raft/Forward";
    let claim = "/ledger.v1.Ledger/Claim";
    let status = "/ledger.v1.Admin/Status";
    for (path, header) in [
        (forward, None),
        (forward, Some((secret, "not-the-cluster-secret".to_owned()))),
        (claim, None),
        (
            claim,
            Some(("authorization", "Bearer not-a-key".to_owned())),
        ),
        (
            status,
            Some(("authorization", "Bearer not-a-key".to_owned())),
        ),
    ] {
        let answer = call(path, header.clone()).await;
        assert_eq!(
            answer,
            Ok(Err(Code::Unauthenticated)),
            "{path} with {header:?}"
        );
    }
    for (path, header) in [
        (forward, (secret, SECRET.to_owned())),
        (claim, ("authorization", format!("Bearer {TENANT_KEY}"))),
    ] {
        assert!(
            call(path, Some(header)).await.is_err(),
            "{path} answered unread"
        );
    }
    assert_still_serves(&cluster).await;
}
