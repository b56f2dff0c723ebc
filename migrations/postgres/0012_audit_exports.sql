-- Audit log delivery (issue 31): how far each export sink has taken the audit log, shared by a
-- fleet so each entry is delivered once per sink, whichever instance delivers it.
CREATE TABLE audit_exports (
    sink TEXT PRIMARY KEY NOT NULL,
    seq  BIGINT NOT NULL
);
