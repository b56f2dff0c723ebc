-- The request log's failures of one key, team or model ("team X, 5xx only"): the (column, ts_ms) indexes
-- of 0005 would walk every row of that team to find its few failures, or prove it has none (822 ms for a
-- team of 500,000 rows without one, at 10 million records). Partial indexes over the failed rows only
-- answer from those rows; the request log's query repeats `status >= 400` so the planner can use them.
-- Failures are a small share of the rows, so they cost writes little.
CREATE INDEX usage_records_key_errors_ts ON usage_records (key_id, ts_ms) WHERE status >= 400;
CREATE INDEX usage_records_team_errors_ts ON usage_records (team, ts_ms) WHERE status >= 400;
CREATE INDEX usage_records_model_errors_ts ON usage_records (model_served, ts_ms) WHERE status >= 400;
