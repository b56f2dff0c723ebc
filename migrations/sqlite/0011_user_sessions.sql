-- Console sign-in (issue 31): a user's sessions issued before `sessions_after` (unix milliseconds) are
-- void, so an administrator can end every session of a user on every instance at once.
ALTER TABLE users ADD COLUMN sessions_after INTEGER NOT NULL DEFAULT 0;
