-- Experiments (issue 57). A request an experiment assigned carries the experiment's name and its
-- variant (`shadow` for a shadow's own call); NULL for every other request.
ALTER TABLE usage_records ADD COLUMN experiment TEXT;
ALTER TABLE usage_records ADD COLUMN variant TEXT;
CREATE INDEX usage_records_by_experiment ON usage_records (experiment, ts_ms) WHERE experiment IS NOT NULL;

-- Experiments made through /admin/experiments (those in the configuration file are not here):
-- the spec as JSON, in the shape the configuration takes.
CREATE TABLE experiments (
    name        TEXT PRIMARY KEY,
    team        TEXT,
    spec        TEXT NOT NULL,
    created_by  TEXT,
    created_ms  BIGINT NOT NULL,
    updated_ms  BIGINT NOT NULL
);

-- Scores per request and variant: user feedback (`feedback`), a judge model's (`judge`), a
-- webhook's (`webhook`). The latest value of one name from one source counts.
CREATE TABLE experiment_scores (
    request_id  TEXT NOT NULL,
    name        TEXT NOT NULL,
    source      TEXT NOT NULL,
    experiment  TEXT NOT NULL,
    variant     TEXT NOT NULL,
    value       REAL NOT NULL,
    key_id      TEXT,
    ts_ms       BIGINT NOT NULL,
    PRIMARY KEY (request_id, name, source)
);
CREATE INDEX experiment_scores_by_metric ON experiment_scores (experiment, name, variant);

-- A primary's and its shadow's answers side by side (redacted, cut, bounded per experiment).
CREATE TABLE experiment_pairs (
    request_id       TEXT PRIMARY KEY,
    experiment       TEXT NOT NULL,
    variant          TEXT NOT NULL,
    primary_model    TEXT NOT NULL,
    shadow_model     TEXT NOT NULL,
    request          TEXT,
    primary_answer   TEXT,
    shadow_answer    TEXT,
    shadow_status    INTEGER NOT NULL,
    shadow_latency_ms REAL NOT NULL,
    ts_ms            BIGINT NOT NULL
);
CREATE INDEX experiment_pairs_by_time ON experiment_pairs (experiment, ts_ms);

-- What happened to an experiment: a variant stopped for its error rate, a winner declared.
CREATE TABLE experiment_events (
    experiment  TEXT NOT NULL,
    variant     TEXT,
    kind        TEXT NOT NULL,
    detail      TEXT,
    ts_ms       BIGINT NOT NULL
);
CREATE INDEX experiment_events_by_experiment ON experiment_events (experiment, ts_ms);
