//! `switchyard teams …` and `switchyard users …`: thin clients of the admin API's teams, members
//! and users, as `switchyard keys` is of its keys.

use clap::{Args, Subcommand};
use http::Method;
use serde_json::{json, Map, Value};

use crate::keys::admin_call;

/// Where the admin API is and the master key, for `switchyard keys|teams|users`.
#[derive(Args, Debug)]
pub struct Admin {
    /// Gateway base URL (before or after the action: `keys --url U list` or `keys list --url U`).
    #[arg(long, global = true, env = "SWITCHYARD_URL", default_value = "http://127.0.0.1:4100")]
    pub url: String,
    /// Master key (sent as Bearer; before or after the action).
    #[arg(long, global = true, env = "SWITCHYARD_MASTER_KEY", hide_env_values = true)]
    pub master_key: Option<String>,
}

/// Limits a key, a team or a user may carry.
#[derive(Args, Debug, Default)]
pub struct Limits {
    #[arg(long)]
    rpm: Option<u32>,
    #[arg(long)]
    tpm: Option<u64>,
    #[arg(long)]
    max_parallel: Option<u32>,
    #[arg(long)]
    budget_usd: Option<f64>,
    /// daily | weekly | monthly
    #[arg(long)]
    budget_period: Option<String>,
}

#[derive(Args, Debug, Default)]
struct Team {
    #[arg(long)]
    name: Option<String>,
    /// Allowed model globs, comma-separated (default: all).
    #[arg(long, value_delimiter = ',')]
    models: Option<Vec<String>>,
    #[command(flatten)]
    limits: Limits,
    /// MCP servers the team's keys may use, comma-separated globs (default: all).
    #[arg(long, value_delimiter = ',')]
    mcp_servers: Option<Vec<String>>,
    /// MCP tools the team's keys may use, comma-separated globs over `{server}__{tool}`.
    #[arg(long, value_delimiter = ',')]
    mcp_tools: Option<Vec<String>>,
}

#[derive(Args, Debug, Default)]
struct User {
    #[arg(long)]
    email: Option<String>,
    #[arg(long)]
    name: Option<String>,
    /// admin | team_admin | member | viewer
    #[arg(long)]
    role: Option<String>,
    #[command(flatten)]
    limits: Limits,
}

#[derive(Args, Debug)]
pub struct TeamsArgs {
    #[command(flatten)]
    admin: Admin,
    #[command(subcommand)]
    action: TeamsAction,
}

#[derive(Subcommand, Debug)]
enum TeamsAction {
    /// Create a team.
    Create(Team),
    /// List teams.
    List,
    /// Show a team: its members, keys and spend this budget period.
    Show { id: String },
    /// Change a team's name, models, limits or MCP allow-lists.
    Update {
        id: String,
        #[command(flatten)]
        team: Team,
    },
    /// Delete a team (its keys stay, without a team).
    Delete { id: String },
    /// Add a user to the team, or change their role in it.
    AddMember {
        id: String,
        user_id: String,
        /// team_admin | member
        #[arg(long, default_value = "member")]
        role: String,
    },
    /// Take a user out of the team.
    RemoveMember { id: String, user_id: String },
}

#[derive(Args, Debug)]
pub struct UsersArgs {
    #[command(flatten)]
    admin: Admin,
    #[command(subcommand)]
    action: UsersAction,
}

#[derive(Subcommand, Debug)]
enum UsersAction {
    /// Create a user.
    Create(User),
    /// List users.
    List,
    /// Show a user and their teams.
    Show { id: String },
    /// Change a user's email, name, role or limits.
    Update {
        id: String,
        #[command(flatten)]
        user: User,
    },
    /// Delete a user (their keys stay, without a user).
    Delete { id: String },
}

/// The fields given, as the admin API's JSON (absent ones left out).
fn object(fields: &[(&str, Value)]) -> Value {
    let m: Map<String, Value> =
        fields.iter().filter(|(_, v)| !v.is_null()).map(|(k, v)| ((*k).to_owned(), v.clone())).collect();
    Value::Object(m)
}

impl Limits {
    pub fn fields(&self) -> [(&'static str, Value); 5] {
        [
            ("rpm", json!(self.rpm)),
            ("tpm", json!(self.tpm)),
            ("max_parallel", json!(self.max_parallel)),
            ("budget_usd", json!(self.budget_usd)),
            ("budget_period", json!(self.budget_period)),
        ]
    }
}

impl Team {
    fn to_json(&self) -> Value {
        let mut fields = vec![
            ("name", json!(self.name)),
            ("models", json!(self.models)),
            ("mcp_servers", json!(self.mcp_servers)),
            ("mcp_tools", json!(self.mcp_tools)),
        ];
        fields.extend(self.limits.fields());
        object(&fields)
    }
}

impl User {
    fn to_json(&self) -> Value {
        let mut fields = vec![("email", json!(self.email)), ("name", json!(self.name)), ("role", json!(self.role))];
        fields.extend(self.limits.fields());
        object(&fields)
    }
}

pub async fn teams(args: TeamsArgs) -> Result<(), String> {
    let (method, path, body) = match &args.action {
        TeamsAction::Create(t) => (Method::POST, "/admin/teams".to_owned(), t.to_json()),
        TeamsAction::List => (Method::GET, "/admin/teams".to_owned(), Value::Null),
        TeamsAction::Show { id } => (Method::GET, format!("/admin/teams/{id}"), Value::Null),
        TeamsAction::Update { id, team } => (Method::PATCH, format!("/admin/teams/{id}"), team.to_json()),
        TeamsAction::Delete { id } => (Method::DELETE, format!("/admin/teams/{id}"), Value::Null),
        TeamsAction::AddMember { id, user_id, role } => {
            (Method::POST, format!("/admin/teams/{id}/members"), json!({"user_id": user_id, "role": role}))
        }
        TeamsAction::RemoveMember { id, user_id } => {
            (Method::DELETE, format!("/admin/teams/{id}/members/{user_id}"), Value::Null)
        }
    };
    admin_call(args.admin.url.trim_end_matches('/'), args.admin.master_key.as_deref(), method, &path, &body).await
}

pub async fn users(args: UsersArgs) -> Result<(), String> {
    let (method, path, body) = match &args.action {
        UsersAction::Create(u) => (Method::POST, "/admin/users".to_owned(), u.to_json()),
        UsersAction::List => (Method::GET, "/admin/users".to_owned(), Value::Null),
        UsersAction::Show { id } => (Method::GET, format!("/admin/users/{id}"), Value::Null),
        UsersAction::Update { id, user } => (Method::PATCH, format!("/admin/users/{id}"), user.to_json()),
        UsersAction::Delete { id } => (Method::DELETE, format!("/admin/users/{id}"), Value::Null),
    };
    admin_call(args.admin.url.trim_end_matches('/'), args.admin.master_key.as_deref(), method, &path, &body).await
}
