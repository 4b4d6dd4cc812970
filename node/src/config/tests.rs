//! The configuration's parsing, defaults and refusals.

use super::*;

const MINIMAL: &str = r#"
    node_id = 1
    listen_addr = "127.0.0.1:7001"
    data_dir = "/tmp/ledger-1"
    cluster_secret = "0123456789abcdef"
    [[api_keys]]
    key = "tenant-acme-key-0001"
    tenant = "acme"
    [[api_keys]]
    key = "operator-key-00001"
    operator = true
"#;

#[test]
fn minimal_config_gets_defaults_and_maps_keys() {
    let c = NodeConfig::from_toml(MINIMAL, Path::new("x.toml")).unwrap();
    assert_eq!(c.storage, StorageKind::Rocksdb);
    assert_eq!(c.raft.heartbeat_interval_ms, 100);
    assert_eq!(c.clock_skew_ms_max, CLOCK_SKEW_MS_MAX_DEFAULT);
    assert_eq!(c.proposer.admitted_calls_max, 1_024);
    assert_eq!(c.proposer.overloaded_retry_after_ms, 100);
    assert_eq!(c.rocksdb, RocksOptions::default());
    assert_eq!(
        c.caller_for("tenant-acme-key-0001"),
        Some(Caller::Tenant("acme".into()))
    );
    assert_eq!(c.caller_for("operator-key-00001"), Some(Caller::Operator));
    assert_eq!(c.caller_for("nope"), None);
}

#[test]
fn rocksdb_budgets_reach_the_disk() {
    let text = format!(
        "{MINIMAL}\n[rocksdb]\nblock_cache_bytes = 268435456\nwrite_buffer_bytes = 16777216"
    );
    let c = NodeConfig::from_toml(&text, Path::new("x.toml")).unwrap();
    assert_eq!(
        c.rocksdb,
        RocksOptions {
            block_cache_bytes: 256 << 20,
            write_buffer_bytes: 16 << 20,
        }
    );
}

#[test]
fn bad_configs_are_typed_errors() {
    for bad in [
        MINIMAL.replace("node_id = 1", "node_id = \"one\""),
        MINIMAL.replace("0123456789abcdef", "short"),
        MINIMAL.replace("tenant = \"acme\"", "tenant = \"acme\"\noperator = true"),
        format!("{MINIMAL}\n[raft]\nelection_timeout_min_ms = 50"),
        format!("{MINIMAL}\nunknown_field = 3"),
        MINIMAL.replace("node_id = 1", "node_id = 1\nclock_skew_ms_max = 3600000"),
        format!("{MINIMAL}\n[raft]\nappend_timeout_ms = 10"),
        format!("{MINIMAL}\n[proposer]\nadmitted_calls_max = 0"),
        format!("{MINIMAL}\n[proposer]\nadmitted_bytes_max = 1024"),
        format!("{MINIMAL}\n[proposer]\nqueue_capacity = 1000"),
        format!("{MINIMAL}\n[proposer]\noverloaded_retry_after_ms = 0"),
        format!("{MINIMAL}\n[proposer]\noverloaded_retry_after_ms = 600000"),
        format!("{MINIMAL}\n[rocksdb]\nblock_cache_bytes = 4096"),
        format!("{MINIMAL}\n[rocksdb]\nwrite_buffer_bytes = 0"),
        format!("{MINIMAL}\n[rocksdb]\nwrite_buffer_bytes = 2199023255552"),
        format!("{MINIMAL}\n[rocksdb]\nmemtable_bytes = 67108864"),
        format!("{MINIMAL}\n[sweeper]\ninterval_ms = 0"),
        MINIMAL.replace("0123456789abcdef", "0123456789abcdé"),
        MINIMAL.replace("0123456789abcdef", "0123456789abcdef "),
        MINIMAL.replace("0123456789abcdef", "0123456789\\u0007abcdef"),
        MINIMAL.replace("tenant-acme-key-0001", "tenant-acme-kéy-0001"),
        format!("{MINIMAL}\n[proposer]\nrequest_timeout_ms = 0"),
        format!("connections_max = 0\n{MINIMAL}"),
        // As long as a follower waits for a forwarded call, or longer.
        format!("{MINIMAL}\n[proposer]\nrequest_timeout_ms = 10000"),
        format!("{MINIMAL}\n[proposer]\nmax_batch_bytes = 0"),
        format!("{MINIMAL}\n[raft]\nmax_payload_entries = 0"),
        // 64 entries of 1 MiB and one more command: more than a peer message may carry.
        format!("{MINIMAL}\n[raft]\nmax_payload_entries = 64"),
    ] {
        assert!(
            NodeConfig::from_toml(&bad, Path::new("x.toml")).is_err(),
            "{bad}"
        );
    }
}

#[test]
fn secrets_with_spaces_inside_are_accepted() {
    let spaced = MINIMAL
        .replace("0123456789abcdef", "0123456789 abc\tdef")
        .replace("tenant-acme-key-0001", "tenant acme key 0001");
    let c = NodeConfig::from_toml(&spaced, Path::new("x.toml")).unwrap();
    assert_eq!(
        c.caller_for("tenant acme key 0001"),
        Some(Caller::Tenant("acme".into()))
    );
}

#[test]
fn an_append_fits_a_peer_message() {
    let fits = format!("{MINIMAL}\n[raft]\nmax_payload_entries = 48");
    let c = NodeConfig::from_toml(&fits, Path::new("x.toml")).unwrap();
    assert_eq!(c.raft.max_payload_entries, 48);
    let err = NodeConfig::from_toml(
        &format!("{MINIMAL}\n[raft]\nmax_payload_entries = 64"),
        Path::new("x.toml"),
    )
    .unwrap_err();
    assert!(err.to_string().contains("max_payload_entries"), "{err}");
}

#[test]
fn a_key_given_as_its_sha256_authenticates_the_key_and_nothing_else() {
    let hex = ledger_core::intent::hex(&Sha256::digest(b"operator-key-00001"));
    let text = MINIMAL.replace(
        "key = \"operator-key-00001\"",
        &format!("key_sha256 = \"{hex}\""),
    );
    let c = NodeConfig::from_toml(&text, Path::new("x.toml")).unwrap();
    assert_eq!(c.caller_for("operator-key-00001"), Some(Caller::Operator));
    assert_eq!(c.caller_for(&hex), None, "the digest is not the key");
    assert_eq!(c.caller_for("operator-key-00002"), None);
}

#[test]
fn secrets_are_read_from_their_files() {
    let dir = std::env::temp_dir().join(format!("ledger-config-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let secret = dir.join("cluster");
    let key = dir.join("tenant");
    std::fs::write(&secret, "from-a-file-secret-0001\n").unwrap();
    std::fs::write(&key, "tenant-key-from-a-file-01\n").unwrap();
    let text = MINIMAL
        .replace(
            "cluster_secret = \"0123456789abcdef\"",
            &format!("cluster_secret_file = {:?}", secret.display().to_string()),
        )
        .replace(
            "key = \"tenant-acme-key-0001\"",
            &format!("key_file = {:?}", key.display().to_string()),
        );
    let c = NodeConfig::from_toml(&text, Path::new("x.toml")).unwrap();
    assert_eq!(c.cluster_secret, "from-a-file-secret-0001");
    assert_eq!(
        c.caller_for("tenant-key-from-a-file-01"),
        Some(Caller::Tenant("acme".into()))
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_tls_table_names_its_files() {
    let text = format!(
        "{MINIMAL}\n[tls]\ncert_file = \"n.pem\"\nkey_file = \"n.key\"\nclient_ca_file = \"ca.pem\"\n"
    );
    let c = NodeConfig::from_toml(&text, Path::new("x.toml")).unwrap();
    let tls = c.tls.expect("tls");
    assert_eq!(tls.client_ca_file, PathBuf::from("ca.pem"));
    assert!(!tls.require_client_cert);
}

#[test]
fn ambiguous_or_malformed_secrets_are_refused() {
    for bad in [
        MINIMAL.replace(
            "key = \"operator-key-00001\"",
            "key = \"operator-key-00001\"\nkey_sha256 = \"00\"",
        ),
        MINIMAL.replace("key = \"operator-key-00001\"", "key_sha256 = \"xyz\""),
        MINIMAL.replace("key = \"operator-key-00001\"", "operator = true"),
        MINIMAL.replace("key = \"operator-key-00001\"", "key = \"short\""),
        MINIMAL.replace(
            "cluster_secret = \"0123456789abcdef\"",
            "cluster_secret = \"0123456789abcdef\"\ncluster_secret_file = \"/nonexistent\"",
        ),
        MINIMAL.replace(
            "cluster_secret = \"0123456789abcdef\"",
            "cluster_secret_file = \"/nonexistent/secret\"",
        ),
        format!("{MINIMAL}\n[tls]\ncert_file = \"n.pem\"\nkey_file = \"n.key\"\n"),
    ] {
        assert!(
            NodeConfig::from_toml(&bad, Path::new("x.toml")).is_err(),
            "{bad}"
        );
    }
}

/// The node configurations shipped in `deploy/` are ones the node accepts, TLS included.
#[test]
fn the_shipped_node_configurations_parse() {
    let deploy = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy");
    for file in [
        "compose/node1.toml",
        "compose/node2.toml",
        "compose/node3.toml",
        "systemd/node.toml",
    ] {
        let path = deploy.join(file);
        let mut text = std::fs::read_to_string(&path).unwrap();
        if text.contains("REPLACE-ME") {
            // An example whose secrets are placeholders is refused as it is...
            let refused = NodeConfig::from_toml(&text, &path).expect_err(file);
            assert!(
                refused.to_string().contains("placeholder"),
                "{file}: {refused}"
            );
            // ...and accepted once they are replaced.
            text = text.replace("REPLACE-ME", "set-by-the-operator");
        }
        let config = NodeConfig::from_toml(&text, &path).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert!(config.tls.is_some(), "{file} serves without TLS");
    }
}

#[test]
fn placeholder_secrets_are_refused() {
    for (what, toml) in [
        (
            "cluster secret",
            MINIMAL.replace("cluster_secret = \"", "cluster_secret = \"REPLACE-ME-"),
        ),
        (
            "api key",
            format!("{MINIMAL}\n[[api_keys]]\nkey = \"REPLACE-ME-with-a-key\"\noperator = true\n"),
        ),
    ] {
        let e = NodeConfig::from_toml(&toml, Path::new("x.toml")).expect_err(what);
        assert!(e.to_string().contains("placeholder"), "{what}: {e}");
    }
}
