-- The organisation's policy rules written through /admin/policies (issue 58); those in the
-- configuration file are not here. Evaluated after the configuration's, by `position` then name;
-- the rule as JSON, in the shape the configuration takes.
CREATE TABLE policies (
    name        TEXT PRIMARY KEY,
    position    BIGINT NOT NULL,
    spec        TEXT NOT NULL,
    created_by  TEXT,
    created_ms  BIGINT NOT NULL,
    updated_ms  BIGINT NOT NULL
);
