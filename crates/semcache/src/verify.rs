//! The checks a candidate question must pass besides similarity. Sentence embeddings place
//! "flights from Paris to Rome" and "from Rome to Paris", "with food" and "without food", "5
//! minutes" and "10 minutes" within a hair of each other, so a stored answer is served only when
//! the two questions also agree on what embeddings blur: negation, numbers, times, names, the
//! places of words after `from`/`to`/`than`, word pairs of opposite meaning, and every content
//! word one side has and the other lacks — each of those must mean the same as a word of the
//! other side (`terms_match`, judged with word embeddings by the caller).

use std::collections::BTreeSet;

use crate::text::{self, Word};

/// A check that refused a candidate, as `x-switchyard-cache` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Check {
    Negation,
    Numbers,
    Times,
    Entities,
    Order,
    Opposites,
    Terms,
    /// The verifying model (`verify.model`) said the two differ.
    Model,
}

impl Check {
    pub const ALL: [Check; 8] = [
        Check::Negation,
        Check::Numbers,
        Check::Times,
        Check::Entities,
        Check::Order,
        Check::Opposites,
        Check::Terms,
        Check::Model,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Check::Negation => "negation",
            Check::Numbers => "numbers",
            Check::Times => "times",
            Check::Entities => "entities",
            Check::Order => "order",
            Check::Opposites => "opposites",
            Check::Terms => "terms",
            Check::Model => "model",
        }
    }
}

/// What the lexical checks found.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Comparison {
    /// The first check that failed, if one did.
    pub failed: Option<Check>,
    /// Content words only the first question has, and only the second: each must mean the same
    /// as some content word of the other question, or matter little to its own question.
    pub only_a: Vec<String>,
    pub only_b: Vec<String>,
    pub content_a: Vec<String>,
    pub content_b: Vec<String>,
    words_a: Vec<Word>,
    words_b: Vec<Word>,
}

/// One of the two questions compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    A,
    B,
}

impl Comparison {
    /// Whether word embeddings are needed to finish (`terms_match`).
    pub fn needs_terms(&self) -> bool {
        self.failed.is_none() && !(self.only_a.is_empty() && self.only_b.is_empty())
    }

    /// Every content word whose embedding `terms_match` asks for, as a stem (what `similarity`
    /// is asked about) and as written (what is embedded: a stem such as `affordabl` is no word).
    pub fn term_words(&self) -> Vec<(String, String)> {
        let all: BTreeSet<&String> = self.content_a.iter().chain(&self.content_b).collect();
        all.into_iter()
            .map(|stem| {
                let written = self.words_a.iter().chain(&self.words_b).find(|w| &w.stem == stem);
                (stem.clone(), written.map_or_else(|| stem.clone(), |w| w.base.clone()))
            })
            .collect()
    }

    /// The words only one side has, with their side.
    pub fn unmatched(&self) -> impl Iterator<Item = (Side, &String)> {
        self.only_a.iter().map(|w| (Side::A, w)).chain(self.only_b.iter().map(|w| (Side::B, w)))
    }

    /// The question of `side` without `stem` (every word of that stem left out): how much the
    /// question's embedding moves without it tells how much it carries.
    pub fn without(&self, side: Side, stem: &str) -> String {
        let words = if side == Side::A { &self.words_a } else { &self.words_b };
        let mut out = String::new();
        let mut last_at = usize::MAX;
        for w in words.iter().filter(|w| w.stem != stem) {
            if w.at != last_at {
                if !out.is_empty() {
                    out.push(' ');
                }
                out.push_str(&w.raw);
                last_at = w.at;
            }
        }
        out
    }
}

/// Compare question `a` with question `b` (order does not matter).
pub fn compare(a: &str, b: &str) -> Comparison {
    let (wa, wb) = (text::words(a), text::words(b));
    let (ca, cb) = (content(&wa), content(&wb));
    let only_a: Vec<String> = unmatched(&wa, &ca, &cb);
    let only_b: Vec<String> = unmatched(&wb, &cb, &ca);
    let same_words = only_a.is_empty() && only_b.is_empty();
    let failed = [
        (Check::Negation, negations(&wa) != negations(&wb)),
        (Check::Numbers, numbers(&wa) != numbers(&wb)),
        (Check::Times, times_differ(&wa, &wb)),
        (Check::Entities, names_swapped(&wa, &wb)),
        (Check::Order, order_differs(&wa, &wb, same_words)),
        (Check::Opposites, opposites(&wa, &wb)),
    ]
    .into_iter()
    .find_map(|(check, failed)| failed.then_some(check));
    Comparison {
        failed,
        only_a,
        only_b,
        content_a: ca.into_iter().collect(),
        content_b: cb.into_iter().collect(),
        words_a: wa,
        words_b: wb,
    }
}

/// The last check, on the content words only one side has: each is close (`similarity` at
/// least `threshold`) to some content word of the other side, or — unless one word was simply
/// traded for another — carries little of its own question (`kept`: the question's similarity
/// to itself without the word, at least `salience`).
pub fn terms_match(
    comparison: &Comparison,
    threshold: f32,
    salience: f32,
    similarity: &impl Fn(&str, &str) -> Option<f32>,
    kept: &impl Fn(Side, &str) -> Option<f32>,
) -> bool {
    // One word traded for one other, all else equal (`new york city` / `new york state`): how
    // little either carries says nothing; only their meaning counts.
    let swap = comparison.only_a.len() == 1 && comparison.only_b.len() == 1;
    comparison.unmatched().all(|(side, word)| {
        let other = if side == Side::A { &comparison.content_b } else { &comparison.content_a };
        let partnered = other.iter().any(|o| o != word && similarity(word, o).is_some_and(|s| s >= threshold));
        partnered || (!swap && kept(side, word).is_some_and(|k| k >= salience))
    })
}

fn negations(words: &[Word]) -> usize {
    words.iter().filter(|w| text::NEGATIONS.contains(&w.base.as_str())).count()
}

fn numbers(words: &[Word]) -> Vec<String> {
    let mut n: Vec<String> = words.iter().filter_map(|w| text::number_value(&w.base)).collect();
    // Digits with a unit attached (`5kg`, `9am` is a time) count as their number.
    n.extend(words.iter().filter(|w| !text::is_time(&w.base)).filter_map(|w| leading_number(&w.base)));
    // `a pound` and `1 lb`, `one day` and `a day`: one is said without a number as often as with.
    n.retain(|v| v != "1");
    n
}

fn leading_number(stem: &str) -> Option<String> {
    let digits: String = stem.chars().take_while(|c| c.is_ascii_digit() || *c == '.').collect();
    (!digits.is_empty() && digits.len() < stem.len() && !text::is_number(stem)).then_some(digits)
}

/// Different points in time; or units of time, or relative times, where both questions have some.
fn times_differ(a: &[Word], b: &[Word]) -> bool {
    let set = |words: &[Word], of: &dyn Fn(&str) -> Option<String>| -> BTreeSet<String> {
        words.iter().filter_map(|w| of(&w.base)).collect()
    };
    let point = |s: &str| {
        let year = s.len() == 4 && s.chars().all(|c| c.is_ascii_digit());
        (text::is_time(s) || year).then(|| s.to_owned())
    };
    let unit = |s: &str| text::TIME_UNITS.contains(&s).then(|| text::time_unit(s).to_owned());
    let relative = |s: &str| text::RELATIVE_TIMES.iter().find(|(w, _)| *w == s).map(|(_, d)| (*d).to_owned());
    let both_and_differ = |x: BTreeSet<String>, y: BTreeSet<String>| !x.is_empty() && !y.is_empty() && x != y;
    // `this weekend` / `next weekend`: where both name a time, one pointing elsewhere differs.
    let timed = |w: &[Word]| !set(w, &point).is_empty() || !set(w, &unit).is_empty();
    let (ra, rb) = (set(a, &relative), set(b, &relative));
    let (ua, ub) = (set(a, &unit), set(b, &unit));
    set(a, &point) != set(b, &point)
        || (!ua.is_empty() && !ub.is_empty() && ua.is_disjoint(&ub))
        || (timed(a) && timed(b) && ra != rb)
        || both_and_differ(ra, rb)
}

/// A name: capitalised where a sentence does not start, or an acronym.
fn is_entity(word: &Word) -> bool {
    let mut chars = word.raw.chars();
    let first_upper = chars.next().is_some_and(char::is_uppercase);
    let letters: Vec<char> = word.raw.chars().filter(|c| c.is_alphabetic()).collect();
    let acronym = letters.len() >= 2 && letters.iter().all(|c| c.is_uppercase());
    word.raw != "I" && ((first_upper && !word.sentence_start) || acronym)
}

/// Each side names something the other does not (`Austria` / `Australia`); a name only one side
/// has is left to the terms check (`the FIFA World Cup` / `the world cup`). `Japan` meets
/// `Japanese`: one name may begin the other.
fn names_swapped(a: &[Word], b: &[Word]) -> bool {
    let missing = |of: &[Word], other: &[Word]| {
        of.iter().filter(|w| is_entity(w)).any(|e| {
            !other.iter().any(|o| {
                let (x, y) = (e.stem.as_str(), o.stem.as_str());
                x == y || (x.len().min(y.len()) >= 4 && (x.starts_with(y) || y.starts_with(x)))
            })
        })
    };
    missing(a, b) && missing(b, a)
}

/// A word that says what the question is about: a name, or a word that is neither filler,
/// number, time nor negation.
fn is_content(word: &Word) -> bool {
    let s = word.base.as_str();
    is_entity(word)
        || word.noun
        || (!text::is_filler(s)
            && text::number_value(s).is_none()
            && !text::is_any_time(s)
            && !text::NEGATIONS.contains(&s)
            && leading_number(s).is_none())
}

/// The content words (`is_content`).
fn content(words: &[Word]) -> BTreeSet<String> {
    words.iter().filter(|w| is_content(w)).map(|w| w.stem.clone()).collect()
}

/// The content words of one side the other lacks, written any way: `wi fi` meets `wifi`, and
/// a word of four letters or more meets a longer one it begins (`dict` / `dictionary`).
fn unmatched(words: &[Word], own: &BTreeSet<String>, other: &BTreeSet<String>) -> Vec<String> {
    let joined = |i: usize| -> [Option<String>; 2] {
        let at = |j: usize| words.get(j).map(|w| w.stem.as_str());
        [
            i.checked_sub(1).and_then(at).zip(at(i)).map(|(x, y)| format!("{x}{y}")),
            at(i).zip(at(i + 1)).map(|(x, y)| format!("{x}{y}")),
        ]
    };
    let begins = |x: &str, y: &str| x.len().min(y.len()) >= 4 && (x.starts_with(y) || y.starts_with(x));
    own.iter()
        .filter(|w| !other.contains(*w))
        .filter(|w| !other.iter().any(|o| begins(w, o)))
        .filter(|w| {
            let places = words.iter().enumerate().filter(|(_, x)| &x.stem == *w).map(|(i, _)| i);
            !places.into_iter().any(|i| joined(i).iter().flatten().any(|j| other.contains(j)))
        })
        .cloned()
        .collect()
}

/// The run of content words that follows `anchor` (its first occurrence), filler skipped
/// before it: `for baking powder` → `bak powder`.
fn after_anchor(words: &[Word], anchor: &str) -> Option<Vec<String>> {
    let at = words.iter().position(|w| w.base == anchor)?;
    let counts = |w: &Word| is_content(w) || text::number_value(&w.base).is_some();
    let start = at + 1 + words[at + 1..].iter().position(counts)?;
    let run: Vec<String> = words[start..].iter().take_while(|w| counts(w)).map(|w| w.stem.clone()).collect();
    Some(run)
}

/// Two questions with the same words in swapped places: what follows `from`, `than`… differs
/// while both have both words; `X to Y` against `Y to X`; or two runs of shared content words
/// trade places around a run that stays (`A causes B` / `B causes A`). Neighbours trading places
/// (`stop my cat` / `my cat to stop`) is how people reword, and passes.
fn order_differs(a: &[Word], b: &[Word], same_words: bool) -> bool {
    let holds = |words: &[Word], phrase: &[String]| phrase.iter().all(|p| words.iter().any(|w| &w.stem == p));
    for anchor in text::ANCHORS {
        if let (Some(x), Some(y)) = (after_anchor(a, anchor), after_anchor(b, anchor)) {
            if x != y && holds(a, &y) && holds(b, &x) {
                return true;
            }
        }
    }
    let (ta, tb) = (around_to(a), around_to(b));
    if ta.iter().any(|(x, y)| x != y && tb.contains(&(y.clone(), x.clone()))) {
        return true;
    }
    let (sa, sb) = (content(a), content(b));
    let shared: BTreeSet<&String> = sa.intersection(&sb).collect();
    let sequence = |words: &[Word]| {
        let mut seen = BTreeSet::new();
        words
            .iter()
            .map(|w| &w.stem)
            .filter(|s| shared.contains(s) && seen.insert(s.as_str()))
            .cloned()
            .collect::<Vec<String>>()
    };
    // Reworded questions reorder their clauses too: only questions of the same words are
    // judged by the order of those words.
    same_words && blocks_swapped(&sequence(a), &sequence(b))
}

/// Every `X to Y`: the content words on either side of a `to`.
fn around_to(words: &[Word]) -> Vec<(String, String)> {
    let mut pairs = Vec::new();
    for (at, _) in words.iter().enumerate().filter(|(_, w)| w.base == "to") {
        let before = words[..at].last().filter(|w| is_content(w));
        let after = words[at + 1..].iter().find(|w| is_content(w));
        if let (Some(before), Some(after)) = (before, after) {
            pairs.push((before.stem.clone(), after.stem.clone()));
        }
    }
    pairs
}

/// `b` is `a` with two runs swapped around a run between them that stays: `P X R Y S` / `P Y R X S`.
fn blocks_swapped(a: &[String], b: &[String]) -> bool {
    let n = a.len();
    if n != b.len() || !(3..=24).contains(&n) || a == b {
        return false;
    }
    for i in 0..n {
        for j in i + 1..n {
            for k in j + 1..n {
                for l in k + 1..=n {
                    let swapped = a[..i].iter().chain(&a[k..l]).chain(&a[j..k]).chain(&a[i..j]).chain(&a[l..]);
                    if swapped.eq(b.iter()) {
                        return true;
                    }
                }
            }
        }
    }
    false
}

/// One side has a word, the other its opposite (and not the word itself): a listed pair, or the
/// word with a negating prefix (`safe` / `unsafe`, `legal` / `illegal`).
fn opposites(a: &[Word], b: &[Word]) -> bool {
    let has = |words: &[Word], s: &str| words.iter().any(|w| w.base == s || w.stem == s || w.raw.to_lowercase() == s);
    let prefixed = |x: &[Word], y: &[Word]| {
        x.iter().any(|w| {
            let lower = w.raw.to_lowercase();
            ["un", "in", "im", "il", "ir", "dis", "non"].iter().any(|p| {
                lower
                    .strip_prefix(p)
                    .is_some_and(|rest| rest.len() >= 3 && has(y, rest) && !has(x, rest) && !has(y, &lower))
            })
        })
    };
    if prefixed(a, b) || prefixed(b, a) {
        return true;
    }
    text::OPPOSITES.iter().any(|(x, y)| {
        (has(a, x) && has(b, y) && !has(a, y) && !has(b, x)) || (has(a, y) && has(b, x) && !has(a, x) && !has(b, y))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed(a: &str, b: &str) -> Option<Check> {
        compare(a, b).failed
    }

    #[test]
    fn what_embeddings_blur_is_caught() {
        assert_eq!(
            failed("can I take ibuprofen with food", "can I take ibuprofen without food"),
            Some(Check::Negation)
        );
        assert_eq!(failed("Is it safe to swim?", "Is it not safe to swim?"), Some(Check::Negation));
        assert_eq!(failed("boil an egg for 5 minutes", "boil an egg for ten minutes"), Some(Check::Numbers));
        assert_eq!(failed("weather in Oslo tomorrow", "weather in Oslo today"), Some(Check::Times));
        assert_eq!(
            failed("What is the capital of Austria?", "What is the capital of Australia?"),
            Some(Check::Entities)
        );
        assert_eq!(failed("flights from Paris to Rome", "flights from Rome to Paris"), Some(Check::Order));
        assert_eq!(failed("flights from paris to rome", "flights from rome to paris"), Some(Check::Order));
        assert_eq!(failed("is python faster than java", "is java faster than python"), Some(Check::Order));
        assert_eq!(failed("how do I sell my car", "how do I buy a car"), Some(Check::Opposites));
        assert_eq!(failed("convert usd to eur", "convert eur to usd"), Some(Check::Order));
        assert_eq!(
            failed("Does high blood pressure cause kidney disease?", "Does kidney disease cause high blood pressure?"),
            Some(Check::Order)
        );
        assert_eq!(failed("weather this morning", "weather this evening"), Some(Check::Times));
        assert_eq!(failed("Will it snow this weekend?", "Will it snow next weekend?"), Some(Check::Times));
        assert_eq!(failed("Is it safe to drive?", "Is it unsafe to drive?"), Some(Check::Opposites));
        assert_eq!(failed("Can I substitute butter for oil?", "Can I substitute oil for butter?"), Some(Check::Order));
        assert_eq!(failed("Is Rust faster than Go?", "Is Go faster than Rust?"), Some(Check::Order));
        assert_eq!(failed("convert a list to a tuple", "convert a tuple to a list"), Some(Check::Order));
        assert_eq!(failed("Does a will override a trust?", "Does a trust override a will?"), Some(Check::Order));
        assert_eq!(
            failed("substitute baking soda for baking powder", "substitute baking powder for baking soda"),
            Some(Check::Order)
        );
        assert_eq!(
            failed("is the store open on christmas eve", "is the store open on christmas day"),
            Some(Check::Times)
        );
        assert_eq!(failed("What is 10 divided by 2?", "What is 2 divided by 10?"), Some(Check::Numbers));
        assert_eq!(failed("how much to save per week", "how much to save per month"), Some(Check::Times));
    }

    #[test]
    fn rewording_passes_the_lexical_checks() {
        for (a, b) in [
            ("How do I boil an egg?", "what's the way to boil eggs"),
            ("Can you tell me the capital of France?", "capital of france?"),
            ("Don't I need a visa for Japan?", "do I not need a visa for Japan"),
            ("boil an egg for 5 minutes", "boil an egg for five minutes"),
            (
                "How do I stop my cat from scratching the furniture?",
                "how can i get my cat to stop scratching the furniture",
            ),
            ("How long should I boil an egg?", "how many minutes to boil an egg"),
            ("Who won the 2018 FIFA World Cup?", "which country won the world cup in 2018"),
            ("How many ounces are in a pound?", "how many oz in 1 lb"),
            ("How much water should I drink per day?", "daily water intake"),
            ("Why do leaves change color in autumn?", "why do leaves turn colors in the fall"),
            ("How much sleep does a 2 year old need?", "How many hours should a two-year-old sleep"),
            ("How do I fix a running toilet?", "toilet keeps running, how to fix it"),
            ("Can I return an online order to the store?", "is it possible to return it to the store"),
        ] {
            let c = compare(a, b);
            assert_eq!(c.failed, None, "{a} / {b}");
        }
    }

    #[test]
    fn words_only_one_side_has_must_mean_the_same_as_one_of_the_other() {
        let c = compare("how do I cook rice", "how do I cook quinoa");
        assert_eq!((c.only_a.clone(), c.only_b.clone()), (vec!["rice".to_owned()], vec!["quinoa".to_owned()]));
        assert!(c.needs_terms());
        let sim = |x: &str, y: &str| {
            Some(if (x, y) == ("rice", "quinoa") || (x, y) == ("quinoa", "rice") { 0.6 } else { 0.1 })
        };
        let kept = |_: Side, _: &str| Some(0.5);
        assert!(!terms_match(&c, 0.75, 0.95, &sim, &kept));
        let c = compare("how do I purchase a car", "how do I buy a car");
        let sim =
            |x: &str, y: &str| Some(if [x, y].contains(&"purchas") && [x, y].contains(&"buy") { 0.8 } else { 0.1 });
        assert!(terms_match(&c, 0.75, 0.95, &sim, &kept));
        let c = compare("who played Jack in Titanic", "who was the actor that played Jack in Titanic");
        assert_eq!(c.only_b, ["actor"]);
        assert_eq!(c.without(Side::B, "actor"), "who was the that played Jack in Titanic");
        assert!(terms_match(&c, 0.75, 0.95, &sim, &|_, _| Some(0.98)), "a word that carries little");
        assert!(!compare("how to cook rice", "How to cook rice?").needs_terms());
    }
}
