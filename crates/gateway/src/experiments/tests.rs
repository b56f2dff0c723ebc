//! The live set's assignment rules, without a gateway.

use std::sync::Arc;

use switchyard_experiments::RawExperiment;

use super::{Experiments, Units};

fn experiment(yaml: &str) -> Arc<switchyard_experiments::Experiment> {
    let raw: RawExperiment = yaml_serde::from_str(yaml).expect("yaml");
    Arc::new(raw.check("e", &|_| true).expect("valid"))
}

fn units(id: &str) -> Units<'_> {
    Units { key: Some("k1"), user: None, session: None, request_id: id }
}

const ANY: &dyn Fn(&str) -> bool = &|_| true;

#[test]
fn ended_experiments_and_other_teams_assign_nothing() {
    let set = Experiments::default();
    set.configure(&[experiment("model: m\nuntil: 2020-01-01T00:00:00Z\nvariants: {a: {model: m1}}")]);
    assert!(set.assign(("m", "m"), None, &units("r"), ANY, 1_700_000_000_000).is_none());
    set.configure(&[experiment("model: m\nteam: red\nvariants: {a: {model: m1}}")]);
    assert!(set.assign(("m", "m"), Some("blue"), &units("r"), ANY, 0).is_none());
    assert_eq!(
        set.assign(("m", "m"), Some("red"), &units("r"), ANY, 0).map(|a| a.model().to_owned()),
        Some("m1".into())
    );
}

#[test]
fn a_variant_or_shadow_the_key_may_not_use_is_never_assigned() {
    let set = Experiments::default();
    set.configure(&[experiment("model: m\nunit: request\nvariants: {a: {model: m1}}\nshadow: {model: m3}")]);
    let no_m1 = |m: &str| m != "m1";
    assert!(set.assign(("m", "m"), None, &units("r"), &no_m1, 0).is_none());
    let no_m3 = |m: &str| m != "m3";
    let a = set.assign(("m", "m"), None, &units("r"), &no_m3, 0).expect("assigned");
    assert_eq!((a.variant_name(), a.shadow_model()), ("a", None));
    let a = set.assign(("m", "m"), None, &units("r2"), ANY, 0).expect("assigned");
    assert_eq!(a.shadow_model(), Some("m3"));
    assert_eq!(
        set.recent("r2").map(|r| (r.experiment, r.variant, r.key)),
        Some(("e".into(), "a".into(), Some("k1".into())))
    );
}

#[test]
fn a_stopped_variant_gets_nobody_and_a_winner_everybody() {
    let set = Experiments::default();
    set.configure(&[experiment("model: m\nunit: request\nvariants: {a: {model: m1}, b: {model: m2}}")]);
    let live = set.get("e").expect("live");
    live.update(|s| s.stopped[1] = Some("error rate".into()));
    for i in 0..200 {
        assert_eq!(set.assign(("m", "m"), None, &units(&i.to_string()), ANY, 0).map(|a| a.variant), Some(0));
    }
    live.update(|s| {
        s.stopped[1] = None;
        s.winner = Some(1);
    });
    for i in 0..200 {
        assert_eq!(set.assign(("m", "m"), None, &units(&i.to_string()), ANY, 0).map(|a| a.variant), Some(1));
    }
}

#[test]
fn state_outlives_a_reload_that_keeps_the_spec() {
    let set = Experiments::default();
    let spec = experiment("model: m\nvariants: {a: {model: m1}, b: {model: m2}}");
    set.configure(std::slice::from_ref(&spec));
    set.get("e").expect("live").update(|s| s.winner = Some(1));
    set.configure(&[spec]);
    assert_eq!(set.get("e").map(|l| l.state().winner), Some(Some(1)));
    set.configure(&[experiment("model: m\nvariants: {a: {model: m1}, b: {model: m3}}")]);
    assert_eq!(set.get("e").map(|l| l.state().winner), Some(None), "a changed spec starts afresh");
}
