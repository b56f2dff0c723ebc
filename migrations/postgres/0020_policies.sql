-- Policies as code (issue 58). A request's record names the rules that decided or routed it and
-- the tags a `set` rule gave it (a JSON list); a team's and a key's own rules are JSON lists of
-- rules, NULL for none.
ALTER TABLE usage_records ADD COLUMN policy TEXT;
ALTER TABLE usage_records ADD COLUMN tags TEXT;
ALTER TABLE api_keys ADD COLUMN policies TEXT;
ALTER TABLE teams ADD COLUMN policies TEXT;
