//! The router's unit tests: slots under a cap, which backends serve a model, breakers, discovery and prefix routing.

use super::*;
use std::collections::HashMap;

fn router(yaml: &str) -> Router {
    let cfg = Config::from_yaml(yaml, &HashMap::<String, String>::new()).unwrap();
    let r = Router::new(&cfg).unwrap();
    for b in &r.backends {
        b.health.set_up(true);
    }
    r
}

#[test]
fn concurrent_selections_never_take_more_slots_than_the_cap() {
    let r = Arc::new(router("backends:\n - {name: a, url: 'http://a:1', models: [x], max_concurrency: 2}"));
    let peak = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let (r, peak) = (r.clone(), peak.clone());
            std::thread::spawn(move || {
                for _ in 0..20_000 {
                    if let Ok(selected) = r.select_with("x", &RouteHints::default(), &[]) {
                        peak.fetch_max(selected.backend.in_flight(), Relaxed);
                        drop(selected);
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert!(peak.load(Relaxed) <= 2, "{} slots taken at once under a cap of 2", peak.load(Relaxed));
    assert_eq!(r.backends[0].in_flight(), 0, "every slot came back");
    assert_eq!(
        r.select_with("x", &RouteHints::default(), &[]).map(|s| s.backend.in_flight()).ok(),
        Some(1),
        "the slot is taken by the selection itself"
    );
}

#[test]
fn selects_only_backends_serving_the_model() {
    let r = router(
        "routing: {strategy: round-robin}\nbackends:\n - {name: a, url: 'http://a:1', models: [x]}\n - {name: b, url: 'http://b:1', models: [x, y]}",
    );
    for _ in 0..5 {
        assert_eq!(r.select("y", &[]).unwrap().name(), "b");
    }
    assert_eq!(r.select("z", &[]).err().unwrap(), SelectError::UnknownModel);
    assert_eq!(r.select("y", &[1]).err().unwrap(), SelectError::NoneAvailable);
    assert_eq!(r.select("x", &[0]).unwrap().name(), "b");
}

#[test]
fn skips_down_backends_and_lists_only_up_ones() {
    let r = router(
        "backends:\n - {name: a, url: 'http://a:1', models: [x]}\n - {name: b, url: 'http://b:1', models: [x, y]}",
    );
    r.backends[1].health.set_up(false);
    for _ in 0..5 {
        assert_eq!(r.select("x", &[]).unwrap().name(), "a");
    }
    assert_eq!(r.select("y", &[]).err().unwrap(), SelectError::NoneAvailable);
    let cat = r.catalogue();
    assert_eq!(cat.keys().collect::<Vec<_>>(), vec!["x"]);
}

#[test]
fn an_open_breaker_readmits_one_trial_after_its_cool_down_in_virtual_time() {
    let cfg = Config::from_yaml(
        "health: {failure_threshold: 2, breaker_cooldown: 30s}\nbackends:\n - {name: a, url: 'http://a:1', models: [x]}",
        &HashMap::<String, String>::new(),
    )
    .unwrap();
    let clock = Clock::manual(0);
    let r = Router::with_clock(&cfg, clock.clone()).unwrap();
    let a = &r.backends[0];
    a.health.set_up(true);
    assert!(!a.health.on_server_error(r.clock.mono_ms()));
    assert!(a.health.on_server_error(r.clock.mono_ms()), "the second 5xx in a row opens the breaker");
    assert_eq!(r.select("x", &[]).err(), Some(SelectError::NoneAvailable));
    clock.advance(std::time::Duration::from_millis(29_999));
    assert_eq!(r.select("x", &[]).err(), Some(SelectError::NoneAvailable), "still cooling down");
    clock.advance(std::time::Duration::from_millis(1));
    assert_eq!(r.select("x", &[]).unwrap().name(), "a", "one half-open trial");
    assert_eq!(r.select("x", &[]).err(), Some(SelectError::NoneAvailable), "only one trial at a time");
    a.health.on_success();
    assert_eq!(r.select("x", &[]).unwrap().name(), "a", "a successful trial closes the breaker");
}

#[test]
fn discovery_updates_the_table() {
    let r = router("backends:\n - {name: a, url: 'http://a:1'}");
    assert!(!r.knows_model("new"));
    assert!(r.backends[0].set_models(vec!["new".into(), "new".into()]));
    assert!(!r.backends[0].set_models(vec!["new".into()]));
    r.rebuild_table();
    assert!(r.knows_model("new"));
}

#[test]
fn a_prompt_routed_by_load_says_why_new_evicted_or_kept_despite_a_full_kv_cache() {
    let r = router(
        "routing: {strategy: cache-aware, sticky_sessions: false}\nbackends:\n - {name: a, url: 'http://a:1', models: [x]}\n - {name: b, url: 'http://b:1', models: [x]}",
    );
    let metric = |reason: &str| {
        let mut out = String::new();
        r.render_affinity(&mut out);
        let line = format!("switchyard_affinity_given_up_total{{reason=\"{reason}\"}} ");
        out.lines().find_map(|l| l.strip_prefix(line.as_str())).and_then(|n| n.parse::<u64>().ok())
    };
    let first: Vec<u8> = (0..640u32).map(|i| b'a' + (i * 7 % 26) as u8).collect();
    let mut second = first.clone();
    second.extend_from_slice(&[b'z'; 256]);
    let hints = |bytes: &[u8]| RouteHints { chain: prefix::chain(&[bytes]), ..RouteHints::default() };
    let home = r.select_with("x", &hints(&first), &[]).unwrap().backend;
    assert_eq!(metric("new"), Some(1), "nothing cached anywhere: a new conversation");
    // A backend reporting its KV cache full still holds its prefixes (it evicts the oldest,
    // which the index's own capacity models): the next turn stays.
    home.signals.record(signals::LoadReading { kv_usage: Some(1.0), ..Default::default() });
    let next = r.select_with("x", &hints(&second), &[]).unwrap();
    assert_eq!(next.backend.id, home.id, "{:?}", next.explain);
    assert_eq!((metric("new"), metric("evicted"), metric("load")), (Some(1), Some(0), Some(0)));
    drop(next);
    // Its cache forgotten (it restarted): the third turn is an evicted conversation, not a new one.
    r.forget_cache(&home);
    let mut third = second.clone();
    third.extend_from_slice(&[b'y'; 256]);
    let moved = r.select_with("x", &hints(&third), &[]).unwrap();
    let why = moved.explain.clone().unwrap_or_default();
    assert!(why.contains(&format!("{} ({})", home.name(), "evicted")), "{why}");
    assert_eq!((metric("new"), metric("evicted")), (Some(1), Some(1)));
}
