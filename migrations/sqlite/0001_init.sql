-- Switchyard storage schema (SQLite). Keep the same logical schema as migrations/postgres/0001_init.sql.
-- Applied by the gateway at start-up (crates/gateway/src/store/migrations.rs); never edit an applied file: add 0002_*.

-- Virtual keys. `models` and `tags` are JSON arrays of strings; times are unix seconds.
CREATE TABLE api_keys (
    id            TEXT    PRIMARY KEY NOT NULL,
    secret_hash   BLOB    NOT NULL,
    name          TEXT,
    models        TEXT    NOT NULL DEFAULT '[]',
    rpm           INTEGER,
    tpm           INTEGER,
    max_parallel  INTEGER,
    budget_usd    REAL,
    budget_period TEXT,
    expires_at    INTEGER,
    revoked_at    INTEGER,
    user_name     TEXT,
    team          TEXT,
    tags          TEXT    NOT NULL DEFAULT '[]',
    created_at    INTEGER NOT NULL
);

-- One row per request; `id` is the request id, so replaying a journal is idempotent.
-- Reports never scan this table: they read usage_hourly.
CREATE TABLE usage_records (
    id                TEXT    PRIMARY KEY NOT NULL,
    ts_ms             INTEGER NOT NULL,
    key_id            TEXT,
    user_name         TEXT,
    team              TEXT,
    model_requested   TEXT    NOT NULL,
    model_served      TEXT    NOT NULL,
    backend           TEXT,
    status            INTEGER NOT NULL,
    prompt_tokens     INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    total_tokens      INTEGER NOT NULL,
    latency_ms        REAL    NOT NULL,
    ttft_ms           REAL,
    cost_usd          REAL    NOT NULL,
    estimated         BOOLEAN NOT NULL
);
CREATE INDEX usage_records_ts_ms ON usage_records (ts_ms);

-- Hourly rollup of usage_records (hour_ms = start of the UTC hour, unix ms). Absent dimensions are ''.
-- `model` is the served model. Rows are only ever upserted with `+=`.
CREATE TABLE usage_hourly (
    hour_ms           INTEGER NOT NULL,
    key_id            TEXT    NOT NULL DEFAULT '',
    user_name         TEXT    NOT NULL DEFAULT '',
    team              TEXT    NOT NULL DEFAULT '',
    model             TEXT    NOT NULL,
    requests          INTEGER NOT NULL DEFAULT 0,
    prompt_tokens     INTEGER NOT NULL DEFAULT 0,
    completion_tokens INTEGER NOT NULL DEFAULT 0,
    total_tokens      INTEGER NOT NULL DEFAULT 0,
    cost_usd          REAL    NOT NULL DEFAULT 0,
    PRIMARY KEY (hour_ms, key_id, user_name, team, model)
);
-- Per-key spend (budgets) reads one key's hours.
CREATE INDEX usage_hourly_key_hour ON usage_hourly (key_id, hour_ms);

-- Byte offset of the usage journal up to which records are in usage_records (single row, id = 1).
CREATE TABLE journal_checkpoint (
    id             INTEGER PRIMARY KEY NOT NULL CHECK (id = 1),
    journal_offset INTEGER NOT NULL
);
