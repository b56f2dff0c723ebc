-- MCP: a key's MCP permissions, and tool-call usage records.
-- api_keys.mcp: JSON {"servers": [globs] | null, "tools": [globs] | null}; NULL = every server and tool.
ALTER TABLE api_keys ADD COLUMN mcp TEXT;
-- usage_records.tool: the MCP tool of a tool-call record (its server is `backend`; `model_requested` and
-- `model_served` are `mcp:{server}`, so rollups count calls per server); NULL for model requests.
ALTER TABLE usage_records ADD COLUMN tool TEXT;
-- usage_records.response_bytes: the size of a tool call's answer.
ALTER TABLE usage_records ADD COLUMN response_bytes BIGINT;
