//! Azure OpenAI, from its REST reference: the OpenAI API under `/openai/v1/...` (the v1 API), or
//! under `/openai/deployments/{deployment}/...?api-version=...` (the deployment-style API, where
//! the URL names the deployment and `api-version` is required), with `GET /openai/v1/models` and
//! `GET /openai/models?api-version=`. Requests authenticate with `api-key`; without a valid one
//! the answer is Azure's 401. The request is then served by the OpenAI API of the mock.

use http::{Request, Response, StatusCode, Uri};
use hyper::body::Incoming;

use super::body::MockBody;
use super::handlers::State;

pub(crate) async fn handle(state: &State, req: Request<Incoming>) -> Response<MockBody> {
    let (mut parts, body) = req.into_parts();
    let sent = parts.headers.get("api-key").and_then(|v| v.to_str().ok());
    if state.api_key.as_deref().is_some_and(|key| sent != Some(key)) || sent.is_none() {
        let body = r#"{"error":{"code":"401","message":"Access denied due to invalid subscription key or wrong API endpoint. Make sure to provide a valid key for an active subscription and use a correct regional API endpoint for your resource."}}"#;
        return state.json(StatusCode::UNAUTHORIZED, body);
    }
    let path = parts.uri.path().to_owned();
    let query = parts.uri.query().unwrap_or("");
    if parts.method == http::Method::POST {
        state.control.saw_posted_path(format!("{path}?{query}"));
    }
    let versioned = query.split('&').any(|p| p.strip_prefix("api-version=").is_some_and(|v| !v.is_empty()));
    let openai_path = if let Some(rest) = path.strip_prefix("/openai/v1/") {
        format!("/v1/{rest}")
    } else if path == "/openai/models" && versioned {
        "/v1/models".to_owned()
    } else if let Some(rest) = path.strip_prefix("/openai/deployments/") {
        let Some((deployment, operation)) = rest.split_once('/') else { return not_found(state) };
        if !versioned {
            let body = r#"{"error":{"code":"404","message":"Resource not found"}}"#;
            return state.json(StatusCode::NOT_FOUND, body);
        }
        if !state.models.iter().any(|m| m.name == deployment) {
            let body = r#"{"error":{"code":"DeploymentNotFound","message":"The API deployment for this resource does not exist. If you created the deployment within the last 5 minutes, please wait a moment and try again."}}"#;
            return state.json(StatusCode::NOT_FOUND, body);
        }
        format!("/v1/{operation}")
    } else {
        return not_found(state);
    };
    let Ok(uri) = openai_path.parse::<Uri>() else { return not_found(state) };
    parts.uri = uri;
    super::openai::handle(state, Request::from_parts(parts, body)).await
}

fn not_found(state: &State) -> Response<MockBody> {
    state.json(StatusCode::NOT_FOUND, r#"{"error":{"code":"404","message":"Resource not found"}}"#)
}
