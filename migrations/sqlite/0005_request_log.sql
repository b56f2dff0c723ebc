-- The console's request log: why each request went where it did, and indexes for its filters. Every filter
-- reads newest first by ts_ms, so each index ends in ts_ms and a page is a short index range scan. Errors
-- (status >= 400) are few: a partial index keeps "show me the failures" fast without indexing every row.
ALTER TABLE usage_records ADD COLUMN route_reason TEXT;
CREATE INDEX usage_records_key_ts ON usage_records (key_id, ts_ms);
CREATE INDEX usage_records_team_ts ON usage_records (team, ts_ms);
CREATE INDEX usage_records_model_ts ON usage_records (model_served, ts_ms);
CREATE INDEX usage_records_errors_ts ON usage_records (ts_ms) WHERE status >= 400;
