-- Guardrails a key or a team adds to what the configuration applies (issue 32): a JSON list of
-- guard names, NULL for none. A key's and its team's lists add to the defaults; none removes any.
ALTER TABLE api_keys ADD COLUMN guardrails TEXT;
ALTER TABLE teams ADD COLUMN guardrails TEXT;
