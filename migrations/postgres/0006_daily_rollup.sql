-- Daily rollup beside the hourly one (day_ms = start of the UTC day, unix ms), written in the same
-- transaction with the same += upserts. A 30-day report then sums ~30 rows per group instead of ~720:
-- whole days come from here, the partial days at either end from usage_hourly. Back-filled from the
-- hourly rows already stored.
CREATE TABLE usage_daily (
    day_ms            BIGINT NOT NULL,
    key_id            TEXT NOT NULL DEFAULT '',
    user_name         TEXT NOT NULL DEFAULT '',
    team              TEXT NOT NULL DEFAULT '',
    model             TEXT NOT NULL,
    requests          BIGINT NOT NULL DEFAULT 0,
    prompt_tokens     BIGINT NOT NULL DEFAULT 0,
    completion_tokens BIGINT NOT NULL DEFAULT 0,
    total_tokens      BIGINT NOT NULL DEFAULT 0,
    cost_usd          DOUBLE PRECISION NOT NULL DEFAULT 0,
    PRIMARY KEY (day_ms, key_id, user_name, team, model)
);
INSERT INTO usage_daily (day_ms, key_id, user_name, team, model, requests, prompt_tokens, completion_tokens,
                         total_tokens, cost_usd)
SELECT (hour_ms / 86400000) * 86400000, key_id, user_name, team, model, SUM(requests), SUM(prompt_tokens),
       SUM(completion_tokens), SUM(total_tokens), SUM(cost_usd)
FROM usage_hourly
GROUP BY (hour_ms / 86400000) * 86400000, key_id, user_name, team, model;
