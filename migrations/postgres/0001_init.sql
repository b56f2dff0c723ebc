-- Switchyard storage schema (PostgreSQL). Keep the same logical schema as migrations/sqlite/0001_init.sql.
-- Applied by the gateway at start-up (crates/gateway/src/store/migrations.rs); never edit an applied file: add 0002_*.

-- Virtual keys. `models` and `tags` are JSON arrays of strings (kept as TEXT, like SQLite); times are unix seconds.
CREATE TABLE api_keys (
    id            TEXT             PRIMARY KEY,
    secret_hash   BYTEA            NOT NULL,
    name          TEXT,
    models        TEXT             NOT NULL DEFAULT '[]',
    rpm           BIGINT,
    tpm           BIGINT,
    max_parallel  BIGINT,
    budget_usd    DOUBLE PRECISION,
    budget_period TEXT,
    expires_at    BIGINT,
    revoked_at    BIGINT,
    user_name     TEXT,
    team          TEXT,
    tags          TEXT             NOT NULL DEFAULT '[]',
    created_at    BIGINT           NOT NULL
);

-- One row per request; `id` is the request id, so replaying a journal is idempotent.
-- Reports never scan this table: they read usage_hourly.
CREATE TABLE usage_records (
    id                TEXT             PRIMARY KEY,
    ts_ms             BIGINT           NOT NULL,
    key_id            TEXT,
    user_name         TEXT,
    team              TEXT,
    model_requested   TEXT             NOT NULL,
    model_served      TEXT             NOT NULL,
    backend           TEXT,
    status            INTEGER          NOT NULL,
    prompt_tokens     BIGINT           NOT NULL,
    completion_tokens BIGINT           NOT NULL,
    total_tokens      BIGINT           NOT NULL,
    latency_ms        DOUBLE PRECISION NOT NULL,
    ttft_ms           DOUBLE PRECISION,
    cost_usd          DOUBLE PRECISION NOT NULL,
    estimated         BOOLEAN          NOT NULL
);
CREATE INDEX usage_records_ts_ms ON usage_records (ts_ms);

-- Hourly rollup of usage_records (hour_ms = start of the UTC hour, unix ms). Absent dimensions are ''.
-- `model` is the served model. Rows are only ever upserted with `+=`.
CREATE TABLE usage_hourly (
    hour_ms           BIGINT           NOT NULL,
    key_id            TEXT             NOT NULL DEFAULT '',
    user_name         TEXT             NOT NULL DEFAULT '',
    team              TEXT             NOT NULL DEFAULT '',
    model             TEXT             NOT NULL,
    requests          BIGINT           NOT NULL DEFAULT 0,
    prompt_tokens     BIGINT           NOT NULL DEFAULT 0,
    completion_tokens BIGINT           NOT NULL DEFAULT 0,
    total_tokens      BIGINT           NOT NULL DEFAULT 0,
    cost_usd          DOUBLE PRECISION NOT NULL DEFAULT 0,
    PRIMARY KEY (hour_ms, key_id, user_name, team, model)
);
-- Per-key spend (budgets) reads one key's hours.
CREATE INDEX usage_hourly_key_hour ON usage_hourly (key_id, hour_ms);

-- Byte offset of the usage journal up to which records are in usage_records (single row, id = 1).
CREATE TABLE journal_checkpoint (
    id             INTEGER PRIMARY KEY CHECK (id = 1),
    journal_offset BIGINT  NOT NULL
);
