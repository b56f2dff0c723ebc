//! The engine's interface: what each kind finds and leaves, how guards combine, what masking and
//! building return.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::borrow::Cow;

use switchyard_guardrails::{BuildError, DetectorSpec, Engine, GuardSet, GuardSpec, Kind};

fn builtins() -> Engine {
    Engine::new(&[GuardSpec::pii("pii"), GuardSpec::secrets("secrets")]).unwrap()
}

/// The one finding in `text`: its kind and text.
fn only(engine: &Engine, text: &str) -> (Kind, String) {
    let findings = engine.scan(text);
    assert_eq!(findings.len(), 1, "{text:?}: {:?}", engine.mask(text).text);
    (findings[0].kind, text[findings[0].start..findings[0].end].to_owned())
}

#[test]
fn each_kind_is_found_in_its_forms() {
    let engine = builtins();
    let cases = [
        (Kind::Email, "mail JANE.Doe+x@Mail.Example.co.uk, please", "JANE.Doe+x@Mail.Example.co.uk"),
        (Kind::Phone, "call +1 (415) 555-2671 now", "+1 (415) 555-2671"),
        (Kind::Phone, "call 1-800-555-0199 now", "1-800-555-0199"),
        (Kind::Phone, "ring 030/12345678 later", "030/12345678"),
        (Kind::Card, "card 6011-1111-1111-1117 ok", "6011-1111-1111-1117"),
        (Kind::Card, "card 4111 1111 1111 1111 2024", "4111 1111 1111 1111"),
        (Kind::Iban, "to GB29 NWBK 6016 1331 9268 19 EUR", "GB29 NWBK 6016 1331 9268 19"),
        (Kind::Ssn, "ssn: 123 45 6789.", "123 45 6789"),
        (Kind::Ipv4, "from 203.0.113.45:8080", "203.0.113.45"),
        (Kind::Ipv6, "from [2001:db8::ff00:42:8329]:443", "2001:db8::ff00:42:8329"),
        (Kind::GoogleApiKey, "key=AIzaSyD-1234567890abcdefghijklmnopqrstu", "AIzaSyD-1234567890abcdefghijklmnopqrstu"),
        (
            Kind::OpenaiKey,
            "api_key=sk-proj-T3BlbkFJx9Qm2LwZrV7aPnK4sDfGhJ8e",
            "sk-proj-T3BlbkFJx9Qm2LwZrV7aPnK4sDfGhJ8e",
        ),
        (Kind::Password, "\"client_secret\": \"Zq8#Lm2@Wx5!kP\"", "Zq8#Lm2@Wx5!kP"),
    ];
    for (kind, text, found) in cases {
        assert_eq!(only(&engine, text), (kind, found.to_owned()), "{text}");
    }
}

#[test]
fn look_alikes_are_left_alone() {
    let engine = builtins();
    for text in [
        "card 4111 1111 1111 1112 fails Luhn",
        "order 1234567812345678 from a prefix no network issues",
        "Running version 10.2.3.4 of the agent",
        "id 550e8400-e29b-41d4-a716-446655440000",
        "at 2024-01-15T10:30:00Z, epoch 1705314600123",
        "ISBN 978-3-16-148410-0",
        "md5 d41d8cd98f00b204e9800998ecf8427e",
        "icon@2x.png and @types/node and pkg@1.2.3",
        "use sk-learn-and-numpy-2024 here",
        "std::vector and Foo::bar, 12:30:45, MAC 00:1A:2B:3C:4D:5E",
        "password: changeme and password=${DB_PASSWORD} and password=os.environ['X']",
        "SSN 000-12-3456 and 666-12-3456",
        "dates 01/02/2023 and 01.02.2023",
    ] {
        assert!(engine.scan(text).is_empty(), "{text:?}: {:?}", engine.mask(text).text);
    }
}

#[test]
fn a_kind_asked_for_by_two_guards_names_both() {
    let specs = [GuardSpec::pii("pii"), GuardSpec::new("audit").kinds([Kind::Email]), GuardSpec::secrets("secrets")];
    let engine = Engine::new(&specs).unwrap();
    let findings = engine.scan("a@b.io and AKIAIOSFODNN7EXAMPLE");
    let guards: Vec<Vec<&str>> =
        findings.iter().map(|finding| finding.guards.iter().map(|guard| engine.guard_name(guard)).collect()).collect();
    assert_eq!(guards, [vec!["pii", "audit"], vec!["secrets"]]);
    assert_eq!(engine.detector_name(findings[1].detector), "aws_access_key");
}

#[test]
fn mask_for_replaces_only_the_given_guards_findings_and_reports_all() {
    let engine = Engine::new(&[GuardSpec::pii("pii"), GuardSpec::new("log").keywords(["nightingale"])]).unwrap();
    let text = "nightingale: a@b.io";
    let only_keywords = engine.mask_for(text, GuardSet::from_bits(0b10));
    assert_eq!(only_keywords.text, "[KEYWORD]: a@b.io");
    assert_eq!(only_keywords.findings.len(), 2);
    assert!(matches!(engine.mask_for(text, GuardSet::default()).text, Cow::Borrowed(_)));
    assert_eq!(engine.mask(text).text, "[KEYWORD]: [EMAIL]");
}

#[test]
fn a_narrowed_guard_finds_only_its_kinds() {
    let engine = Engine::new(&[GuardSpec::new("cards").kinds([Kind::Card])]).unwrap();
    let masked = engine.mask("a@b.io paid with 4111111111111111");
    assert_eq!(masked.text, "a@b.io paid with [CARD]");
    assert!(engine.max_hold() < 64, "{}", engine.max_hold());
}

#[test]
fn keywords_are_whole_words_in_any_case_and_patterns_have_their_own_placeholder() {
    let spec =
        GuardSpec::new("blocker").keywords(["project-nightingale", "Zürich"]).pattern("employee-id", r"\bEMP-\d{6}\b");
    let engine = Engine::new(&[spec]).unwrap();
    let masked = engine.mask("PROJECT-NIGHTINGALE, project-nightingales, zürich, EMP-123456, EMP-1234567");
    assert_eq!(masked.text, "[KEYWORD], project-nightingales, [KEYWORD], [EMPLOYEE_ID], EMP-1234567");
    assert_eq!(masked.findings[0].kind, Kind::Keyword);
    assert_eq!(masked.findings[2].kind, Kind::Pattern);
    assert_eq!(engine.detector_name(masked.findings[2].detector), "employee-id");
}

#[test]
fn clean_text_is_borrowed_and_find_stops_at_the_first() {
    let engine = builtins();
    let clean = engine.mask("nothing to see here");
    assert!(matches!(clean.text, Cow::Borrowed(_)) && clean.findings.is_empty());
    let first = engine.find("x a@b.io 4111111111111111").unwrap();
    assert_eq!((first.kind, first.start), (Kind::Email, 2));
    assert!(Engine::new(&[]).unwrap().scan("a@b.io").is_empty());
}

#[test]
fn findings_are_ordered_and_never_overlap() {
    let engine = builtins();
    let text = "token=eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJlX2hlcmU and a@b.io,4111111111111111;10.0.0.1";
    let findings = engine.scan(text);
    let kinds: Vec<Kind> = findings.iter().map(|finding| finding.kind).collect();
    assert_eq!(kinds, [Kind::Jwt, Kind::Email, Kind::Card, Kind::Ipv4]);
    assert!(findings.windows(2).all(|pair| pair[0].end <= pair[1].start));
}

#[test]
fn bad_specs_are_refused_with_the_guard_named() {
    assert_eq!("nope".parse::<Kind>(), Err(BuildError::UnknownKind("nope".into())));
    let refused = |spec: GuardSpec| Engine::new(&[spec]).unwrap_err();
    assert!(matches!(refused(GuardSpec::new("g").kinds([Kind::Keyword])), BuildError::NotBuiltin { .. }));
    assert!(matches!(refused(GuardSpec::new("g").keywords([" "])), BuildError::EmptyKeyword { .. }));
    assert!(matches!(refused(GuardSpec::new("g").pattern("p", "(")), BuildError::InvalidPattern { .. }));
    assert!(matches!(refused(GuardSpec::new("g").pattern("p", "x?")), BuildError::EmptyMatch { .. }));
    let too_long = refused(GuardSpec::new("g").pattern("p", r"(\w+\s+){20}"));
    assert!(too_long.to_string().contains("bound its repetitions"), "{too_long}");
    let many: Vec<GuardSpec> = (0..65).map(|index| GuardSpec::pii(format!("g{index}"))).collect();
    assert_eq!(Engine::new(&many).unwrap_err(), BuildError::TooManyGuards { max: 64 });
    let spec = GuardSpec::new("g").pattern("p", "x+");
    assert_eq!(spec.detectors(), [DetectorSpec::Pattern { name: "p".into(), regex: "x+".into() }]);
}

#[test]
fn the_engine_is_shared_across_threads() {
    fn shared<T: Send + Sync>() {}
    shared::<Engine>();
    let engine = std::sync::Arc::new(builtins());
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let engine = engine.clone();
            std::thread::spawn(move || engine.scan("a@b.io").len())
        })
        .collect();
    assert!(workers.into_iter().all(|worker| worker.join().unwrap() == 1));
}
