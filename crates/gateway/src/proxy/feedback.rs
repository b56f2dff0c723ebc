//! Feedback on an answer (issue 57): `POST /v1/feedback {request_id, name, value}` with the
//! request's own key, or `x-switchyard-feedback: request_id=ID; NAME=VALUE` on a follow-up
//! request. It lands on the request's experiment and variant as a score (`source: feedback`).

use std::sync::Arc;

use http::{HeaderMap, HeaderName, Request, Response, StatusCode};
use hyper::body::Incoming;
use serde_json::json;

use crate::app::App;
use crate::auth::Identity;
use crate::error::GatewayError;
use crate::experiments::Assigned;
use crate::http::parse::read_body;
use crate::http::{json_value, GatewayBody};
use crate::store::ScoreRow;

pub static FEEDBACK_HEADER: HeaderName = HeaderName::from_static("x-switchyard-feedback");

/// The most a feedback body may be.
const MAX_BODY: usize = 16 << 10;

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Feedback {
    request_id: String,
    name: String,
    value: serde_json::Value,
}

pub async fn post(app: &Arc<App>, req: Request<Incoming>) -> Result<Response<GatewayBody>, GatewayError> {
    let (parts, body) = req.into_parts();
    let identity = app.auth.authenticate(&parts.headers, app.clock.unix_secs()).await?;
    let body = read_body(&parts.headers, body, MAX_BODY, app.config.timeouts.body_read).await?;
    let feedback: Feedback = serde_json::from_slice(&body)
        .map_err(|e| GatewayError::bad_request(format!("feedback is {{request_id, name, value}}: {e}"), None))?;
    let value = feedback
        .value
        .as_f64()
        .filter(|v| v.is_finite())
        .ok_or_else(|| GatewayError::bad_request("`value` must be a number", Some("value")))?;
    let assigned = record(app, &identity, &feedback.request_id, &feedback.name, value).await?;
    Ok(json_value(
        StatusCode::OK,
        &json!({"request_id": feedback.request_id, "name": feedback.name, "value": value,
                "experiment": assigned.experiment, "variant": assigned.variant}),
    ))
}

/// Check and store one score from the request's own key.
async fn record(
    app: &App,
    identity: &Identity,
    request_id: &str,
    name: &str,
    value: f64,
) -> Result<Assigned, GatewayError> {
    if switchyard_experiments::USAGE_METRICS.contains(&name) {
        let message = format!("`{name}` comes from the usage records, not from feedback");
        return Err(GatewayError::bad_request(message, Some("name")));
    }
    if !app.experiments.knows_metric(name) {
        return Err(GatewayError::bad_request(format!("`{name}` is not a metric of any experiment"), Some("name")));
    }
    let store = app.store.as_ref().ok_or(GatewayError::Internal)?;
    let unknown =
        || GatewayError::NotFound { message: format!("no request `{request_id}` of an experiment with this key") };
    let assigned = match app.experiments.recent(request_id) {
        Some(assigned) => assigned,
        None => {
            let found = store.request_assignment(request_id).await.map_err(|e| {
                tracing::error!(error = %e, "feedback: request lookup failed");
                GatewayError::Internal
            })?;
            let (experiment, variant, key) = found.ok_or_else(unknown)?;
            Assigned { experiment, variant, key }
        }
    };
    // Only the request's own key gives feedback on it (an open gateway has no keys).
    let key = identity.key().map(|k| k.id.clone());
    if app.auth.enabled() && key != assigned.key {
        return Err(unknown());
    }
    if let Some(live) = app.experiments.get(&assigned.experiment) {
        let adaptive = live.spec.allocation == switchyard_experiments::Allocation::Adaptive;
        let [lo, hi] = live.spec.adaptive.range;
        if adaptive && live.spec.metrics.first().map(String::as_str) == Some(name) && !(lo..=hi).contains(&value) {
            return Err(GatewayError::bad_request(format!("`{name}` is scored from {lo} to {hi}"), Some("value")));
        }
    }
    let row = ScoreRow {
        request_id: request_id.to_owned(),
        name: name.to_owned(),
        source: "feedback".to_owned(),
        experiment: assigned.experiment.clone(),
        variant: assigned.variant.clone(),
        value,
        key_id: key,
        ts_ms: app.clock.unix_ms(),
    };
    store.put_score(&row).await.map_err(|e| {
        tracing::error!(error = %e, "feedback could not be stored");
        GatewayError::Internal
    })?;
    Ok(assigned)
}

/// Feedback in a follow-up request's header: recorded off the request path; a bad one is
/// logged and never fails the request it rides on.
pub fn from_header(app: &Arc<App>, identity: &Identity, headers: &HeaderMap) {
    // No experiment, no metric to score: a gateway without experiments does not look.
    if app.experiments.is_empty() {
        return;
    }
    let Some(value) = headers.get(&FEEDBACK_HEADER) else { return };
    let Some((request_id, scores)) = value.to_str().ok().and_then(parse_header) else {
        tracing::debug!("x-switchyard-feedback is `request_id=ID; NAME=VALUE`");
        return;
    };
    let (app, identity) = (app.clone(), identity.clone());
    tokio::spawn(async move {
        for (name, value) in scores {
            if let Err(e) = record(&app, &identity, &request_id, &name, value).await {
                tracing::debug!(error = %e, "feedback in a header not recorded");
            }
        }
    });
}

/// `request_id=ID; NAME=VALUE[; NAME=VALUE…]`.
fn parse_header(text: &str) -> Option<(String, Vec<(String, f64)>)> {
    let mut request_id = None;
    let mut scores = Vec::new();
    for part in text.split(';') {
        let (name, value) = part.split_once('=')?;
        let (name, value) = (name.trim(), value.trim());
        if name == "request_id" {
            request_id = Some(value.to_owned());
        } else {
            scores.push((name.to_owned(), value.parse::<f64>().ok().filter(|v| v.is_finite())?));
        }
    }
    Some((request_id.filter(|r| !r.is_empty())?, scores)).filter(|(_, s)| !s.is_empty())
}

#[cfg(test)]
mod tests {
    use super::parse_header;

    #[test]
    fn the_header_names_the_request_and_its_scores() {
        let (id, scores) = parse_header("request_id=req_1; thumbs=1; stars = 4.5").expect("valid");
        assert_eq!(id, "req_1");
        assert_eq!(scores, vec![("thumbs".to_owned(), 1.0), ("stars".to_owned(), 4.5)]);
        assert!(parse_header("thumbs=1").is_none());
        assert!(parse_header("request_id=r; thumbs=yes").is_none());
        assert!(parse_header("request_id=r").is_none());
    }
}
