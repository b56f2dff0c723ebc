-- Prompt caching (issue 53): of a request's prompt tokens, those read from the provider's prompt
-- cache and those written to it, apart (priced by `prices.MODEL.cache_read` and `cache_write`).
ALTER TABLE usage_records ADD COLUMN cache_read_tokens BIGINT NOT NULL DEFAULT 0;
ALTER TABLE usage_records ADD COLUMN cache_write_tokens BIGINT NOT NULL DEFAULT 0;
-- Key pools (issue 53): the key of the backend's pool a request went with, by its name (never
-- the secret); NULL for backends with one key or none.
ALTER TABLE usage_records ADD COLUMN backend_key TEXT;
