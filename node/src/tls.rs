//! TLS on the real network (never in the simulation): the listener's server side with
//! optional or required client certificates, and the client side a node dials its peers
//! with, presenting its own certificate.
//!
//! Certificates, key and client CA are read from their files at start and again at
//! SIGHUP ([`NodeTls::reload`]). A reload builds everything anew first and puts it in
//! force only when all of it is valid; otherwise the certificates in force stay and the
//! reason is returned. Connections accepted later use the new certificate, connections
//! already open keep theirs, and the node's own connections to peers are made anew
//! (each holder of cached channels compares [`NodeTls::generation`]).
//!
//! Every handshake runs in a task of its own with a deadline, so a caller that opens a
//! connection and sends nothing holds up no one else's.

use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures::Stream;
use sha2::{Digest, Sha256};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity};

use crate::cert_dates;
use crate::config::TlsSettings;
use crate::connections::{Limited, Slots};

/// Longest a TLS handshake on the listener may take.
const HANDSHAKE_TIMEOUT_MS: u64 = 10_000;

/// Accepted connections waiting for the server to take them up.
const ACCEPTED_QUEUE: usize = 128;

/// Why certificates could not be loaded.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct TlsError(String);

/// One load of the files.
struct Loaded {
    server: Arc<rustls::ServerConfig>,
    peer_client: ClientTlsConfig,
    summary: String,
    /// The last second (Unix time) at which the certificate (and any intermediate in its
    /// file) is still valid; `None` when it does not verify against the client CA for
    /// another reason than its dates.
    valid_until_s: Option<u64>,
}

/// The latest time [`valid_until`] looks at: a certificate still valid then counts as
/// valid until then.
const VALID_UNTIL_HORIZON_S: u64 = 100 * 365 * 24 * 60 * 60;

/// The node's TLS material in force, replaced whole at reload.
pub struct NodeTls {
    current: RwLock<Arc<Loaded>>,
    generation: AtomicU64,
}

impl NodeTls {
    /// Reads and checks the files `settings` names.
    pub fn load(settings: &TlsSettings) -> Result<Self, TlsError> {
        let loaded = Loaded::read(settings)?;
        tracing::info!("TLS on: {}", loaded.summary);
        record_valid_until(loaded.valid_until_s);
        Ok(NodeTls {
            current: RwLock::new(Arc::new(loaded)),
            generation: AtomicU64::new(0),
        })
    }

    /// Reads the files again and puts them in force; on any error the material in force
    /// stays and the error says why. Returns what was loaded.
    pub fn reload(&self, settings: &TlsSettings) -> Result<String, TlsError> {
        let loaded = Loaded::read(settings)?;
        let summary = loaded.summary.clone();
        record_valid_until(loaded.valid_until_s);
        *self.current.write().expect("tls lock") = Arc::new(loaded);
        self.generation.fetch_add(1, Ordering::SeqCst);
        Ok(summary)
    }

    /// Counts reloads: cached connections to peers made before the last one are
    /// replaced.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// The acceptor for the next connection.
    pub fn acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(self.current.read().expect("tls lock").server.clone())
    }

    /// An endpoint to the peer at `addr` (`host:port`) over TLS, presenting this node's
    /// certificate and trusting the client CA's.
    pub fn peer_endpoint(&self, addr: &str) -> Result<Endpoint, String> {
        let tls = self.current.read().expect("tls lock").peer_client.clone();
        Endpoint::from_shared(format!("https://{addr}"))
            .map_err(|e| format!("bad peer address {addr}: {e}"))?
            .tls_config(tls)
            .map_err(|e| format!("TLS towards {addr}: {e}"))
    }
}

impl Loaded {
    fn read(settings: &TlsSettings) -> Result<Self, TlsError> {
        let cert_pem = read(&settings.cert_file)?;
        let key_pem = read(&settings.key_file)?;
        let ca_pem = read(&settings.client_ca_file)?;
        let chain = certificates(&cert_pem, &settings.cert_file)?;
        let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| {
            TlsError(format!(
                "{}: no private key in PEM: {e}",
                settings.key_file.display()
            ))
        })?;
        let mut roots = rustls::RootCertStore::empty();
        for ca in certificates(&ca_pem, &settings.client_ca_file)? {
            roots.add(ca).map_err(|e| {
                TlsError(format!(
                    "{}: not a CA certificate: {e}",
                    settings.client_ca_file.display()
                ))
            })?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            roots.into(),
            provider.clone(),
        );
        let verifier = if settings.require_client_cert {
            verifier
        } else {
            verifier.allow_unauthenticated()
        }
        .build()
        .map_err(|e| TlsError(format!("client CA: {e}")))?;
        // Peers verify this certificate against their client CA, the same file. One
        // outside its dates now (expired, not yet valid) would be refused by every peer and
        // every client, so it is refused here and the material in force stays. One that
        // fails for another reason (no clientAuth usage, another CA) still serves callers
        // and may be meant to (a single node); peers would refuse it, which is said.
        // Certificates are judged by the wall clock, as rustls judges every handshake.
        let now = rustls::pki_types::UnixTime::now();
        let (valid_until_s, verified) = match valid_until(verifier.as_ref(), &chain, now) {
            Ok(s) => (Some(s), true),
            Err(e) if outside_its_dates(&e) => {
                return Err(TlsError(format!(
                    "{} is not valid now: {e}",
                    settings.cert_file.display()
                )))
            }
            Err(e) => {
                tracing::warn!(
                    "{} does not verify against the client CA {} as a client certificate \
                     ({e}): peers that check it against that CA will refuse it",
                    settings.cert_file.display(),
                    settings.client_ca_file.display()
                );
                // The verifier judged its own dates first (they cover now); with no
                // verified chain, its own end is what is known of when it expires.
                let not_after = cert_dates::not_after(&chain[0]);
                (not_after.and_then(|s| u64::try_from(s).ok()), false)
            }
        };
        let fingerprint = ledger_core::intent::hex(&Sha256::digest(&chain[0]));
        let mut server = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError(e.to_string()))?
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain, key)
            .map_err(|e| {
                TlsError(format!(
                    "{} with {}: {e}",
                    settings.cert_file.display(),
                    settings.key_file.display()
                ))
            })?;
        server.alpn_protocols = vec![b"h2".to_vec()];
        let peer_client = ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(&ca_pem))
            .identity(Identity::from_pem(&cert_pem, &key_pem));
        // Built once here so that a bad file is found at load, not at the first dial.
        Endpoint::from_static("https://localhost")
            .tls_config(peer_client.clone())
            .map_err(|e| TlsError(format!("client side of TLS: {e}")))?;
        let days = |s: u64| s.saturating_sub(now.as_secs()) / (24 * 60 * 60);
        let validity = match (valid_until_s, verified) {
            (Some(s), true) => format!("valid for {} more days", days(s)),
            (Some(s), false) => format!("not verified; its own dates end in {} days", days(s)),
            (None, _) => "not verified".into(),
        };
        let summary = format!(
            "certificate {} (SHA-256 {fingerprint}, {validity}), key {}, client CA {}, client \
             certificates {}",
            settings.cert_file.display(),
            settings.key_file.display(),
            settings.client_ca_file.display(),
            if settings.require_client_cert {
                "required"
            } else {
                "optional (required by the Raft service)"
            }
        );
        Ok(Loaded {
            server: Arc::new(server),
            peer_client,
            summary,
            valid_until_s,
        })
    }
}

/// The last second (Unix time) at which `chain` verifies as a client certificate under
/// `verifier`, searched from `now` up to [`VALID_UNTIL_HORIZON_S`] later (validity is one
/// interval, so a binary search finds its end); the error when it does not verify now.
fn valid_until(
    verifier: &dyn rustls::server::danger::ClientCertVerifier,
    chain: &[CertificateDer<'static>],
    now: rustls::pki_types::UnixTime,
) -> Result<u64, rustls::Error> {
    let verifies = |s: u64| {
        verifier.verify_client_cert(
            &chain[0],
            &chain[1..],
            rustls::pki_types::UnixTime::since_unix_epoch(Duration::from_secs(s)),
        )
    };
    let (mut good, mut bad) = (now.as_secs(), now.as_secs() + VALID_UNTIL_HORIZON_S);
    verifies(good)?;
    if verifies(bad).is_ok() {
        return Ok(bad);
    }
    while bad - good > 1 {
        let mid = good + (bad - good) / 2;
        if verifies(mid).is_ok() {
            good = mid;
        } else {
            bad = mid;
        }
    }
    Ok(good)
}

/// Whether `e` refuses a certificate for its dates: expired or not yet valid.
fn outside_its_dates(e: &rustls::Error) -> bool {
    use rustls::CertificateError::{Expired, ExpiredContext, NotValidYet, NotValidYetContext};
    matches!(
        e,
        rustls::Error::InvalidCertificate(
            Expired | ExpiredContext { .. } | NotValidYet | NotValidYetContext { .. }
        )
    )
}

/// Sets the gauge of when the certificate in force stops being valid (left as it was
/// when that is not known).
fn record_valid_until(valid_until_s: Option<u64>) {
    if let Some(s) = valid_until_s {
        metrics::gauge!(crate::metrics::TLS_VALID_UNTIL_SECONDS).set(s as f64);
    }
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|e| TlsError(format!("cannot read {}: {e}", path.display())))
}

fn certificates(pem: &[u8], path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let chain = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError(format!("{}: bad PEM: {e}", path.display())))?;
    if chain.is_empty() {
        return Err(TlsError(format!(
            "{}: no certificate in PEM",
            path.display()
        )));
    }
    Ok(chain)
}

/// The connections accepted on `listener` that completed a TLS handshake with the
/// material in force when they arrived, each in one of `slots` from its acceptance (its
/// handshake included), and closed if it does not open its HTTP/2 connection within
/// `silence` of the handshake (see `connections`). Ends when the stream is dropped.
pub fn incoming(
    listener: TcpListener,
    tls: Arc<NodeTls>,
    slots: Slots,
    silence: Duration,
) -> impl Stream<Item = Result<Limited<TlsStream<Limited<TcpStream>>>, io::Error>> {
    let (tx, rx) = tokio::sync::mpsc::channel(ACCEPTED_QUEUE);
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                _ = tx.closed() => return,
                accepted = slots.accept(&listener) => accepted,
            };
            let Some((tcp, slot)) = accepted else {
                return;
            };
            let Ok(peer) = tcp.peer_addr() else {
                continue;
            };
            let tcp = Limited::new(tcp, Some(slot), silence);
            let acceptor = tls.acceptor();
            let tx = tx.clone();
            tokio::spawn(async move {
                let deadline = Duration::from_millis(HANDSHAKE_TIMEOUT_MS);
                match tokio::time::timeout(deadline, acceptor.accept(tcp)).await {
                    Ok(Ok(stream)) => {
                        // The HTTP/2 preface is awaited again, decrypted.
                        let _ = tx.send(Ok(Limited::new(stream, None, silence))).await;
                    }
                    Ok(Err(e)) => log_refused(peer, &e),
                    Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
                }
            });
        }
    });
    futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|accepted| (accepted, rx))
    })
}

/// A refused handshake is worth a line (a certificate from another CA, an expired one);
/// a connection closed before its handshake (a TCP probe) is not.
fn log_refused(peer: SocketAddr, e: &io::Error) {
    if e.kind() == io::ErrorKind::UnexpectedEof {
        tracing::debug!(%peer, "connection closed before its TLS handshake");
    } else {
        tracing::info!(%peer, "TLS handshake refused: {e}");
    }
}
