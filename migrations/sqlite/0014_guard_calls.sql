-- Model guards (issue 32): a guard's own call to its classifier is a usage record of its own,
-- marked with the guard's name; NULL for every other request.
ALTER TABLE usage_records ADD COLUMN guard_call TEXT;
