//! Teams, users and memberships (`teams`, `users`, `team_members`, migration 0009). Lists are
//! JSON arrays in TEXT columns, a team's MCP allow-lists the same `mcp` JSON as a key's.

use super::keys::{
    guardrails_column, json_list, mcp_column, narrow, parse_guardrails, parse_list, parse_mcp, parse_policies,
    policies_column,
};
use super::{to_i64, Store, StoreError};
use crate::records::{LevelLimits, Membership, TeamRecord, UserRecord};

const TEAM_COLUMNS: &str =
    "id, name, models, rpm, tpm, max_parallel, budget_usd, budget_period, mcp, created_at, guardrails, policies";
const USER_COLUMNS: &str =
    "id, email, name, role, rpm, tpm, max_parallel, budget_usd, budget_period, created_at, sessions_after";

type TeamRow = (
    String,
    String,
    String,
    Option<i64>,
    Option<i64>,
    Option<i64>,
    Option<f64>,
    Option<String>,
    Option<String>,
    i64,
    Option<String>,
    Option<String>,
);
type UserRow = (
    String,
    String,
    Option<String>,
    String,
    Option<i64>,
    Option<i64>,
    Option<i64>,
    Option<f64>,
    Option<String>,
    i64,
    i64,
);
type MemberRow = (String, String, String, i64);

/// A level's rate limits as stored: `(rpm, tpm, max_parallel)`.
type StoredRates = (Option<i64>, Option<i64>, Option<i64>);

fn stored(l: &LevelLimits) -> Result<StoredRates, StoreError> {
    Ok((l.rpm.map(i64::from), l.tpm.map(|v| to_i64(v, "tpm")).transpose()?, l.max_parallel.map(i64::from)))
}

fn limits(
    (rpm, tpm, max_parallel): StoredRates,
    budget_usd: Option<f64>,
    budget_period: Option<String>,
) -> Result<LevelLimits, StoreError> {
    Ok(LevelLimits {
        rpm: narrow(rpm, "rpm")?,
        tpm: narrow(tpm, "tpm")?,
        max_parallel: narrow(max_parallel, "max_parallel")?,
        budget_usd,
        budget_period,
    })
}

fn team(row: TeamRow) -> Result<TeamRecord, StoreError> {
    let (id, name, models, rpm, tpm, max_parallel, budget_usd, budget_period, mcp, created_at, guardrails, policies) =
        row;
    let (mcp_servers, mcp_tools) = parse_mcp(mcp.as_deref())?;
    Ok(TeamRecord {
        id,
        name,
        models: parse_list(&models, "models")?,
        limits: limits((rpm, tpm, max_parallel), budget_usd, budget_period)?,
        mcp_servers,
        mcp_tools,
        created_at,
        guardrails: parse_guardrails(guardrails.as_deref())?,
        policies: parse_policies(policies.as_deref())?,
    })
}

fn user(row: UserRow) -> Result<UserRecord, StoreError> {
    let (id, email, name, role, rpm, tpm, max_parallel, budget_usd, budget_period, created_at, sessions_after) = row;
    Ok(UserRecord {
        id,
        email,
        name,
        role,
        limits: limits((rpm, tpm, max_parallel), budget_usd, budget_period)?,
        created_at,
        sessions_after,
    })
}

impl Store {
    /// Inserts a team; a used id or name gives [`StoreError::Conflict`].
    pub async fn insert_team(&self, t: &TeamRecord) -> Result<(), StoreError> {
        self.write_team(t, true).await.map(drop)
    }

    /// Replaces every field of the team with `t.id`; false if there is no such team.
    pub async fn update_team(&self, t: &TeamRecord) -> Result<bool, StoreError> {
        self.write_team(t, false).await
    }

    async fn write_team(&self, t: &TeamRecord, insert: bool) -> Result<bool, StoreError> {
        let (rpm, tpm, max_parallel) = stored(&t.limits)?;
        let (models, mcp) = (json_list(&t.models)?, mcp_column(&t.mcp_servers, &t.mcp_tools)?);
        let (guardrails, policies) = (guardrails_column(&t.guardrails)?, policies_column(&t.policies)?);
        let sql = if insert {
            format!("INSERT INTO teams ({TEAM_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)")
        } else {
            "UPDATE teams SET name = $2, models = $3, rpm = $4, tpm = $5, max_parallel = $6, budget_usd = $7, \
             budget_period = $8, mcp = $9, created_at = $10, guardrails = $11, policies = $12 WHERE id = $1"
                .to_owned()
        };
        let affected = with_pool!(self, |pool| {
            sqlx::query(&sql)
                .bind(&t.id)
                .bind(&t.name)
                .bind(&models)
                .bind(rpm)
                .bind(tpm)
                .bind(max_parallel)
                .bind(t.limits.budget_usd)
                .bind(&t.limits.budget_period)
                .bind(&mcp)
                .bind(t.created_at)
                .bind(&guardrails)
                .bind(&policies)
                .execute(pool)
                .await?
                .rows_affected()
        });
        Ok(affected > 0)
    }

    pub async fn get_team(&self, id: &str) -> Result<Option<TeamRecord>, StoreError> {
        let sql = format!("SELECT {TEAM_COLUMNS} FROM teams WHERE id = $1");
        let row: Option<TeamRow> = with_pool!(self, |pool| sqlx::query_as(&sql).bind(id).fetch_optional(pool).await?);
        row.map(team).transpose()
    }

    pub async fn team_by_name(&self, name: &str) -> Result<Option<TeamRecord>, StoreError> {
        let sql = format!("SELECT {TEAM_COLUMNS} FROM teams WHERE name = $1");
        let row: Option<TeamRow> =
            with_pool!(self, |pool| sqlx::query_as(&sql).bind(name).fetch_optional(pool).await?);
        row.map(team).transpose()
    }

    /// Every team, by name.
    pub async fn list_teams(&self) -> Result<Vec<TeamRecord>, StoreError> {
        let sql = format!("SELECT {TEAM_COLUMNS} FROM teams ORDER BY name");
        let rows: Vec<TeamRow> = with_pool!(self, |pool| sqlx::query_as(&sql).fetch_all(pool).await?);
        rows.into_iter().map(team).collect()
    }

    /// Deletes the team and its memberships; its keys lose their team (and keep working, as
    /// keys of their own). False if there was no such team.
    pub async fn delete_team(&self, id: &str) -> Result<bool, StoreError> {
        let affected = with_pool!(self, |pool| {
            let mut tx = pool.begin().await?;
            sqlx::query("UPDATE api_keys SET team_id = NULL WHERE team_id = $1").bind(id).execute(&mut *tx).await?;
            sqlx::query("DELETE FROM team_members WHERE team_id = $1").bind(id).execute(&mut *tx).await?;
            let n = sqlx::query("DELETE FROM teams WHERE id = $1").bind(id).execute(&mut *tx).await?.rows_affected();
            tx.commit().await?;
            n
        });
        Ok(affected > 0)
    }

    /// Inserts a user; a used id or email gives [`StoreError::Conflict`].
    pub async fn insert_user(&self, u: &UserRecord) -> Result<(), StoreError> {
        self.write_user(u, true).await.map(drop)
    }

    /// Replaces every field of the user with `u.id`; false if there is no such user.
    pub async fn update_user(&self, u: &UserRecord) -> Result<bool, StoreError> {
        self.write_user(u, false).await
    }

    async fn write_user(&self, u: &UserRecord, insert: bool) -> Result<bool, StoreError> {
        let (rpm, tpm, max_parallel) = stored(&u.limits)?;
        let sql = if insert {
            format!("INSERT INTO users ({USER_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)")
        } else {
            "UPDATE users SET email = $2, name = $3, role = $4, rpm = $5, tpm = $6, max_parallel = $7, \
             budget_usd = $8, budget_period = $9, created_at = $10, sessions_after = $11 WHERE id = $1"
                .to_owned()
        };
        let affected = with_pool!(self, |pool| {
            sqlx::query(&sql)
                .bind(&u.id)
                .bind(&u.email)
                .bind(&u.name)
                .bind(&u.role)
                .bind(rpm)
                .bind(tpm)
                .bind(max_parallel)
                .bind(u.limits.budget_usd)
                .bind(&u.limits.budget_period)
                .bind(u.created_at)
                .bind(u.sessions_after)
                .execute(pool)
                .await?
                .rows_affected()
        });
        Ok(affected > 0)
    }

    pub async fn get_user(&self, id: &str) -> Result<Option<UserRecord>, StoreError> {
        let sql = format!("SELECT {USER_COLUMNS} FROM users WHERE id = $1");
        let row: Option<UserRow> = with_pool!(self, |pool| sqlx::query_as(&sql).bind(id).fetch_optional(pool).await?);
        row.map(user).transpose()
    }

    /// The user with this email (exactly as stored).
    pub async fn user_by_email(&self, email: &str) -> Result<Option<UserRecord>, StoreError> {
        let sql = format!("SELECT {USER_COLUMNS} FROM users WHERE email = $1");
        let row: Option<UserRow> =
            with_pool!(self, |pool| sqlx::query_as(&sql).bind(email).fetch_optional(pool).await?);
        row.map(user).transpose()
    }

    /// Every user, by email.
    pub async fn list_users(&self) -> Result<Vec<UserRecord>, StoreError> {
        let sql = format!("SELECT {USER_COLUMNS} FROM users ORDER BY email");
        let rows: Vec<UserRow> = with_pool!(self, |pool| sqlx::query_as(&sql).fetch_all(pool).await?);
        rows.into_iter().map(user).collect()
    }

    /// Deletes the user and their memberships; their keys lose their user. False if there was no
    /// such user.
    pub async fn delete_user(&self, id: &str) -> Result<bool, StoreError> {
        let affected = with_pool!(self, |pool| {
            let mut tx = pool.begin().await?;
            sqlx::query("UPDATE api_keys SET user_id = NULL WHERE user_id = $1").bind(id).execute(&mut *tx).await?;
            sqlx::query("DELETE FROM team_members WHERE user_id = $1").bind(id).execute(&mut *tx).await?;
            let n = sqlx::query("DELETE FROM users WHERE id = $1").bind(id).execute(&mut *tx).await?.rows_affected();
            tx.commit().await?;
            n
        });
        Ok(affected > 0)
    }

    /// Adds the user to the team, or changes their role in it.
    pub async fn put_member(&self, m: &Membership) -> Result<(), StoreError> {
        let sql = "INSERT INTO team_members (team_id, user_id, role, created_at) VALUES ($1, $2, $3, $4) \
                   ON CONFLICT (team_id, user_id) DO UPDATE SET role = excluded.role";
        with_pool!(self, |pool| {
            sqlx::query(sql).bind(&m.team_id).bind(&m.user_id).bind(&m.role).bind(m.created_at).execute(pool).await?;
        });
        Ok(())
    }

    /// False if the user was not a member.
    pub async fn delete_member(&self, team_id: &str, user_id: &str) -> Result<bool, StoreError> {
        let sql = "DELETE FROM team_members WHERE team_id = $1 AND user_id = $2";
        let affected =
            with_pool!(self, |pool| sqlx::query(sql).bind(team_id).bind(user_id).execute(pool).await?.rows_affected());
        Ok(affected > 0)
    }

    /// A team's members, or a user's memberships: whichever id is given.
    pub async fn memberships(
        &self,
        team_id: Option<&str>,
        user_id: Option<&str>,
    ) -> Result<Vec<Membership>, StoreError> {
        let sql = "SELECT team_id, user_id, role, created_at FROM team_members \
                   WHERE ($1 IS NULL OR team_id = $1) AND ($2 IS NULL OR user_id = $2) ORDER BY created_at, user_id";
        let rows: Vec<MemberRow> =
            with_pool!(self, |pool| sqlx::query_as(sql).bind(team_id).bind(user_id).fetch_all(pool).await?);
        Ok(rows
            .into_iter()
            .map(|(team_id, user_id, role, created_at)| Membership { team_id, user_id, role, created_at })
            .collect())
    }

    /// What a team has spent since `since_ms` (its keys' usage, recorded under its name).
    pub async fn team_spend(&self, team_name: &str, since_ms: i64) -> Result<f64, StoreError> {
        self.spend_where("team", team_name, since_ms).await
    }

    /// What a user has spent since `since_ms` (usage recorded under their email).
    pub async fn user_spend(&self, email: &str, since_ms: i64) -> Result<f64, StoreError> {
        self.spend_where("user_name", email, since_ms).await
    }
}
