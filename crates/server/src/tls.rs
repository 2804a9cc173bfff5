//! TLS for `ferry serve`, by rustls.
//!
//! `--tls` alone generates a self-signed certificate for localhost, 127.0.0.1 and ::1 at
//! start (rcgen) and writes its PEM where clients can point at it (`AWS_CA_BUNDLE`, curl's
//! `--cacert`); `--cert/--key` use files instead. ALPN offers h2 (when the profile allows
//! it) and http/1.1, and the connection is handed to the matching server.

use crate::config::TlsConfig;
use anyhow::{anyhow, Context, Result};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::io::BufReader;
use std::sync::Arc;

pub fn server_config(tls: &TlsConfig, h2: bool) -> Result<Arc<rustls::ServerConfig>> {
    let (certs, key) = match tls {
        TlsConfig::SelfSigned { ca_file } => {
            let names = vec!["localhost".to_string(), "127.0.0.1".to_string(), "::1".to_string()];
            let cert = rcgen::generate_simple_self_signed(names).context("generating a self-signed certificate")?;
            let pem = cert.cert.pem();
            write_atomic(ca_file, pem.as_bytes()).with_context(|| format!("writing {}", ca_file.display()))?;
            let key = PrivateKeyDer::try_from(cert.key_pair.serialize_der()).map_err(|e| anyhow!("key: {e}"))?;
            (vec![cert.cert.der().clone()], key)
        }
        TlsConfig::Files { cert, key } => {
            let mut r =
                BufReader::new(std::fs::File::open(cert).with_context(|| format!("opening {}", cert.display()))?);
            let certs: Vec<CertificateDer<'static>> = rustls_pemfile::certs(&mut r)
                .collect::<Result<_, _>>()
                .with_context(|| format!("reading {}", cert.display()))?;
            if certs.is_empty() {
                return Err(anyhow!("{} holds no certificate", cert.display()));
            }
            let mut r = BufReader::new(std::fs::File::open(key).with_context(|| format!("opening {}", key.display()))?);
            let key = rustls_pemfile::private_key(&mut r)
                .with_context(|| format!("reading {}", key.display()))?
                .ok_or_else(|| anyhow!("{} holds no private key", key.display()))?;
            (certs, key)
        }
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(certs, key)?;
    config.alpn_protocols = if h2 { vec![b"h2".to_vec(), b"http/1.1".to_vec()] } else { vec![b"http/1.1".to_vec()] };
    Ok(Arc::new(config))
}

fn write_atomic(path: &std::path::Path, data: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, data)?;
    std::fs::rename(&tmp, path)
}
