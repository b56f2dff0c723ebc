-- Per-(hour, model) totals over all keys, stored in usage_hourly under key_id = user_name = team = '*',
-- so reports without a key/user/team filter read ~1/500th of the rows. Back-fill from existing rollups.
INSERT INTO usage_hourly (hour_ms, key_id, user_name, team, model, requests, prompt_tokens, completion_tokens,
                          total_tokens, cost_usd)
SELECT hour_ms, '*', '*', '*', model, SUM(requests), SUM(prompt_tokens), SUM(completion_tokens), SUM(total_tokens),
       SUM(cost_usd)
FROM usage_hourly
WHERE key_id <> '*'
GROUP BY hour_ms, model;
