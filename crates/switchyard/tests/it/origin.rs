//! Origin and `Host` validation, black box: a page on a foreign origin, or reaching a loopback
//! gateway under a rebound name, is refused on `/mcp`, `/ui` and `/admin` with or without a
//! master key; SDK-style requests without `Origin` and the gateway's own origin pass.

use crate::common::*;
use bytes::Bytes;
use http::Method;
use switchyard_testkit::{McpMock, McpMockConfig, TestClient};

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;

async fn gateway_with_mcp(mcp: &McpMock, extra: &str) -> switchyard_gateway::RunningGateway {
    let dir = scratch_dir();
    let yaml = format!(
        "listen: 127.0.0.1:0\nstorage: {{url: '{}', usage_journal_dir: '{}/usage'}}\n{extra}mcp:\n  servers:\n    - {{name: docs, url: '{}'}}\n",
        db_url(&dir),
        dir.display(),
        mcp.url()
    );
    gateway_yaml(&yaml).await
}

/// The status of `method path` sent with `Host: host` (the gateway's own when `None`) and `origin`.
async fn status(
    gw: &switchyard_gateway::RunningGateway,
    method: Method,
    path: &str,
    host: Option<&str>,
    origin: Option<&str>,
    auth: Option<&str>,
) -> u16 {
    let own_host = gw.url().trim_start_matches("http://").to_owned();
    let host = host.map_or(own_host.clone(), |h| h.replace("PORT", own_host.rsplit(':').next().unwrap()));
    let mut headers = vec![("host", host.as_str()), ("accept", "application/json, text/event-stream")];
    if let Some(origin) = origin {
        headers.push(("origin", origin));
    }
    let bearer = auth.map(|k| format!("Bearer {k}"));
    if let Some(bearer) = &bearer {
        headers.push(("authorization", bearer.as_str()));
    }
    let body = if method == Method::POST { Bytes::from_static(INITIALIZE.as_bytes()) } else { Bytes::new() };
    let r = TestClient::new().request(method, &format!("{}{path}", gw.url()), body, &headers).await.unwrap();
    r.status.as_u16()
}

#[tokio::test]
async fn foreign_origins_and_rebound_hosts_are_refused_with_or_without_a_master_key() {
    let mcp = McpMock::start("127.0.0.1:0".parse().unwrap(), McpMockConfig::default()).await.unwrap();
    for (auth_yaml, key) in [("", None), ("auth: {master_key: origin-test-master}\n", Some("origin-test-master"))] {
        let gw = gateway_with_mcp(&mcp, auth_yaml).await;
        let own = gw.url().to_owned();
        // An SDK (no Origin) and the gateway's own pages pass.
        assert_eq!(status(&gw, Method::POST, "/mcp/docs", None, None, key).await, 200, "{auth_yaml}");
        assert_eq!(status(&gw, Method::POST, "/mcp/docs", None, Some(&own), key).await, 200);
        assert_eq!(status(&gw, Method::POST, "/mcp/docs", Some("localhost:PORT"), None, key).await, 200);
        let console = status(&gw, Method::GET, "/ui/", None, Some(&own), key).await;
        assert!(matches!(console, 200 | 303), "the console from its own origin: {console}");
        for (method, path) in
            [(Method::POST, "/mcp/docs"), (Method::POST, "/mcp"), (Method::GET, "/ui/"), (Method::GET, "/admin/keys")]
        {
            // A foreign page's fetch: 403, even with the master key.
            let foreign = status(&gw, method.clone(), path, None, Some("http://evil.example.com"), key).await;
            assert_eq!(foreign, 403, "{method} {path} from a foreign origin ({auth_yaml})");
            assert_eq!(status(&gw, method.clone(), path, None, Some("null"), key).await, 403);
            // DNS rebinding: the page's own name resolved to 127.0.0.1, so Origin and Host agree.
            let rebound = status(
                &gw,
                method.clone(),
                path,
                Some("evil.example.com:PORT"),
                Some("http://evil.example.com:PORT"),
                key,
            )
            .await;
            assert_eq!(rebound, 421, "{method} {path} under a rebound name");
            assert_eq!(status(&gw, method.clone(), path, Some("evil.example.com"), None, key).await, 421);
        }
        // The model APIs are not browser-reachable routes: unaffected.
        let models =
            status(&gw, Method::GET, "/v1/models", Some("evil.example.com"), Some("http://evil.example.com"), key)
                .await;
        assert_ne!(models, 421);
        gw.shutdown().await;
    }
}

#[tokio::test]
async fn configured_origins_and_hosts_are_let_through() {
    let mcp = McpMock::start("127.0.0.1:0".parse().unwrap(), McpMockConfig::default()).await.unwrap();
    let extra =
        "security: {allowed_origins: ['https://console.example.com'], allowed_hosts: ['*.example.com', localhost]}\n";
    let gw = gateway_with_mcp(&mcp, extra).await;
    let allowed =
        status(&gw, Method::POST, "/mcp/docs", Some("gw.example.com"), Some("https://console.example.com"), None).await;
    assert_eq!(allowed, 200);
    let other =
        status(&gw, Method::POST, "/mcp/docs", Some("gw.example.com"), Some("https://else.example.com"), None).await;
    assert_eq!(other, 403);
    // Configured hosts replace the loopback defaults.
    assert_eq!(status(&gw, Method::POST, "/mcp/docs", Some("127.0.0.1:PORT"), None, None).await, 421);
    assert_eq!(status(&gw, Method::POST, "/mcp/docs", Some("localhost:PORT"), None, None).await, 200);
    gw.shutdown().await;
}
