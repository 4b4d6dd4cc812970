//! Certificates made at test time: a CA, node and client certificates signed by it, and
//! the bad ones a node must refuse (another CA's, expired).

use std::path::Path;

use rcgen::{
    date_time_ymd, BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};

/// A certificate and its key, PEM.
pub struct Leaf {
    /// The certificate.
    pub cert_pem: String,
    /// Its private key.
    pub key_pem: String,
    /// The certificate, DER.
    pub der: Vec<u8>,
}

/// A certificate authority.
pub struct Ca {
    issuer: Issuer<'static, KeyPair>,
    /// Its certificate, PEM.
    pub pem: String,
}

/// How long a certificate is valid.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Validity {
    /// From 2000 to 2099.
    Current,
    /// During 2000 only.
    Expired,
    /// From 2000 to the first day of the given year.
    Until(i32),
}

impl Ca {
    /// A new CA named `name`.
    pub fn new(name: &str) -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("ca params");
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        params.not_before = date_time_ymd(2000, 1, 1);
        params.not_after = date_time_ymd(2099, 12, 31);
        let key = KeyPair::generate().expect("ca key");
        let cert = params.self_signed(&key).expect("self-signed ca");
        Ca {
            pem: cert.pem(),
            issuer: Issuer::new(params, key),
        }
    }

    /// A certificate for `name` (also valid for localhost and 127.0.0.1), usable by a
    /// server and a client.
    pub fn leaf(&self, name: &str, validity: Validity) -> Leaf {
        let sans = vec![name.to_owned(), "localhost".into(), "127.0.0.1".into()];
        let mut params = CertificateParams::new(sans).expect("leaf params");
        params.distinguished_name.push(DnType::CommonName, name);
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.not_before = date_time_ymd(2000, 1, 1);
        params.not_after = match validity {
            Validity::Current => date_time_ymd(2099, 12, 31),
            Validity::Expired => date_time_ymd(2001, 1, 1),
            Validity::Until(year) => date_time_ymd(year, 1, 1),
        };
        let key = KeyPair::generate().expect("leaf key");
        let cert = params.signed_by(&key, &self.issuer).expect("signed leaf");
        Leaf {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            der: cert.der().to_vec(),
        }
    }

    /// Writes `leaf` as `dir/name.pem` and `dir/name.key`.
    pub fn write(leaf: &Leaf, dir: &Path, name: &str) {
        std::fs::write(dir.join(format!("{name}.pem")), &leaf.cert_pem).expect("write cert");
        std::fs::write(dir.join(format!("{name}.key")), &leaf.key_pem).expect("write key");
    }
}

/// Writes a CA (`ca.pem`), `nodes` node certificates (`node1.pem`, `node1.key`, ...) and
/// a client certificate (`client.pem`, `client.key`) into `dir`; returns the CA.
pub fn write_pki(dir: &Path, nodes: usize) -> Ca {
    std::fs::create_dir_all(dir).expect("certificate folder");
    let ca = Ca::new("ledger test CA");
    std::fs::write(dir.join("ca.pem"), &ca.pem).expect("write ca");
    for i in 1..=nodes {
        let leaf = ca.leaf(&format!("node{i}"), Validity::Current);
        Ca::write(&leaf, dir, &format!("node{i}"));
    }
    Ca::write(&ca.leaf("client", Validity::Current), dir, "client");
    ca
}
