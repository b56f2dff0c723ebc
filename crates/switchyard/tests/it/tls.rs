//! TLS on the listener: served with the configured certificate (HTTP/1.1 and h2 by ALPN), and a
//! renewed certificate served to new connections after a reload, without a restart.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::sync::Arc;

use crate::common::*;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// A self-signed certificate for `localhost`, written as PEM files; its DER.
fn certificate(dir: &std::path::Path) -> CertificateDer<'static> {
    let issued = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    std::fs::write(dir.join("cert.pem"), issued.cert.pem()).unwrap();
    std::fs::write(dir.join("key.pem"), issued.key_pair.serialize_pem()).unwrap();
    issued.cert.der().clone()
}

fn connector(trusted: &CertificateDer<'static>) -> TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(trusted.clone()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    TlsConnector::from(Arc::new(config))
}

/// `GET /health` over TLS trusting only `trusted`: the response, or the handshake's error.
async fn health(addr: std::net::SocketAddr, trusted: &CertificateDer<'static>) -> Result<String, String> {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let name = ServerName::try_from("localhost").unwrap();
    let mut tls = connector(trusted).connect(name, tcp).await.map_err(|e| e.to_string())?;
    tls.write_all(b"GET /health HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n").await.unwrap();
    let mut out = Vec::new();
    let _ = tls.read_to_end(&mut out).await;
    Ok(String::from_utf8_lossy(&out).into_owned())
}

#[tokio::test]
async fn tls_is_served_and_a_renewed_certificate_applies_on_reload() {
    let a = mock(&["m"]).await;
    let dir = scratch_dir();
    let first = certificate(&dir);
    let file = dir.join("switchyard.yaml");
    let yaml = format!(
        "listen: 127.0.0.1:0\nstorage: {{url: '{}', usage_journal_dir: '{}/usage'}}\ntls: {{cert: '{1}/cert.pem', key: '{1}/key.pem'}}\nbackends:\n{2}",
        db_url(&dir),
        dir.display(),
        backends_yaml(&[&a])
    );
    std::fs::write(&file, &yaml).unwrap();
    let config = switchyard_gateway::Config::load(&file, &std::collections::HashMap::<String, String>::new()).unwrap();
    let gw = switchyard_gateway::start(config, std::future::pending()).await.unwrap();

    let answer = health(gw.addr, &first).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    // Plain HTTP on the TLS port is not served.
    let mut plain = TcpStream::connect(gw.addr).await.unwrap();
    plain.write_all(b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n").await.unwrap();
    let mut out = Vec::new();
    let _ = plain.read_to_end(&mut out).await;
    assert!(!String::from_utf8_lossy(&out).contains("200 OK"));

    // The certificate is renewed in place and the configuration reloaded.
    let second = certificate(&dir);
    assert_eq!(gw.reload().await.map(|_| ()), Ok(()));
    let answer = health(gw.addr, &second).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "new connections get the new certificate: {answer}");
    assert!(health(gw.addr, &first).await.is_err(), "and no longer the old one");

    // A broken key file is refused and the running certificate stays.
    std::fs::write(dir.join("key.pem"), "not a key").unwrap();
    let refused = gw.reload().await.unwrap_err();
    assert!(refused.contains("tls.key"), "{refused}");
    assert!(health(gw.addr, &second).await.unwrap().starts_with("HTTP/1.1 200"));
}
