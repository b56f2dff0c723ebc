//! The shared limiter's Lua scripts (`limit/shared.rs` runs them): each runs atomically in
//! Redis, on Redis's clock, so every instance of a fleet sees one window per key.

/// Check every limit of the request and take what it needs, or take nothing.
/// KEYS: the window hash, the holders set. ARGV: rpm, tpm, max_parallel (0: none), the token
/// estimate, the holder's name, its TTL in ms, the lease wanted (requests and tokens per second,
/// 0: none), the live instances, and an expired lease's unused units to give back first (its
/// second, '' for none; requests; tokens) — in the same script, so they are never seen free and
/// then taken by someone else before this request; then the parallel slots wanted beside the
/// request's own, their names' prefix and first number. Returns {admitted, refused-by
/// (1 parallel, 2 requests, 3 tokens), retry-after ms, requests in window, tokens in window (both
/// without the lease), ms until the oldest admission leaves the window, the second charged,
/// requests and tokens leased, ms into the second, slots pooled}.
///
/// The window hash keeps running sums beside its per-second fields — `R`, `T`, the latest second
/// seen `h` and the oldest second still holding an admission `f` — so a request reads four
/// fields and touches each second at most twice in its life (expired once, stepped over once),
/// whatever the window holds: O(1) per request, not a scan of 122 fields.
pub const ACQUIRE: &str = r"
local t = redis.call('TIME')
local now_s = tonumber(t[1])
local now_ms = now_s * 1000 + math.floor(tonumber(t[2]) / 1000)
local rpm, tpm, par, est = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local oldest = now_s - 60
local W = KEYS[1]
if ARGV[10] ~= '' then
  for _, back in ipairs({{'r', 'R', tonumber(ARGV[11])}, {'t', 'T', tonumber(ARGV[12])}}) do
    local field = back[1] .. ARGV[10]
    local cur = tonumber(redis.call('HGET', W, field))
    if cur and back[3] > 0 then
      local v = math.max(0, cur - back[3])
      redis.call('HSET', W, field, v)
      redis.call('HINCRBY', W, back[2], v - cur)
    end
  end
end
local R, T, first = 0, 0, nil
if rpm > 0 or tpm > 0 then
  local v = redis.call('HMGET', W, 'h', 'R', 'T', 'f')
  local head = tonumber(v[1]) or now_s
  R, T, first = tonumber(v[2]) or 0, tonumber(v[3]) or 0, tonumber(v[4])
  if first and first < oldest then
    for s = first, math.min(head, oldest - 1) do
      local x = redis.call('HMGET', W, 'r' .. s, 't' .. s)
      if x[1] or x[2] then
        R = R - (tonumber(x[1]) or 0)
        T = T - (tonumber(x[2]) or 0)
        redis.call('HDEL', W, 'r' .. s, 't' .. s)
      end
    end
    first = nil
    for s = oldest, head do
      local x = redis.call('HMGET', W, 'r' .. s, 't' .. s)
      if x[1] or x[2] then
        first = s
        break
      end
    end
    if first == nil then R, T = 0, 0 end
  end
end
local function reset()
  if first then return (first + 61) * 1000 - now_ms end
  return 0
end
local function wait(field, sum, limit, need)
  local freed = limit - sum
  if first then
    for s = first, now_s do
      freed = freed + (tonumber(redis.call('HGET', W, field .. s)) or 0)
      if freed >= need then return (s + 61) * 1000 - now_ms end
    end
  end
  return 61000
end
if par > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now_ms)
  if redis.call('ZCARD', KEYS[2]) >= par then
    return {0, 1, 1000, R, T, reset(), now_s, 0, 0, 0, 0}
  end
end
if rpm > 0 and R >= rpm then
  return {0, 2, wait('r', R, rpm, 1), R, T, reset(), now_s, 0, 0, 0, 0}
end
if tpm > 0 and T + est > tpm then
  return {0, 3, math.max(1, wait('t', T, tpm, est)), R, T, reset(), now_s, 0, 0, 0, 0}
end
-- A lease: what the asker will use until this second ends, and at most its share (1 / 2 x live)
-- of what is left of the first quarter of the window's quota: leases take none of the rest, so a
-- burst that spends it finds few units, if any, stranded in another instance's lease.
local into = now_ms - now_s * 1000
local left, live = 1000 - into, 2 * tonumber(ARGV[9])
local xr, xt = 0, 0
if rpm > 0 then
  xr = math.min(math.floor(tonumber(ARGV[7]) * left / 1000), math.floor((math.floor(rpm / 4) - R - 1) / live))
end
if tpm > 0 then
  xt = math.min(math.floor(tonumber(ARGV[8]) * left / 1000), math.floor((math.floor(tpm / 4) - T - est) / live))
end
if (rpm > 0 and xr <= 0) or (tpm > 0 and xt <= 0) then xr, xt = 0, 0 end
if rpm > 0 or tpm > 0 then
  if rpm > 0 then
    redis.call('HINCRBY', W, 'r' .. now_s, 1 + xr)
    R = R + 1 + xr
  end
  if tpm > 0 then
    redis.call('HINCRBY', W, 't' .. now_s, est + xt)
    T = T + est + xt
  end
  if first == nil then first = now_s end
  redis.call('HSET', W, 'h', now_s, 'R', R, 'T', T, 'f', first)
  redis.call('PEXPIRE', W, 62000)
end
local xs = 0
if par > 0 then
  local until_ms = now_ms + tonumber(ARGV[6])
  redis.call('ZADD', KEYS[2], until_ms, ARGV[5])
  -- Pooled slots: at most the asker's share of what is left of the first quarter of
  -- max_parallel (a burst towards the limit then finds few, if any, idle in another pool).
  if tonumber(ARGV[13]) > 0 then
    local room = math.floor(par / 4) - redis.call('ZCARD', KEYS[2])
    xs = math.max(0, math.min(tonumber(ARGV[13]), math.floor(room / live)))
    for i = 0, xs - 1 do
      redis.call('ZADD', KEYS[2], until_ms, ARGV[14] .. (tonumber(ARGV[15]) + i))
    end
  end
  redis.call('PEXPIRE', KEYS[2], tonumber(ARGV[6]) * 2)
end
return {1, 0, 0, R - xr, T - xt, reset(), now_s, xr, xt, into, xs}
";

/// Correct what a second of the window holds (a token reservation settled to the real count,
/// a lease's unused units given back), keeping the running sums right, if that second is still
/// in the window; and give back a parallel slot. ARGV: the second ('' for none), the change of
/// requests, the change of tokens, the holder ('' for none).
pub const FINISH: &str = r"
local function adjust(field, sum, by)
  if by == 0 then return end
  local cur = tonumber(redis.call('HGET', KEYS[1], field))
  if cur then
    local v = math.max(0, cur + by)
    redis.call('HSET', KEYS[1], field, v)
    redis.call('HINCRBY', KEYS[1], sum, v - cur)
  end
end
if ARGV[1] ~= '' then
  adjust('r' .. ARGV[1], 'R', tonumber(ARGV[2]))
  adjust('t' .. ARGV[1], 'T', tonumber(ARGV[3]))
end
if ARGV[4] ~= '' then redis.call('ZREM', KEYS[2], ARGV[4]) end
return 1
";

/// Charge tokens used after admission (a realtime session's responses as they complete) to the
/// current second of a window, on Redis's clock, keeping its running sum and marks right.
/// KEYS: the window hash. ARGV: the tokens.
pub const CHARGE: &str = r"
local by = tonumber(ARGV[1])
if by <= 0 then return 0 end
local t = redis.call('TIME')
local now_s = tonumber(t[1])
local W = KEYS[1]
local v = redis.call('HMGET', W, 'h', 'f')
local head = math.max(tonumber(v[1]) or now_s, now_s)
local first = tonumber(v[2]) or now_s
redis.call('HINCRBY', W, 't' .. now_s, by)
redis.call('HINCRBY', W, 'T', by)
redis.call('HSET', W, 'h', head, 'f', first)
redis.call('PEXPIRE', W, 62000)
return 1
";

/// Push back the expiry of this instance's holders. KEYS: holder sets; ARGV: TTL, then one
/// holder per key. Returns, per holder, 1 if it was still there (0: it ended, or expired while
/// Redis was out of reach for longer than its TTL).
pub const REFRESH: &str = r"
local t = redis.call('TIME')
local until_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[1])
local kept = {}
for i = 1, #KEYS do
  kept[i] = redis.call('ZADD', KEYS[i], 'XX', 'CH', until_ms, ARGV[i + 1])
end
return kept
";
