-- A2A agents (issue 59). A key's allowed agents: a JSON list of globs over `{agent}` or
-- `{agent}/{Method}`, NULL for every agent. A call to an agent is recorded with the task it
-- concerned and the task's last state seen (its method is in `tool`, as an MCP call's tool is).
ALTER TABLE api_keys ADD COLUMN agents TEXT;
ALTER TABLE usage_records ADD COLUMN task_id TEXT;
ALTER TABLE usage_records ADD COLUMN task_state TEXT;
