-- Guardrails (issue 32). A key's and a team's own guards, added to what the configuration applies:
-- a JSON list of guard names, NULL for none (a key's and its team's lists add; none removes any).
-- And each request's verdicts, `[{guard, kind, action, count}]` as JSON, NULL for none.
ALTER TABLE api_keys ADD COLUMN guardrails TEXT;
ALTER TABLE teams ADD COLUMN guardrails TEXT;
ALTER TABLE usage_records ADD COLUMN guardrails TEXT;
