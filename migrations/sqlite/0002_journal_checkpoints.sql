-- One usage-journal checkpoint per journal directory, so several gateways can share a database.
CREATE TABLE journal_checkpoints (
    journal_id     TEXT PRIMARY KEY NOT NULL,
    journal_offset INTEGER NOT NULL
);
INSERT INTO journal_checkpoints (journal_id, journal_offset)
    SELECT 'default', journal_offset FROM journal_checkpoint WHERE id = 1;
