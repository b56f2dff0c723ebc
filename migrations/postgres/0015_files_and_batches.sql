-- The Files and Batch APIs (PostgreSQL; keep in step with migrations/sqlite/0015_files_and_batches.sql):
-- OpenAI's `/v1/files` and `/v1/batches`. `files`: what was uploaded, by whom (the content lives
-- outside the database). `batches`: one batch job each, its counts and the
-- time of each status change; `metadata` and `errors` are JSON, NULL for none. `batch_lines`: each
-- finished line of a running batch, at most once per custom_id (what makes a line exactly-once across
-- restarts), removed once the batch's output file is written. Times are unix seconds.
CREATE TABLE files (
    id          TEXT    PRIMARY KEY NOT NULL,
    owner       TEXT    NOT NULL,
    filename    TEXT    NOT NULL,
    purpose     TEXT    NOT NULL,
    bytes       BIGINT  NOT NULL,
    created_at  BIGINT  NOT NULL
);
CREATE INDEX files_owner_created ON files (owner, created_at);

CREATE TABLE batches (
    id                TEXT    PRIMARY KEY NOT NULL,
    owner             TEXT    NOT NULL,
    key_id            TEXT,
    endpoint          TEXT    NOT NULL,
    input_file_id     TEXT    NOT NULL,
    completion_window TEXT    NOT NULL,
    status            TEXT    NOT NULL,
    metadata          TEXT,
    output_file_id    TEXT,
    error_file_id     TEXT,
    total             BIGINT  NOT NULL DEFAULT 0,
    completed         BIGINT  NOT NULL DEFAULT 0,
    failed            BIGINT  NOT NULL DEFAULT 0,
    created_at        BIGINT  NOT NULL,
    in_progress_at    BIGINT,
    finalizing_at     BIGINT,
    completed_at      BIGINT,
    failed_at         BIGINT,
    cancelling_at     BIGINT,
    cancelled_at      BIGINT,
    expires_at        BIGINT  NOT NULL,
    errors            TEXT
);
CREATE INDEX batches_owner_created ON batches (owner, created_at);
CREATE INDEX batches_status ON batches (status);

CREATE TABLE batch_lines (
    batch_id    TEXT    NOT NULL,
    custom_id   TEXT    NOT NULL,
    line        BIGINT  NOT NULL,
    status      BIGINT  NOT NULL,
    failed      INTEGER NOT NULL, -- 0 or 1
    body        TEXT    NOT NULL,
    request_id  TEXT    NOT NULL,
    PRIMARY KEY (batch_id, custom_id)
);

-- The batch a usage record was made for, NULL for every other request.
ALTER TABLE usage_records ADD COLUMN batch_id TEXT;
