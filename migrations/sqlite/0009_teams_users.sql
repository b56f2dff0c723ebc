-- Organisations (issue 31): teams with limits and a budget, users with a role, memberships, and keys
-- that belong to a team, a user or both. Lists are JSON arrays in TEXT; times are unix seconds.
CREATE TABLE teams (
    id            TEXT    PRIMARY KEY NOT NULL,
    name          TEXT    NOT NULL UNIQUE,
    models        TEXT    NOT NULL DEFAULT '[]',
    rpm           INTEGER,
    tpm           INTEGER,
    max_parallel  INTEGER,
    budget_usd    REAL,
    budget_period TEXT,
    mcp           TEXT,
    created_at    INTEGER NOT NULL
);

CREATE TABLE users (
    id            TEXT    PRIMARY KEY NOT NULL,
    email         TEXT    NOT NULL UNIQUE,
    name          TEXT,
    role          TEXT    NOT NULL,
    rpm           INTEGER,
    tpm           INTEGER,
    max_parallel  INTEGER,
    budget_usd    REAL,
    budget_period TEXT,
    created_at    INTEGER NOT NULL
);

CREATE TABLE team_members (
    team_id    TEXT    NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
    user_id    TEXT    NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    role       TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (team_id, user_id)
);
CREATE INDEX team_members_user ON team_members (user_id);

ALTER TABLE api_keys ADD COLUMN team_id TEXT;
ALTER TABLE api_keys ADD COLUMN user_id TEXT;
CREATE INDEX api_keys_team ON api_keys (team_id);
CREATE INDEX api_keys_user ON api_keys (user_id);
