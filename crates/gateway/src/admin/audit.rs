//! The audit log as the admin API and the console write it (`store/audit.rs` keeps the chain):
//! who acted (the master key, and later a signed-in user), from which address, what they did to
//! which record, and that record before and after as the admin API shows it (never a secret).
//! `GET /admin/audit` pages it, newest first; `switchyard audit verify` walks the chain.

use std::net::SocketAddr;

use http::{Response, StatusCode};
use serde::Deserialize;
use serde_json::{json, Value};

use super::{bad, internal};
use crate::app::App;
use crate::error::GatewayError;
use crate::http::{json_value, GatewayBody};
use crate::store::{AuditRow, NewAudit};

/// Who made a change and from where.
#[derive(Debug, Clone)]
pub struct Actor {
    /// `master key`, `master key (console)`, later `user:u_…`.
    pub name: String,
    pub client: Option<SocketAddr>,
}

impl Actor {
    pub fn master(client: Option<SocketAddr>) -> Actor {
        Actor { name: "master key".to_owned(), client }
    }

    pub fn console(client: Option<SocketAddr>) -> Actor {
        Actor { name: "master key (console)".to_owned(), client }
    }
}

/// Append one entry. A change is made before it is recorded; an entry that cannot be written
/// is an error in the log (with what it would have said), never a silent gap.
pub async fn record(
    app: &App,
    actor: &Actor,
    action: &str,
    target: &str,
    before: Option<&Value>,
    after: Option<&Value>,
) {
    let Some(store) = &app.store else { return };
    let entry = NewAudit {
        ts_ms: app.clock.unix_ms(),
        actor: actor.name.clone(),
        action: action.to_owned(),
        target: target.to_owned(),
        before: before.map(Value::to_string),
        after: after.map(Value::to_string),
        client: actor.client.map(|a| a.ip().to_string()),
    };
    // Boxed: inline, the append's future would grow every admin handler that records.
    match Box::pin(store.append_audit(entry)).await {
        Ok(_) => super::audit_export::APPENDED.notify_waiters(),
        Err(e) => {
            tracing::error!(error = %e, action, target, actor = %actor.name, "could not write an audit log entry")
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct PageParams {
    before: Option<i64>,
    limit: Option<i64>,
}

/// `GET /admin/audit?before=SEQ&limit=N`: up to N (default 100, at most 1,000) entries older
/// than SEQ, newest first; `next_before` continues.
pub async fn page(app: &App, query: Option<&str>) -> Result<Response<GatewayBody>, GatewayError> {
    let store = app.store.as_ref().ok_or(GatewayError::Internal)?;
    let p: PageParams = serde_urlencoded::from_str(query.unwrap_or(""))
        .map_err(|e| bad(format!("invalid query parameters: {e}"), None))?;
    let limit = p.limit.unwrap_or(100);
    if !(1..=1000).contains(&limit) {
        return Err(bad("`limit` must be between 1 and 1000", Some("limit")));
    }
    let rows = store.audit_page(p.before, limit).await.map_err(internal)?;
    let next = (rows.len() as i64 == limit).then(|| rows.last().map(|r| r.seq)).flatten();
    Ok(json_value(
        StatusCode::OK,
        &json!({"object": "list", "data": rows.iter().map(AuditRow::to_json).collect::<Vec<_>>(), "next_before": next}),
    ))
}
