//! Key pools across a fleet: every instance counts each pool key's requests and tokens this
//! minute in Redis, and sees the rest or refusal another instance met, so the fleet together
//! keeps each key under its `rpm`/`tpm` and never sends with a key the provider just limited.
//! A request's choice is one script (the key with the most headroom, its request counted) — one
//! round trip, made only for backends with a pool; what is learnt after the answer (a rest, a
//! refusal, the tokens spent) is written in the background, never waited on. Records are
//! `switchyard:keypool:<backend>:<key name>:{r,t}:<minute>` (requests, tokens), `:rest` (until
//! when, Unix ms) and `:off` (refused; for five minutes, so a key fixed at the provider comes
//! back without a restart). Without an answer from Redis the instance chooses on its own view.

use std::sync::{Arc, LazyLock};

use redis::Script;

use super::{Shared, PREFIX};
use switchyard_keypool::KeyPool;

const MINUTE_MS: u64 = 60_000;
/// Counters outlive their minute by one, for a choice made at its edge.
const COUNTER_TTL_MS: u64 = 2 * MINUTE_MS;
const REFUSED_TTL_SECS: u64 = 300;

/// KEYS: per key, its `off`, `rest`, requests and tokens records. ARGV: now (Unix ms), then per
/// key its rpm, its tpm (0: none) and whether to skip it (1: already tried). Returns the index
/// of the key with the most headroom (its request counted), or -1.
static CHOOSE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
        local now, best, most = tonumber(ARGV[1]), -1, 0
        for i = 0, #KEYS / 4 - 1 do
          local off, rest, r, t = KEYS[4 * i + 1], KEYS[4 * i + 2], KEYS[4 * i + 3], KEYS[4 * i + 4]
          local rpm, tpm = tonumber(ARGV[3 * i + 2]), tonumber(ARGV[3 * i + 3])
          if ARGV[3 * i + 4] == '0' and redis.call('EXISTS', off) == 0
             and tonumber(redis.call('GET', rest) or '0') <= now then
            local left = 1
            if rpm > 0 then left = math.min(left, (rpm - tonumber(redis.call('GET', r) or '0')) / rpm) end
            if tpm > 0 then left = math.min(left, (tpm - tonumber(redis.call('GET', t) or '0')) / tpm) end
            if left > most then best, most = i, left end
          end
        end
        if best >= 0 then
          redis.call('INCR', KEYS[4 * best + 3])
          redis.call('PEXPIRE', KEYS[4 * best + 3], ARGV[#ARGV])
        end
        return best
        ",
    )
});

fn record(backend: &str, key: &str, what: &str) -> String {
    format!("{PREFIX}keypool:{backend}:{key}:{what}")
}

/// The fleet's choice of a key of `backend`'s pool, not among `tried`, its request counted
/// there and here: `Some(None)` when no key has headroom, `None` when Redis did not answer.
pub async fn choose(
    shared: &Shared,
    backend: &str,
    pool: &KeyPool,
    tried: &[usize],
    now_ms: u64,
) -> Option<Option<usize>> {
    let minute = now_ms / MINUTE_MS;
    let chosen = shared
        .call(|mut c| {
            let mut call = CHOOSE.prepare_invoke();
            call.arg(now_ms);
            for k in 0..pool.len() {
                let spec = pool.spec(k);
                let name = spec.name.as_str();
                call.key(record(backend, name, "off"))
                    .key(record(backend, name, "rest"))
                    .key(record(backend, name, &format!("r:{minute}")))
                    .key(record(backend, name, &format!("t:{minute}")));
                call.arg(spec.rpm.unwrap_or(0)).arg(spec.tpm.unwrap_or(0)).arg(u8::from(tried.contains(&k)));
            }
            call.arg(COUNTER_TTL_MS);
            async move { call.invoke_async::<i64>(&mut c).await }
        })
        .await
        .ok()?;
    let chosen = usize::try_from(chosen).ok();
    if let Some(k) = chosen {
        pool.count_request(k, now_ms);
    }
    Some(chosen)
}

/// The provider rate-limited `key` until `until_ms`: the fleet rests it too.
pub fn rest(shared: Arc<Shared>, backend: &str, key: &str, until_ms: u64, now_ms: u64) {
    let (rest, ttl) = (record(backend, key, "rest"), until_ms.saturating_sub(now_ms).max(1));
    tokio::spawn(async move {
        let _ =
            shared
                .call(|mut c| {
                    let rest = rest.clone();
                    async move {
                        redis::cmd("SET").arg(rest).arg(until_ms).arg("PX").arg(ttl).query_async::<()>(&mut c).await
                    }
                })
                .await;
    });
}

/// The provider refused `key` (401): the fleet stops using it.
pub fn refuse(shared: Arc<Shared>, backend: &str, key: &str) {
    let off = record(backend, key, "off");
    tokio::spawn(async move {
        let _ = shared
            .call(|mut c| {
                let off = off.clone();
                async move {
                    redis::cmd("SET").arg(off).arg(1).arg("EX").arg(REFUSED_TTL_SECS).query_async::<()>(&mut c).await
                }
            })
            .await;
    });
}

/// `key` spent `tokens` this minute, counted against its `tpm` fleet-wide.
pub fn spent(shared: Arc<Shared>, backend: &str, key: &str, tokens: u64, now_ms: u64) {
    let counter = record(backend, key, &format!("t:{}", now_ms / MINUTE_MS));
    tokio::spawn(async move {
        let _ = shared
            .call(|mut c| {
                let counter = counter.clone();
                async move {
                    redis::pipe()
                        .atomic()
                        .cmd("INCRBY")
                        .arg(&counter)
                        .arg(tokens)
                        .ignore()
                        .cmd("PEXPIRE")
                        .arg(&counter)
                        .arg(COUNTER_TTL_MS)
                        .ignore()
                        .query_async::<()>(&mut c)
                        .await
                }
            })
            .await;
    });
}
