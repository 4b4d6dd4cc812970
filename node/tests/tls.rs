//! Transport security on real processes: TLS between clients and nodes, mutual TLS
//! between nodes, a Raft service that requires a node's certificate, and certificates
//! and API keys put in force at SIGHUP without a restart. Certificates are made at test
//! time (`common::certs`).

mod common;

use std::path::Path;
use std::sync::Arc;

use common::certs::{self, Ca, Leaf, Validity};
use common::*;
use ledger_client::{ClientError, LedgerClient, RetryPolicy};
use ledger_core::{Authority, ClaimOutcome, Declaration, EffectKey, ToolRef};
use ledger_node::network::CLUSTER_SECRET_HEADER;
use ledger_proto::pb;
use ledger_proto::pb::raft_client::RaftClient;
use sha2::{Digest, Sha256};
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};
use tonic::Code;

fn declaration(key: &str) -> Declaration {
    Declaration {
        key: EffectKey::new(TENANT, "tls", key),
        workflow_id: "tls".into(),
        tool: ToolRef {
            provider: "pay".into(),
            name: "refund".into(),
            contract_version: "v1".into(),
        },
        authority: Authority {
            principal: "user:1".into(),
            policy_generation: 1,
        },
        target: format!("order:{key}"),
        intent_json: r#"{"amount":1}"#.into(),
    }
}

/// A channel to `addr` over TLS, trusting `ca_pem` and presenting `identity`.
fn tls_channel(addr: &str, ca_pem: &str, identity: Option<&Leaf>) -> Channel {
    let mut tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(ca_pem));
    if let Some(leaf) = identity {
        tls = tls.identity(Identity::from_pem(&leaf.cert_pem, &leaf.key_pem));
    }
    Endpoint::from_shared(format!("https://{addr}"))
        .expect("endpoint")
        .tls_config(tls)
        .expect("tls config")
        .connect_lazy()
}

/// A Raft `Vote` call with `secret` and a payload that does not decode: a caller that
/// passes every check is told `INVALID_ARGUMENT`, one refused earlier gets another code.
async fn vote(channel: Channel, secret: &str) -> Code {
    let mut request = tonic::Request::new(pb::RaftMessage {
        payload: vec![0xff; 3],
    });
    request
        .metadata_mut()
        .insert(CLUSTER_SECRET_HEADER, secret.parse().expect("header"));
    match RaftClient::new(channel).vote(request).await {
        Ok(_) => Code::Ok,
        Err(status) => {
            eprintln!("vote: {:?} {}", status.code(), status.message());
            status.code()
        }
    }
}

/// The certificate node `addr` serves to a new connection, DER.
async fn served_certificate(addr: &str, ca_pem: &str) -> Option<Vec<u8>> {
    let mut roots = rustls::RootCertStore::empty();
    for ca in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(ca.ok()?).ok()?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .ok()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec()];
    let tcp = tokio::net::TcpStream::connect(addr).await.ok()?;
    let name = ServerName::try_from("127.0.0.1").ok()?;
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .ok()?;
    let (_, connection) = tls.get_ref();
    Some(connection.peer_certificates()?.first()?.to_vec())
}

fn der_of(path: &Path) -> Vec<u8> {
    CertificateDer::from_pem_file(path)
        .expect("certificate file")
        .to_vec()
}

fn leaf_of(dir: &Path, name: &str) -> Leaf {
    let cert_pem = std::fs::read_to_string(dir.join(format!("{name}.pem"))).expect("cert");
    Leaf {
        der: der_of(&dir.join(format!("{name}.pem"))),
        cert_pem,
        key_pem: std::fs::read_to_string(dir.join(format!("{name}.key"))).expect("key"),
    }
}

fn one_attempt() -> RetryPolicy {
    RetryPolicy {
        attempts: 1,
        attempt_timeout_ms: 3_000,
        ..RetryPolicy::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_cluster_serves_claims_and_its_raft_service_requires_a_node_certificate() {
    let pki = tempfile::tempdir().expect("temp dir");
    let ca = certs::write_pki(pki.path(), 3);
    let cluster = ProcessCluster::start_with(3, default_keys_toml(), Some(pki.path().into()));
    // Formed over TLS: the nodes replicate to each other with their certificates, and the
    // operator's client, without one, is served with its API key.
    cluster.form().await;
    let tenant = cluster.client(TENANT_KEY);
    let outcome = tenant
        .claim("tls-claim-1", declaration("k1"), "tester", None, None)
        .await
        .expect("a claim over TLS");
    assert!(matches!(outcome, ClaimOutcome::Proceed(_)), "{outcome:?}");

    // A plaintext client is not served.
    let plain =
        LedgerClient::with_retry(cluster.endpoints(), TENANT_KEY, one_attempt()).expect("client");
    assert!(plain.find_leader().await.is_none(), "plaintext was served");

    // The Raft service: no client certificate is refused whatever the secret; a node's
    // certificate with a wrong secret is refused; with both, the call reaches the service.
    let addr = &cluster.endpoints()[0];
    let node_cert = leaf_of(pki.path(), "node2");
    assert_eq!(
        vote(tls_channel(addr, &ca.pem, None), SECRET).await,
        Code::Unauthenticated
    );
    assert_eq!(
        vote(
            tls_channel(addr, &ca.pem, Some(&node_cert)),
            "not-the-cluster-secret"
        )
        .await,
        Code::Unauthenticated
    );
    assert_eq!(
        vote(tls_channel(addr, &ca.pem, Some(&node_cert)), SECRET).await,
        Code::InvalidArgument
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificates_of_another_ca_or_expired_are_refused() {
    let pki = tempfile::tempdir().expect("temp dir");
    let ca = certs::write_pki(pki.path(), 1);
    let cluster = ProcessCluster::start_with(1, default_keys_toml(), Some(pki.path().into()));
    let addr = cluster.endpoints()[0].clone();
    let good = ca.leaf("node9", Validity::Current);
    wait_until("the node serves TLS", 30_000, || async {
        vote(tls_channel(&addr, &ca.pem, Some(&good)), SECRET).await == Code::InvalidArgument
    })
    .await;

    let foreign = Ca::new("another CA").leaf("node9", Validity::Current);
    let expired = ca.leaf("node9", Validity::Expired);
    for (what, bad) in [("another CA's", &foreign), ("an expired", &expired)] {
        let code = vote(tls_channel(&addr, &ca.pem, Some(bad)), SECRET).await;
        assert!(
            !matches!(code, Code::Ok | Code::InvalidArgument),
            "{what} certificate reached the Raft service ({code:?})"
        );
        // Nor does the ledger API serve a connection that presented one.
        let mut channel_client = ledger_proto::pb::admin_client::AdminClient::new(tls_channel(
            &addr,
            &ca.pem,
            Some(bad),
        ));
        let mut request = tonic::Request::new(pb::LeaderRequest {});
        request.metadata_mut().insert(
            "authorization",
            format!("Bearer {OPERATOR_KEY}").parse().unwrap(),
        );
        assert!(
            channel_client.leader(request).await.is_err(),
            "{what} certificate was served by the admin API"
        );
    }

    // A client that trusts another CA refuses the node's certificate.
    let other = Ca::new("a CA the node's certificate is not from");
    assert!(served_certificate(&addr, &other.pem).await.is_none());
    assert!(served_certificate(&addr, &ca.pem).await.is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_replaced_at_sighup_is_served_to_new_connections() {
    let pki = tempfile::tempdir().expect("temp dir");
    let ca = certs::write_pki(pki.path(), 1);
    let cluster = ProcessCluster::start_with(1, default_keys_toml(), Some(pki.path().into()));
    let addr = cluster.endpoints()[0].clone();
    let first = der_of(&pki.path().join("node1.pem"));
    wait_until("the node serves its certificate", 30_000, || async {
        served_certificate(&addr, &ca.pem).await.as_ref() == Some(&first)
    })
    .await;

    // An invalid file is refused at SIGHUP and the certificate in force stays.
    std::fs::write(pki.path().join("node1.pem"), "not a certificate").expect("write");
    reload_and_wait_for_log(&cluster, "reload refused").await;
    assert_eq!(
        served_certificate(&addr, &ca.pem).await,
        Some(first.clone())
    );

    // So is an expired one, which every peer would refuse.
    let expired = ca.leaf("node1", Validity::Expired);
    Ca::write(&expired, pki.path(), "node1");
    reload_and_wait_for_log(&cluster, "is not valid now").await;
    assert_eq!(
        served_certificate(&addr, &ca.pem).await,
        Some(first.clone())
    );
    // The certificate in force verifies until its not_after (2099-12-31T00:00:00Z).
    let page = cluster.scrape(0).expect("metrics page");
    assert!(
        page.contains("ledger_tls_certificate_valid_until_seconds 4102358400"),
        "{page}"
    );

    // One from another CA that has expired is refused as well: the verifier judges a
    // certificate's own dates before it looks for its issuer.
    let other_ca = Ca::new("another CA");
    Ca::write(
        &other_ca.leaf("node1", Validity::Expired),
        pki.path(),
        "node1",
    );
    cluster.hangup(0);
    wait_until(
        "the node refuses the expired foreign certificate",
        10_000,
        || async { cluster.log(0).matches("is not valid now").count() == 2 },
    )
    .await;
    assert_eq!(
        served_certificate(&addr, &ca.pem).await,
        Some(first.clone())
    );
    // One within its dates is put in force (a single node may mean it), with a warning
    // that peers checking it against the client CA will refuse it; with no verified
    // chain, the gauge follows its own notAfter (2080-01-01T00:00:00Z).
    let foreign = other_ca.leaf("node1", Validity::Until(2080));
    Ca::write(&foreign, pki.path(), "node1");
    reload_and_wait_for_log(
        &cluster,
        "peers that check it against that CA will refuse it",
    )
    .await;
    wait_until(
        "the node serves the foreign certificate",
        10_000,
        || async { served_certificate(&addr, &other_ca.pem).await.as_ref() == Some(&foreign.der) },
    )
    .await;
    wait_until(
        "the gauge shows the foreign certificate's expiry",
        10_000,
        || async {
            cluster.scrape(0).is_ok_and(|page| {
                page.contains("ledger_tls_certificate_valid_until_seconds 3471292800")
            })
        },
    )
    .await;

    // A new certificate is served to new connections, without a restart.
    let second = ca.leaf("node1", Validity::Current);
    Ca::write(&second, pki.path(), "node1");
    assert_ne!(second.der, first);
    cluster.hangup(0);
    wait_until("the node serves the new certificate", 10_000, || async {
        served_certificate(&addr, &ca.pem).await.as_ref() == Some(&second.der)
    })
    .await;
}

/// Sends the first node SIGHUP and waits until its log holds `text`.
async fn reload_and_wait_for_log(cluster: &ProcessCluster, text: &str) {
    cluster.hangup(0);
    wait_until(&format!("the node logs {text:?}"), 10_000, || async {
        cluster.log(0).contains(text)
    })
    .await;
}

fn sha256_hex(key: &str) -> String {
    ledger_core::intent::hex(&Sha256::digest(key.as_bytes()))
}

async fn leader_code(client: &LedgerClient) -> Option<Code> {
    match client.transport().leader_of(0, 3_000).await {
        Ok(_) => Some(Code::Ok),
        Err(ClientError::Status { code, .. }) => Some(code),
        Err(_) => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hashed_keys_authenticate_and_a_key_removed_at_sighup_stops_working() {
    let secrets = tempfile::tempdir().expect("temp dir");
    let tenant_file = secrets.path().join("tenant-key");
    std::fs::write(&tenant_file, format!("{TENANT_KEY}\n")).expect("write key");
    let operator_hashed = format!(
        "[[api_keys]]\nkey_sha256 = \"{}\"\noperator = true\n",
        sha256_hex(OPERATOR_KEY)
    );
    let tenant_in_file = format!(
        "[[api_keys]]\nkey_file = {:?}\ntenant = \"{TENANT}\"\n",
        tenant_file.display().to_string()
    );
    let mut cluster =
        ProcessCluster::start_with(1, format!("{operator_hashed}{tenant_in_file}"), None);
    let operator = cluster.client_of(0, OPERATOR_KEY);
    wait_until("the node answers the operator", 30_000, || async {
        operator.status_of(0).await.is_ok()
    })
    .await;
    let tenant = cluster.client_of(0, TENANT_KEY);
    let wrong = cluster.client_of(0, "test-operator-key-0002");
    let digest_as_key = cluster.client_of(0, &sha256_hex(OPERATOR_KEY));
    assert_eq!(leader_code(&tenant).await, Some(Code::Ok));
    assert_eq!(leader_code(&wrong).await, Some(Code::Unauthenticated));
    assert_eq!(
        leader_code(&digest_as_key).await,
        Some(Code::Unauthenticated)
    );
    // A tenant key still cannot read the cluster's status.
    match tenant.status_of(0).await {
        Err(ClientError::Status { code, .. }) => assert_eq!(code, Code::PermissionDenied),
        other => panic!("a tenant read the cluster status: {other:?}"),
    }

    // The tenant's key is taken out and the node told: it stops working, the rest stays.
    cluster.set_keys(operator_hashed);
    cluster.hangup(0);
    wait_until("the removed key is refused", 10_000, || async {
        leader_code(&tenant).await == Some(Code::Unauthenticated)
    })
    .await;
    assert!(operator.status_of(0).await.is_ok());
}

/// With TLS on the listen address, the health service is also served alone in plaintext
/// (`health_listen_addr`), for probes that cannot speak TLS: it says when the node is
/// ready and serves nothing else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plaintext_health_port_of_a_tls_node_answers_probes_and_nothing_else() {
    use ledger_proto::health::health_check_response::ServingStatus;
    use ledger_proto::health::health_client::HealthClient;
    use ledger_proto::health::HealthCheckRequest;

    let pki = tempfile::tempdir().expect("temp dir");
    certs::write_pki(pki.path(), 3);
    let cluster = ProcessCluster::start_with(3, default_keys_toml(), Some(pki.path().into()));
    cluster.form().await;
    for i in 0..3 {
        let endpoint = format!("http://{}", cluster.health_endpoint(i));
        wait_until(
            &format!("node {} is ready on its health port", i + 1),
            20_000,
            || {
                let endpoint = endpoint.clone();
                async move {
                    let Ok(mut client) = HealthClient::connect(endpoint).await else {
                        return false;
                    };
                    let request = HealthCheckRequest {
                        service: String::new(),
                    };
                    client
                        .check(request)
                        .await
                        .is_ok_and(|a| a.get_ref().status() == ServingStatus::Serving)
                }
            },
        )
        .await;
    }
    // The ledger's own services are not on that port.
    let plain = LedgerClient::with_retry(
        vec![cluster.health_endpoint(0)],
        OPERATOR_KEY,
        one_attempt(),
    )
    .expect("client");
    assert!(
        plain.status_of(0).await.is_err(),
        "the health port served the ledger"
    );
}

/// The cluster secret rotated node by node without a moment where peers refuse each
/// other: first every node also accepts the new secret, then each sends it (still
/// accepting the old one), then the old one is dropped. Each step is checked on the Raft
/// service of every node, and the cluster replicates a claim at the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cluster_secret_rotates_node_by_node_with_peers_agreeing_throughout() {
    const NEW: &str = "the-new-cluster-secret-02";
    let pki = tempfile::tempdir().expect("temp dir");
    let ca = certs::write_pki(pki.path(), 3);
    let mut cluster = ProcessCluster::start_with(3, default_keys_toml(), Some(pki.path().into()));
    cluster.form().await;
    let accepts = |addr: String, secret: &'static str| {
        let ca = ca.pem.clone();
        let cert = leaf_of(pki.path(), "node2");
        async move {
            // Past authentication, the made-up vote is refused as such.
            vote(tls_channel(&addr, &ca, Some(&cert)), secret).await == Code::InvalidArgument
        }
    };
    let endpoints = cluster.endpoints();
    for addr in &endpoints {
        assert!(
            !accepts(addr.clone(), NEW).await,
            "{addr} took a secret it does not know"
        );
    }
    let steps: [(&str, &[&str]); 3] = [(SECRET, &[NEW]), (NEW, &[SECRET]), (NEW, &[])];
    for (step, (current, previous)) in steps.into_iter().enumerate() {
        for i in 0..3 {
            cluster.set_secret(i, current, previous);
            cluster.hangup(i);
        }
        for addr in &endpoints {
            let addr = addr.clone();
            wait_until(
                &format!("{addr} holds step {step}'s secrets"),
                10_000,
                || {
                    let addr = addr.clone();
                    async move {
                        let new_ok = accepts(addr.clone(), NEW).await;
                        let old_ok = accepts(addr, SECRET).await;
                        new_ok && (old_ok == (step < 2))
                    }
                },
            )
            .await;
        }
    }
    let tenant = cluster.client(TENANT_KEY);
    let outcome = tenant
        .claim(
            "rotated-claim-1",
            declaration("rotated"),
            "tester",
            None,
            None,
        )
        .await
        .expect("a claim after the rotation");
    assert!(matches!(outcome, ClaimOutcome::Proceed(_)), "{outcome:?}");
    cluster.converged().await;
}
