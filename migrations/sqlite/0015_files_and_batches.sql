-- The Files and Batch APIs (OpenAI's `/v1/files` and `/v1/batches`). `files`: what was uploaded, by
-- whom (the content lives outside the database). `batches`: one batch job each, its counts and the
-- time of each status change; `metadata` and `errors` are JSON, NULL for none. `batch_lines`: each
-- finished line of a running batch, at most once per custom_id (what makes a line exactly-once across
-- restarts), removed once the batch's output file is written. Times are unix seconds.
CREATE TABLE files (
    id          TEXT    PRIMARY KEY NOT NULL,
    owner       TEXT    NOT NULL,
    filename    TEXT    NOT NULL,
    purpose     TEXT    NOT NULL,
    bytes       INTEGER NOT NULL,
    created_at  INTEGER NOT NULL
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
    total             INTEGER NOT NULL DEFAULT 0,
    completed         INTEGER NOT NULL DEFAULT 0,
    failed            INTEGER NOT NULL DEFAULT 0,
    created_at        INTEGER NOT NULL,
    in_progress_at    INTEGER,
    finalizing_at     INTEGER,
    completed_at      INTEGER,
    failed_at         INTEGER,
    cancelling_at     INTEGER,
    cancelled_at      INTEGER,
    expires_at        INTEGER NOT NULL,
    errors            TEXT
);
CREATE INDEX batches_owner_created ON batches (owner, created_at);
CREATE INDEX batches_status ON batches (status);

CREATE TABLE batch_lines (
    batch_id    TEXT    NOT NULL,
    custom_id   TEXT    NOT NULL,
    line        INTEGER NOT NULL,
    status      INTEGER NOT NULL,
    failed      INTEGER NOT NULL, -- 0 or 1
    body        TEXT    NOT NULL,
    request_id  TEXT    NOT NULL,
    PRIMARY KEY (batch_id, custom_id)
);

-- The batch a usage record was made for, NULL for every other request.
ALTER TABLE usage_records ADD COLUMN batch_id TEXT;
