//! `switchyard keys create|list|show|update|revoke`: a thin client of the admin API, so the
//! CLI and HTTP callers go through the same validation and storage.

use clap::{Args, Subcommand};
use http::Method;
use serde_json::{json, Map, Value};
use switchyard_testkit::TestClient;

#[derive(Args, Debug)]
pub struct KeysArgs {
    #[command(flatten)]
    admin: crate::orgs::Admin,
    #[command(subcommand)]
    action: KeysAction,
}

#[derive(Args, Debug, Default)]
struct Policy {
    /// Display name.
    #[arg(long)]
    name: Option<String>,
    /// Allowed model globs, comma-separated (default: all).
    #[arg(long, value_delimiter = ',')]
    models: Option<Vec<String>>,
    #[command(flatten)]
    limits: crate::orgs::Limits,
    /// RFC 3339 time, e.g. 2026-12-31T23:59:59Z
    #[arg(long)]
    expires_at: Option<String>,
    #[arg(long)]
    user: Option<String>,
    #[arg(long)]
    team: Option<String>,
    #[arg(long, value_delimiter = ',')]
    tags: Option<Vec<String>>,
    /// MCP servers the key may use, comma-separated globs (default: all).
    #[arg(long, value_delimiter = ',')]
    mcp_servers: Option<Vec<String>>,
    /// MCP tools the key may use, comma-separated globs over `{server}__{tool}` (default: all).
    #[arg(long, value_delimiter = ',')]
    mcp_tools: Option<Vec<String>>,
    /// The team the key belongs to (`switchyard teams list`): its limits and budget apply too.
    #[arg(long)]
    team_id: Option<String>,
    /// The user the key belongs to (`switchyard users list`).
    #[arg(long)]
    user_id: Option<String>,
}

#[derive(Subcommand, Debug)]
enum KeysAction {
    /// Create a key; prints it once.
    Create(Policy),
    /// List keys.
    List,
    /// Show one key.
    Show { id: String },
    /// Change a key's policy or metadata.
    Update {
        id: String,
        #[command(flatten)]
        policy: Policy,
    },
    /// Revoke a key (refused from its next request on).
    Revoke { id: String },
}

impl Policy {
    fn to_json(&self) -> Value {
        let mut m = Map::new();
        let mut put = |k: &str, v: Value| {
            if !v.is_null() {
                m.insert(k.to_owned(), v);
            }
        };
        put("name", json!(self.name));
        put("models", json!(self.models));
        for (k, v) in self.limits.fields() {
            put(k, v);
        }
        put("expires_at", json!(self.expires_at));
        put("mcp_servers", json!(self.mcp_servers));
        put("mcp_tools", json!(self.mcp_tools));
        put("team_id", json!(self.team_id));
        put("user_id", json!(self.user_id));
        let mut meta = Map::new();
        for (k, v) in [("user", json!(self.user)), ("team", json!(self.team)), ("tags", json!(self.tags))] {
            if !v.is_null() {
                meta.insert(k.to_owned(), v);
            }
        }
        if !meta.is_empty() {
            m.insert("metadata".to_owned(), Value::Object(meta));
        }
        Value::Object(m)
    }
}

pub async fn run(args: KeysArgs) -> Result<(), String> {
    let base = args.admin.url.trim_end_matches('/');
    let (method, path, body) = match &args.action {
        KeysAction::Create(p) => (Method::POST, "/admin/keys".to_owned(), p.to_json()),
        KeysAction::List => (Method::GET, "/admin/keys".to_owned(), Value::Null),
        KeysAction::Show { id } => (Method::GET, format!("/admin/keys/{id}"), Value::Null),
        KeysAction::Update { id, policy } => (Method::PATCH, format!("/admin/keys/{id}"), policy.to_json()),
        KeysAction::Revoke { id } => (Method::DELETE, format!("/admin/keys/{id}"), Value::Null),
    };
    admin_call(base, args.admin.master_key.as_deref(), method, &path, &body).await?;
    if matches!(args.action, KeysAction::Create(_)) {
        eprintln!("Store this key now: it is not shown again.");
    }
    Ok(())
}

/// One admin API call (`body` Null for none); prints the JSON answer, or says why it failed.
pub async fn admin_call(
    base: &str,
    master_key: Option<&str>,
    method: Method,
    path: &str,
    body: &Value,
) -> Result<(), String> {
    let auth = master_key.map(|k| format!("Bearer {k}"));
    let headers: Vec<(&str, &str)> = auth.iter().map(|a| ("authorization", a.as_str())).collect();
    let body = if body.is_null() { Vec::new() } else { serde_json::to_vec(body).unwrap_or_default() };
    let resp = TestClient::new()
        .request(method, &format!("{base}{path}"), body.into(), &headers)
        .await
        .map_err(|e| format!("cannot reach {base}: {e}"))?;
    let value = resp.json();
    if !resp.status.is_success() {
        let message = value["error"]["message"].as_str().map(str::to_owned).unwrap_or_else(|| resp.text());
        return Err(format!("{}: {message}", resp.status));
    }
    println!("{}", serde_json::to_string_pretty(&value).unwrap_or_default());
    Ok(())
}
