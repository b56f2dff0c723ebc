-- Batches in a fleet and past their window. `runner` is the instance running the batch and
-- `runner_until` (unix ms) when its claim lapses unless renewed: one instance runs a batch at a
-- time, and another takes it over once a dead runner's claim lapses. `expired_at`: when the batch
-- ran out of its completion window (status `expired`).
ALTER TABLE batches ADD COLUMN expired_at BIGINT;
ALTER TABLE batches ADD COLUMN runner TEXT;
ALTER TABLE batches ADD COLUMN runner_until BIGINT;
