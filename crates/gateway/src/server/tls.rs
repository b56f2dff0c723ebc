//! TLS on the listener: rustls (ring) with the certificate chain and key from PEM files, HTTP/2
//! and HTTP/1.1 offered by ALPN. The acceptor is swapped whole when the configuration reloads,
//! so a renewed certificate is served to new connections without a restart while connections
//! already open keep theirs.

use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

use crate::config::TlsConfig;

/// An acceptor for `tls`'s certificate and key, read now.
pub fn acceptor(tls: &TlsConfig) -> Result<TlsAcceptor, String> {
    let certs = CertificateDer::pem_file_iter(&tls.cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("tls.cert {}: {e}", tls.cert.display()))?;
    if certs.is_empty() {
        return Err(format!("tls.cert {}: no certificate in the file", tls.cert.display()));
    }
    let key = PrivateKeyDer::from_pem_file(&tls.key).map_err(|e| format!("tls.key {}: {e}", tls.key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("tls: {e}"))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| format!("tls: the certificate and key do not make a usable pair: {e}"))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}
