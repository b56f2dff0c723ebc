-- The audit log (issue 31): every change through the admin API or the console, and every sign-in, as
-- a hash chain: `hash` = SHA-256 over `prev_hash` and this entry's fields as stored, so an edited or
-- removed entry breaks the chain (`switchyard audit verify`). Times are unix milliseconds.
CREATE TABLE audit_log (
    seq        INTEGER PRIMARY KEY NOT NULL,
    ts_ms      INTEGER NOT NULL,
    actor      TEXT    NOT NULL,
    action     TEXT    NOT NULL,
    target     TEXT    NOT NULL,
    before     TEXT,
    after      TEXT,
    client     TEXT,
    prev_hash  TEXT    NOT NULL,
    hash       TEXT    NOT NULL
);
