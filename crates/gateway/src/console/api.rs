//! The JSON the console's pages read: the live overview (one request per refresh), usage by key,
//! user, team or model from the hourly rollup, the request log, and backends with their recent
//! health. Shapes are the console's own (the modules under `crates/console/assets/pages` read them).

use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use bytes::Bytes;
use http::{header, HeaderValue, Response, StatusCode};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::admin::access::Operator;
use crate::app::App;
use crate::error::GatewayError;
use crate::http::{full, json_value, GatewayBody};
use crate::metrics::series::STEP_S;
use crate::route::backend::Backend;
use crate::store::{GroupBy, RequestQuery, StatusFilter, Store, UsageGroup};

const DAY_MS: i64 = 86_400_000;
const HOUR_MS: i64 = 3_600_000;

fn bad(message: impl Into<String>, param: &'static str) -> GatewayError {
    GatewayError::bad_request(message, Some(param))
}

fn internal(e: impl std::fmt::Display) -> GatewayError {
    tracing::error!(error = %e, "console storage query failed");
    GatewayError::Internal
}

fn store(app: &App) -> Result<&Store, GatewayError> {
    app.store.as_ref().ok_or(GatewayError::Internal)
}

/// A backend's URL without any credentials written into it.
fn shown_url(url: &str) -> String {
    match (url.find("://"), url.find('@')) {
        (Some(scheme), Some(at)) if at > scheme => format!("{}{}", &url[..scheme + 3], &url[at + 1..]),
        _ => url.to_owned(),
    }
}

/// `now_ms`: the app clock's monotonic milliseconds (what cooldowns are set in).
fn backend_json(b: &Backend, router: &crate::route::Router, now_ms: u64) -> Value {
    let routed = b.stats.prefix_routed.load(Relaxed);
    // What the backend holds in its KV cache: from its engine's events, else the estimate.
    let kv_cache = router.cached_blocks(b.id).map(|c| {
        json!({"source": c.source, "live": c.live, "blocks": c.blocks, "gpu": c.tiers[0], "cpu": c.tiers[1], "other": c.tiers[2]})
    });
    json!({
        "name": b.name(),
        "kind": b.kind().as_str(),
        "url": shown_url(&b.cfg.url),
        "up": b.health.is_up(),
        "breaker_open": b.health.breaker_open(),
        // After a 429 or Retry-After: how long the backend asked to be left alone.
        "cooling_ms": b.health.cooling_until(now_ms).map(|until| until - now_ms),
        "in_flight": b.in_flight(),
        "capacity": b.capacity(),
        "waiting": b.signals.waiting(),
        "kv_usage": b.signals.kv_usage(),
        "affinity_hit_ratio": (routed > 0).then(|| b.stats.prefix_hits.load(Relaxed) as f64 / routed as f64),
        "kv_cache": kv_cache,
        "attempts": b.stats.attempts.load(Relaxed),
        "failures": b.stats.failures.load(Relaxed),
        "models": *b.models(),
    })
}

fn group_json(g: &UsageGroup, label: Option<&str>) -> Value {
    json!({
        "name": g.name, "label": label.unwrap_or(&g.name), "requests": g.totals.requests,
        "prompt_tokens": g.totals.prompt_tokens, "completion_tokens": g.totals.completion_tokens,
        "total_tokens": g.totals.total_tokens, "cost_usd": g.totals.cost_usd,
    })
}

/// `GET /ui/api/overview`.
pub async fn overview(app: &Arc<App>) -> Result<Response<GatewayBody>, GatewayError> {
    let store = store(app)?;
    let now_ms = app.clock.unix_ms();
    let day = now_ms.div_euclid(DAY_MS) * DAY_MS;
    let (models, keys) = tokio::try_join!(
        store.usage_groups(GroupBy::Model, day, now_ms + HOUR_MS, 1000, None),
        store.usage_groups(GroupBy::Key, day, now_ms + HOUR_MS, 5, None),
    )
    .map_err(internal)?;
    // The top keys' names: at most five lookups by primary key, not the whole key table.
    let mut top_keys = Vec::with_capacity(keys.len());
    for g in &keys {
        let name = store.get_key(&g.name).await.map_err(internal)?.and_then(|k| k.name);
        top_keys.push(json!({
            "key_id": g.name, "name": name,
            "requests": g.totals.requests, "tokens": g.totals.total_tokens, "cost_usd": g.totals.cost_usd,
        }));
    }
    let today = models.iter().fold((0u64, 0u64, 0f64), |(r, t, c), g| {
        (r + g.totals.requests, t + g.totals.total_tokens, c + g.totals.cost_usd)
    });
    let series = &app.metrics.series;
    let mut current = serde_json::to_value(series.recent(60)).unwrap_or_default();
    current["in_flight"] = json!(app.router.backends.iter().map(|b| b.in_flight()).sum::<usize>());
    current["queued"] = json!(app.router.admission.waiting());
    current["connections"] = json!(app.metrics.connections_open.load(Relaxed));
    let top = |g: &UsageGroup| json!({"model": g.name, "requests": g.totals.requests, "tokens": g.totals.total_tokens, "cost_usd": g.totals.cost_usd});
    let exports: Vec<Value> = app
        .exports
        .each()
        .map(|(sink, c)| {
            let last = c.last_written_unix.load(Relaxed);
            json!({"sink": sink, "delivered": c.written.load(Relaxed), "failures": c.batches_failed.load(Relaxed),
                   "dropped": c.dropped.load(Relaxed),
                   "last_delivery_ms": (last > 0).then_some(last * 1000)})
        })
        .collect();
    Ok(json_value(
        StatusCode::OK,
        &json!({
            "now_ms": now_ms,
            "step_s": STEP_S,
            "series": series.charts(),
            "current": current,
            "today": {"requests": today.0, "tokens": today.1, "cost_usd": today.2},
            "backends": app.router.backends.iter().map(|b| backend_json(b, &app.router, app.clock.mono_ms())).collect::<Vec<_>>(),
            "top_models": models.iter().take(5).map(top).collect::<Vec<_>>(),
            "top_keys": top_keys,
            "exports": exports,
            "guardrails": !app.config.guardrails.is_empty(),
        }),
    ))
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct UsageParams {
    range: Option<String>,
    by: Option<String>,
    /// One team's usage (by name), or one user's (by email): what a role may see anyway.
    team: Option<String>,
    user: Option<String>,
}

/// `GET /ui/api/usage` (and `.csv`): totals per bucket and per group over 24 h, 7 d or 30 d.
pub async fn usage(
    app: &Arc<App>,
    operator: &Operator,
    query: Option<&str>,
    csv: bool,
) -> Result<Response<GatewayBody>, GatewayError> {
    let store = store(app)?;
    let mut p: UsageParams = serde_urlencoded::from_str(query.unwrap_or(""))
        .map_err(|e| GatewayError::bad_request(format!("invalid query parameters: {e}"), None))?;
    operator.restrict_usage(store, &mut p.team, &mut p.user).await?;
    let within = Operator::group_scope(p.team.as_deref(), p.user.as_deref());
    let range = p.range.unwrap_or_else(|| "24h".to_owned());
    let (span_ms, bucket) = match range.as_str() {
        "24h" => (DAY_MS, crate::store::Bucket::Hour),
        "7d" => (7 * DAY_MS, crate::store::Bucket::Day),
        "30d" => (30 * DAY_MS, crate::store::Bucket::Day),
        _ => return Err(bad("`range` must be 24h, 7d or 30d", "range")),
    };
    let by = match p.by.as_deref().unwrap_or("key") {
        "key" => GroupBy::Key,
        "user" => GroupBy::User,
        "team" => GroupBy::Team,
        "model" => GroupBy::Model,
        _ => return Err(bad("`by` must be key, user, team or model", "by")),
    };
    let now_ms = app.clock.unix_ms();
    // Whole hours: the last 24 of them including this one (days: whole UTC days).
    let to_ms = now_ms.div_euclid(HOUR_MS) * HOUR_MS + HOUR_MS;
    let from_ms = match bucket {
        crate::store::Bucket::Hour => to_ms - span_ms,
        crate::store::Bucket::Day => (now_ms.div_euclid(DAY_MS) + 1) * DAY_MS - span_ms,
    };
    let q = crate::store::UsageQuery {
        from_ms: Some(from_ms),
        to_ms: Some(to_ms),
        bucket,
        team: p.team.clone(),
        user: p.user.clone(),
        ..Default::default()
    };
    let (report, groups, mut keys) = tokio::try_join!(
        store.usage_report(&q),
        store.usage_groups(by, from_ms, to_ms, 500, within.as_ref()),
        store.list_keys()
    )
    .map_err(internal)?;
    keys.retain(|k| operator.sees_key(k));
    let names: HashMap<&str, &str> =
        keys.iter().filter_map(|k| k.name.as_deref().map(|n| (k.id.as_str(), n))).collect();
    let label = |g: &UsageGroup| if by == GroupBy::Key { names.get(g.name.as_str()).copied() } else { None };
    if csv {
        let mut out = String::from("group,label,requests,prompt_tokens,completion_tokens,total_tokens,cost_usd\n");
        for g in &groups {
            let t = &g.totals;
            out.push_str(&format!(
                "{},{},{},{},{},{},{:.6}\n",
                csv_field(&g.name),
                csv_field(label(g).unwrap_or(&g.name)),
                t.requests,
                t.prompt_tokens,
                t.completion_tokens,
                t.total_tokens,
                t.cost_usd
            ));
        }
        let mut resp = Response::new(full(Bytes::from(out)));
        let h = resp.headers_mut();
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/csv; charset=utf-8"));
        if let Ok(v) = HeaderValue::try_from(format!("attachment; filename=\"switchyard-usage-{range}.csv\"")) {
            h.insert(header::CONTENT_DISPOSITION, v);
        }
        return Ok(resp);
    }
    // Budgets: each budgeted key's spend in its current period (a handful of keys, one rollup read each).
    let mut budgets = Vec::new();
    for k in keys.iter().filter(|k| k.budget_usd.is_some() && k.revoked_at.is_none()) {
        let since = crate::limit::period_start(k.budget_period.as_deref(), now_ms);
        let spent = store.key_spend(&k.id, since).await.map_err(internal)?;
        budgets.push(json!({"key_id": k.id, "name": k.name, "budget_usd": k.budget_usd,
                            "period": k.budget_period, "spent_usd": spent}));
    }
    let series = json!({
        "t": report.buckets.iter().map(|b| b.start_ms / 1000).collect::<Vec<_>>(),
        "requests": report.buckets.iter().map(|b| b.totals.requests).collect::<Vec<_>>(),
        "tokens": report.buckets.iter().map(|b| b.totals.total_tokens).collect::<Vec<_>>(),
        "cost_usd": report.buckets.iter().map(|b| b.totals.cost_usd).collect::<Vec<_>>(),
    });
    Ok(json_value(
        StatusCode::OK,
        &json!({
            "range": range, "bucket": if bucket == crate::store::Bucket::Hour { "hour" } else { "day" },
            "from_ms": from_ms, "to_ms": to_ms, "series": series,
            "groups": groups.iter().map(|g| group_json(g, label(g))).collect::<Vec<_>>(),
            "budgets": budgets,
        }),
    ))
}

/// A CSV field, quoted when it needs to be; a leading formula character is defused (CSV injection).
fn csv_field(text: &str) -> String {
    let text = if text.starts_with(['=', '+', '-', '@']) { format!("'{text}") } else { text.to_owned() };
    if text.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RequestParams {
    id: Option<String>,
    key_id: Option<String>,
    user: Option<String>,
    team: Option<String>,
    model: Option<String>,
    status: Option<String>,
    from: Option<String>,
    to: Option<String>,
    before: Option<String>,
    limit: Option<u32>,
}

/// `GET /ui/api/requests`: one page of the request log.
pub async fn requests(
    app: &Arc<App>,
    operator: &Operator,
    query: Option<&str>,
) -> Result<Response<GatewayBody>, GatewayError> {
    let store = store(app)?;
    let mut p: RequestParams = serde_urlencoded::from_str(query.unwrap_or(""))
        .map_err(|e| GatewayError::bad_request(format!("invalid query parameters: {e}"), None))?;
    let text = |v: Option<String>| v.map(|s| s.trim().to_owned()).filter(|s| !s.is_empty());
    (p.team, p.user) = (text(p.team), text(p.user));
    operator.restrict_usage(store, &mut p.team, &mut p.user).await?;
    let ms = |v: Option<String>, name: &'static str| {
        text(v)
            .map(|t| t.parse::<i64>().map_err(|_| bad(format!("`{name}` must be unix milliseconds"), name)))
            .transpose()
    };
    let status = match text(p.status).as_deref() {
        None => None,
        Some("2xx") => Some(StatusFilter::Range(200, 300)),
        Some("4xx") => Some(StatusFilter::Range(400, 500)),
        Some("5xx") => Some(StatusFilter::Range(500, 600)),
        Some("error") => Some(StatusFilter::Range(400, 1000)),
        Some(code) => match code.parse::<u16>() {
            Ok(code) if (100..1000).contains(&code) => Some(StatusFilter::Exactly(code)),
            _ => return Err(bad("`status` must be 2xx, 4xx, 5xx, error or a status code", "status")),
        },
    };
    let before = match text(p.before) {
        None => None,
        Some(cursor) => {
            let bad_cursor = || bad("`before` must be a cursor from a previous page", "before");
            let (ts, id) = cursor.split_once(':').ok_or_else(bad_cursor)?;
            Some((ts.parse::<i64>().map_err(|_| bad_cursor())?, id.to_owned()))
        }
    };
    let limit = p.limit.unwrap_or(50).clamp(1, 500);
    let q = RequestQuery {
        id: text(p.id),
        key_id: text(p.key_id),
        user: p.user,
        team: p.team,
        model: text(p.model),
        status,
        from_ms: ms(p.from, "from")?,
        to_ms: ms(p.to, "to")?,
        before,
        // One more than shown tells whether an older page exists.
        limit: limit + 1,
    };
    let mut rows = store.request_log(&q).await.map_err(internal)?;
    let more = rows.len() > limit as usize;
    rows.truncate(limit as usize);
    let next = more.then(|| rows.last().map(|r| format!("{}:{}", r.ts_ms, r.id))).flatten();
    Ok(json_value(StatusCode::OK, &json!({"data": rows, "next": next})))
}

/// `GET /ui/api/requests/bodies?id=…`: the bodies kept for one request (`console.store_bodies`).
pub async fn request_bodies(app: &Arc<App>, query: Option<&str>) -> Result<Response<GatewayBody>, GatewayError> {
    #[derive(Deserialize)]
    struct Params {
        id: String,
    }
    let p: Params = serde_urlencoded::from_str(query.unwrap_or(""))
        .map_err(|e| GatewayError::bad_request(format!("invalid query parameters: {e}"), Some("id")))?;
    match store(app)?.request_bodies(&p.id).await.map_err(internal)? {
        Some(bodies) => Ok(json_value(StatusCode::OK, &json!(bodies))),
        None => Err(GatewayError::NotFound { message: "no bodies were kept for this request".into() }),
    }
}

/// `GET /ui/api/backends`: each backend now and over the last minutes, and what serves each model.
pub fn backends(app: &Arc<App>) -> Response<GatewayBody> {
    let series = &app.metrics.series;
    let backends: Vec<Value> = app
        .router
        .backends
        .iter()
        .map(|b| {
            let mut v = backend_json(b, &app.router, app.clock.mono_ms());
            v["history"] = series
                .backend_history(b.name())
                .into_iter()
                .map(|(t, r)| json!({"t": t, "up": r.up, "breaker_open": r.breaker_open, "in_flight": r.in_flight}))
                .collect();
            v
        })
        .collect();
    let mut aliases: HashMap<&str, Vec<&str>> = HashMap::new();
    for (alias, target) in &app.config.aliases {
        aliases.entry(target.as_str()).or_default().push(alias.as_str());
    }
    let models: Vec<Value> = app
        .router
        .catalogue()
        .into_iter()
        .map(|(model, serving)| {
            let mut names = aliases.get(model.as_str()).cloned().unwrap_or_default();
            names.sort_unstable();
            json!({"model": model, "backends": serving, "aliases": names})
        })
        .collect();
    json_value(
        StatusCode::OK,
        &json!({"backends": backends, "models": models, "routing": {"strategy": app.config.strategy.as_str()}}),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_lose_their_credentials_and_csv_fields_their_formulas() {
        assert_eq!(shown_url("http://user:pw@10.0.0.1:8000/v1"), "http://10.0.0.1:8000/v1");
        assert_eq!(shown_url("http://10.0.0.1:8000"), "http://10.0.0.1:8000");
        assert_eq!(csv_field("plain"), "plain");
        assert_eq!(csv_field("a,b"), "\"a,b\"");
        assert_eq!(csv_field("=SUM(A1)"), "'=SUM(A1)");
        assert_eq!(csv_field("say \"hi\"\n"), "\"say \"\"hi\"\"\n\"");
    }
}
