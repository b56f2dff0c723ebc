//! Words of a question as the checks compare them: tokens with their case kept (names), a light
//! stem (plurals, `-ing`, `-ed`, possessives), contractions opened (`don't` → `do not`), and the
//! closed word lists the checks read (negations, number words, times, function words).

/// One word of a question.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Word {
    /// As written, for telling names (capitalised mid-sentence) apart.
    pub raw: String,
    /// Lower case, contractions opened, plural and `-ing`/`-ed` taken off: what the word lists
    /// (filler, negations, numbers, times) are read with.
    pub base: String,
    /// `base` with derivations taken off too: what two questions are compared on.
    pub stem: String,
    /// Its place in the question (contractions open into two words at one place).
    pub at: usize,
    /// The first word of a sentence (its capital says nothing).
    pub sentence_start: bool,
    /// A modal verb's word used as a noun (`a will`).
    pub noun: bool,
}

/// Words before a noun.
const ARTICLES: &[&str] =
    &["a", "an", "the", "my", "your", "his", "her", "their", "our", "this", "that", "last", "next", "in"];
/// Modal verbs that are also nouns.
const MODALS: &[&str] = &["will", "can", "must", "may"];

/// The words of `text`, in order.
pub fn words(text: &str) -> Vec<Word> {
    // `gluten-free` is `without gluten`: the same negation as the words.
    let text = text.replace("-free", " without").replace("-Free", " without");
    let mut out = Vec::new();
    let mut sentence_start = true;
    for (at, token) in tokens(&text).into_iter().enumerate() {
        let ends_sentence = token.ends_with(['.', '?', '!', ':', ';']) && !is_number(&token);
        let token = token.trim_end_matches(['.', '?', '!', ':', ';', ',']).to_owned();
        if token.is_empty() {
            sentence_start = true;
            continue;
        }
        let lower = token.to_lowercase().replace('’', "'");
        let after_article = out.last().is_some_and(|w: &Word| ARTICLES.contains(&w.base.as_str()));
        for part in open_contraction(&lower) {
            let (mut base, mut stem) = (base(&part), stem(&part));
            // `the fall` is autumn; `a will`, `a can` are things, not modal verbs.
            if after_article && part == "fall" {
                (base, stem) = ("autumn".to_owned(), "autumn".to_owned());
            }
            let noun = after_article && MODALS.contains(&part.as_str());
            out.push(Word { raw: token.clone(), base, stem, at, sentence_start, noun });
        }
        sentence_start = ends_sentence;
    }
    out
}

/// Split on whitespace and on punctuation that is not part of a word or a number (`2.5`,
/// `1,000`, `don't` and `9am` stay whole; a hyphen splits `gluten-free`).
fn tokens(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut current = String::new();
    for (i, &c) in chars.iter().enumerate() {
        let prev_digit = i > 0 && chars[i - 1].is_ascii_digit();
        let next_digit = chars.get(i + 1).is_some_and(char::is_ascii_digit);
        let next_alpha = chars.get(i + 1).is_some_and(|c| c.is_alphanumeric());
        let keep = c.is_alphanumeric()
            || ((c == '.' || c == ',') && prev_digit && next_digit)
            || ((c == '\'' || c == '’') && !current.is_empty() && next_alpha);
        if keep {
            current.push(c);
            continue;
        }
        if matches!(c, '.' | '?' | '!' | ':' | ';') && !current.is_empty() {
            current.push(c);
        }
        if !current.is_empty() {
            out.push(std::mem::take(&mut current));
        } else if matches!(c, '.' | '?' | '!') {
            // A sentence end after a space or another mark still starts a new sentence.
            out.push(c.to_string());
        }
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

/// `don't` → `do`, `not`; `it's` → `it`; `we'll` → `we`.
fn open_contraction(lower: &str) -> Vec<String> {
    let irregular = [("can't", "can"), ("cannot", "can"), ("won't", "will"), ("shan't", "shall"), ("ain't", "is")];
    if let Some((_, base)) = irregular.iter().find(|(c, _)| *c == lower) {
        return vec![(*base).to_owned(), "not".to_owned()];
    }
    if let Some(base) = lower.strip_suffix("n't") {
        return vec![base.to_owned(), "not".to_owned()];
    }
    for suffix in ["'s", "'re", "'ve", "'ll", "'d", "'m"] {
        if let Some(base) = lower.strip_suffix(suffix) {
            return vec![base.to_owned()];
        }
    }
    vec![lower.trim_end_matches('\'').to_owned()]
}

/// A light stem: enough that `eggs`/`egg`, `cooking`/`cook`, `boiled`/`boil` and
/// `cities`/`city` meet, never so much that two different words do often.
/// `word` without plural, `-ing` or `-ed`.
pub fn base(word: &str) -> String {
    if is_number(word) || word.chars().count() <= 3 || KEPT_WHOLE.contains(&word) || is_any_time(word) {
        return word.to_owned();
    }
    inflection(word)
}

pub fn stem(word: &str) -> String {
    if is_number(word) || word.chars().count() <= 3 || KEPT_WHOLE.contains(&word) || is_any_time(word) {
        return word.to_owned();
    }
    let inflected = inflection(word);
    // Derivations (`treatment`, `inventor`, `frequently`, `calculation`) and a final `e`
    // (`sneeze` / `sneezing`, `charge` / `charging`) meet their base.
    let mut base = inflected.as_str();
    for (suffix, min) in [("ation", 8), ("ment", 7), ("ness", 7), ("ly", 6), ("or", 7), ("er", 7), ("ate", 7)] {
        if base.len() >= min {
            if let Some(b) = base.strip_suffix(suffix) {
                base = b;
                break;
            }
        }
    }
    let base = if base.len() > 4 { base.strip_suffix('e').unwrap_or(base) } else { base };
    base.to_owned()
}

/// Plurals, `-ing` and `-ed`.
fn inflection(w: &str) -> String {
    if let Some(base) = w.strip_suffix("ies").filter(|b| b.len() >= 2) {
        return format!("{base}y");
    }
    for suffix in ["sses", "shes", "ches", "xes"] {
        if let Some(base) = w.strip_suffix(suffix) {
            return format!("{base}{}", &suffix[..suffix.len() - 2]);
        }
    }
    if let Some(base) = w.strip_suffix("ing").filter(|b| b.len() >= 3) {
        return undouble(base);
    }
    if let Some(base) = w.strip_suffix("ed").filter(|b| b.len() >= 3) {
        return undouble(base);
    }
    if w.ends_with('s') && !w.ends_with("ss") && !w.ends_with("us") && !w.ends_with("is") {
        return w[..w.len() - 1].to_owned();
    }
    w.to_owned()
}

/// Words a suffix rule would break: nouns ending in `-ing`, `-ed`, `-s`.
const KEPT_WHOLE: &[&str] = &[
    "thing",
    "string",
    "king",
    "ring",
    "wing",
    "sing",
    "bring",
    "spring",
    "during",
    "nothing",
    "something",
    "anything",
    "everything",
    "ceiling",
    "pudding",
    "wedding",
    "speed",
    "need",
    "feed",
    "seed",
    "breed",
    "news",
    "series",
    "species",
    "bus",
    "gas",
    "lens",
    "diabetes",
    "physics",
    "economics",
    "mathematics",
    "always",
];

/// `stopp` → `stop`, `plann` → `plan` (the consonant doubled before `-ing`/`-ed`).
fn undouble(base: &str) -> String {
    let b = base.as_bytes();
    let n = b.len();
    if n >= 2 && b[n - 1] == b[n - 2] && !matches!(b[n - 1], b'l' | b's' | b'z' | b'e' | b'o') {
        return base[..n - 1].to_owned();
    }
    base.to_owned()
}

pub fn is_number(token: &str) -> bool {
    let t = token.trim_end_matches(['.', '?', '!', ':', ';', ',']);
    !t.is_empty() && t.chars().next().is_some_and(|c| c.is_ascii_digit())
}

/// Words that turn a statement around.
pub const NEGATIONS: &[&str] =
    &["not", "no", "never", "without", "none", "nobody", "nothing", "neither", "nor", "nowhere", "non"];

/// Number words and their values (ordinals count as their number).
pub const NUMBER_WORDS: &[(&str, &str)] = &[
    ("zero", "0"),
    ("one", "1"),
    ("once", "1"),
    ("first", "1"),
    ("single", "1"),
    ("two", "2"),
    ("twice", "2"),
    ("second", "2"),
    ("couple", "2"),
    ("pair", "2"),
    ("double", "2"),
    ("three", "3"),
    ("third", "3"),
    ("thrice", "3"),
    ("triple", "3"),
    ("four", "4"),
    ("fourth", "4"),
    ("quarter", "4"),
    ("five", "5"),
    ("fifth", "5"),
    ("six", "6"),
    ("sixth", "6"),
    ("seven", "7"),
    ("seventh", "7"),
    ("eight", "8"),
    ("eighth", "8"),
    ("nine", "9"),
    ("ninth", "9"),
    ("ten", "10"),
    ("tenth", "10"),
    ("eleven", "11"),
    ("twelve", "12"),
    ("dozen", "12"),
    ("thirteen", "13"),
    ("fourteen", "14"),
    ("fifteen", "15"),
    ("sixteen", "16"),
    ("seventeen", "17"),
    ("eighteen", "18"),
    ("nineteen", "19"),
    ("twenty", "20"),
    ("thirty", "30"),
    ("forty", "40"),
    ("fifty", "50"),
    ("sixty", "60"),
    ("seventy", "70"),
    ("eighty", "80"),
    ("ninety", "90"),
    ("hundred", "100"),
    ("thousand", "1000"),
    ("million", "1000000"),
    ("billion", "1000000000"),
    ("half", "0.5"),
    ("ii", "2"),
    ("iii", "3"),
    ("squared", "2"),
    ("cubed", "3"),
];

/// Words that name a point in time: two questions must name the same ones.
pub const TIMES: &[&str] = &[
    "today",
    "tomorrow",
    "yesterday",
    "tonight",
    "morning",
    "afternoon",
    "evening",
    "night",
    "noon",
    "midnight",
    "weekend",
    "weekday",
    "spring",
    "summer",
    "autumn",
    "winter",
    "january",
    "february",
    "march",
    "april",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
    "jan",
    "feb",
    "apr",
    "jun",
    "jul",
    "aug",
    "sep",
    "sept",
    "oct",
    "nov",
    "dec",
    "monday",
    "tuesday",
    "wednesday",
    "thursday",
    "friday",
    "saturday",
    "sunday",
    "mon",
    "tue",
    "tues",
    "wed",
    "thu",
    "thur",
    "thurs",
    "fri",
    "am",
    "pm",
    "eve",
    "christmas",
    "easter",
    "thanksgiving",
    "halloween",
    "hanukkah",
    "ramadan",
    "diwali",
];

/// Units of time: compared only when both questions have some (`per week` / `per month`),
/// since one often says `how long` where the other says `how many minutes`.
pub const TIME_UNITS: &[&str] = &[
    "second", "minute", "hour", "day", "week", "month", "year", "decade", "century", "daily", "weekly", "monthly",
    "yearly", "annual", "annually", "hourly", "nightly",
];

/// A unit of time by its name: `daily` is `day`, `annual` is `year`.
pub fn time_unit(word: &str) -> &str {
    match word {
        "daily" => "day",
        "weekly" => "week",
        "monthly" => "month",
        "yearly" | "annual" | "annually" => "year",
        "hourly" => "hour",
        "nightly" => "night",
        other => other,
    }
}

/// Relative times, by the direction they point: past, present or future. Compared only when
/// both questions have some.
pub const RELATIVE_TIMES: &[(&str, &str)] = &[
    ("last", "past"),
    ("previous", "past"),
    ("recent", "past"),
    ("recently", "past"),
    ("past", "past"),
    ("ago", "past"),
    ("earlier", "past"),
    ("former", "past"),
    ("now", "present"),
    ("currently", "present"),
    ("current", "present"),
    ("present", "present"),
    ("next", "future"),
    ("upcoming", "future"),
    ("future", "future"),
    ("soon", "future"),
    ("later", "future"),
];

/// Words after which the next content word's place matters (`from A to B`, `A than B`).
pub const ANCHORS: &[&str] =
    &["from", "into", "than", "for", "in", "vs", "versus", "before", "after", "over", "under", "above", "below", "per"];

/// Pairs of words that mean the opposite while embedding close together.
pub const OPPOSITES: &[(&str, &str)] = &[
    ("buy", "sell"),
    ("cheap", "expensive"),
    ("cheapest", "expensive"),
    ("hot", "cold"),
    ("warm", "cold"),
    ("increase", "decrease"),
    ("raise", "lower"),
    ("more", "less"),
    ("more", "fewer"),
    ("most", "least"),
    ("max", "min"),
    ("maximum", "minimum"),
    ("high", "low"),
    ("higher", "lower"),
    ("big", "small"),
    ("bigger", "smaller"),
    ("large", "small"),
    ("long", "short"),
    ("longer", "shorter"),
    ("fast", "slow"),
    ("faster", "slower"),
    ("first", "last"),
    ("open", "close"),
    ("start", "stop"),
    ("start", "end"),
    ("begin", "end"),
    ("add", "remove"),
    ("add", "delete"),
    ("import", "export"),
    ("upload", "download"),
    ("win", "lose"),
    ("old", "new"),
    ("old", "young"),
    ("early", "late"),
    ("north", "south"),
    ("east", "west"),
    ("left", "right"),
    ("inside", "outside"),
    ("enable", "disable"),
    ("best", "worst"),
    ("better", "worse"),
    ("good", "bad"),
    ("safe", "dangerou"),
    ("legal", "illegal"),
    ("healthy", "unhealthy"),
    ("up", "down"),
    ("on", "off"),
    ("push", "pull"),
    ("send", "receive"),
    ("lend", "borrow"),
    ("gain", "lose"),
    ("before", "after"),
    ("above", "below"),
    ("over", "under"),
    ("true", "false"),
    ("yes", "no"),
    ("include", "exclude"),
    ("encrypt", "decrypt"),
    ("compress", "decompress"),
    ("lock", "unlock"),
    ("mount", "unmount"),
    ("install", "uninstall"),
    ("connect", "disconnect"),
    ("subscribe", "unsubscribe"),
    ("min", "max"),
    ("male", "female"),
    ("men", "women"),
    ("boy", "girl"),
    ("wet", "dry"),
    ("light", "dark"),
    ("light", "heavy"),
    ("hard", "soft"),
    ("easy", "hard"),
    ("easy", "difficult"),
    ("rich", "poor"),
    ("strong", "weak"),
    ("thick", "thin"),
    ("wide", "narrow"),
    ("deep", "shallow"),
    ("full", "empty"),
    ("raw", "cooked"),
    ("raw", "cook"),
    ("sweet", "sour"),
    ("positive", "negative"),
    ("import", "export"),
    ("inbound", "outbound"),
    ("incoming", "outgoing"),
    ("arrival", "departure"),
    ("arrive", "depart"),
    ("ascend", "descend"),
    ("ascending", "descending"),
    ("asc", "desc"),
    ("upper", "lower"),
    ("uppercase", "lowercase"),
    ("encode", "decode"),
    ("serialize", "deserialize"),
    ("client", "server"),
    ("frontend", "backend"),
    ("input", "output"),
    ("read", "write"),
    ("get", "set"),
    ("before", "after"),
];

/// Words that carry no subject of their own: function words and the scaffolding of a question
/// (`can you tell me`, `what's the best way to`). Added or dropped, they change nothing.
pub const FILLER: &[&str] = &[
    "a",
    "an",
    "the",
    "is",
    "are",
    "was",
    "were",
    "be",
    "been",
    "being",
    "am",
    "do",
    "doe",
    "did",
    "done",
    "have",
    "ha",
    "had",
    "i",
    "me",
    "my",
    "mine",
    "myself",
    "you",
    "your",
    "yours",
    "u",
    "we",
    "us",
    "our",
    "he",
    "she",
    "it",
    "its",
    "they",
    "them",
    "their",
    "this",
    "that",
    "these",
    "those",
    "there",
    "here",
    "what",
    "which",
    "who",
    "whom",
    "whose",
    "when",
    "where",
    "why",
    "how",
    "can",
    "could",
    "would",
    "should",
    "will",
    "shall",
    "might",
    "must",
    "of",
    "in",
    "on",
    "at",
    "by",
    "for",
    "with",
    "about",
    "as",
    "and",
    "or",
    "but",
    "if",
    "so",
    "some",
    "any",
    "all",
    "please",
    "pls",
    "plz",
    "tell",
    "know",
    "explain",
    "help",
    "need",
    "want",
    "wanna",
    "way",
    "possible",
    "exactly",
    "actually",
    "really",
    "just",
    "also",
    "let",
    "thank",
    "thanks",
    "hi",
    "hello",
    "hey",
    "someone",
    "anyone",
    "something",
    "anything",
    "thing",
    "whether",
    "question",
    "quick",
    "quickly",
    "again",
    "kindly",
    "wonder",
    "wondering",
    "curious",
    "idea",
    "ok",
    "okay",
    "well",
    "like",
    "into",
    "to",
    "from",
    "than",
    "then",
    "get",
    "go",
    "going",
    "gonna",
    "does",
    "doing",
    "make",
    "sure",
    "find",
    "out",
    "up",
    "one",
    "correct",
    "right",
    "proper",
    "properly",
    "best",
    "good",
    "recommend",
    "recommended",
    "advice",
    "suggest",
    "way",
    "method",
    "step",
    "steps",
    "guide",
    "tip",
    "tips",
    "give",
    "describe",
    "define",
    "mean",
    "meaning",
    "definition",
    "tell",
    "info",
    "information",
    "detail",
    "details",
    "exact",
    "typical",
    "typically",
    "usually",
    "generally",
    "basically",
    "simply",
    "simple",
    "easiest",
    "easy",
    "much",
    "many",
    "very",
    "too",
    "even",
    "still",
    "yet",
    "between",
    "difference",
    "different",
    "vs",
    "versus",
    "compare",
    "comparison",
    "should",
    "someone",
    "person",
    "people",
    "use",
    "considered",
    "consider",
    "typical",
    "normal",
    "usually",
    "something",
    "somebody",
    "time",
    "often",
    "frequently",
    "frequency",
    "number",
    "necessary",
    "require",
    "required",
    "allow",
    "allowed",
    "expect",
    "expected",
    "recommendation",
    "ideal",
    "trick",
    "try",
    "able",
    "ways",
    "figure",
];

pub fn is_filler(stem: &str) -> bool {
    FILLER.contains(&stem)
}

pub fn number_value(stem: &str) -> Option<String> {
    if is_number(stem) {
        return Some(stem.replace(',', ""));
    }
    NUMBER_WORDS.iter().find(|(w, _)| *w == stem).map(|(_, v)| (*v).to_owned())
}

/// A point in time (a named day, month, part of the day, season or clock time).
pub fn is_time(stem: &str) -> bool {
    TIMES.contains(&stem) || is_clock(stem)
}

/// Any word about time: a point, a unit or a relative time.
pub fn is_any_time(stem: &str) -> bool {
    is_time(stem) || TIME_UNITS.contains(&stem) || RELATIVE_TIMES.iter().any(|(w, _)| *w == stem)
}

/// `9am`, `10pm`, `14:30`.
fn is_clock(stem: &str) -> bool {
    let digits = stem.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let suffix = &stem[digits.len()..];
    !digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit() || c == ':') && matches!(suffix, "am" | "pm" | "h")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stems(text: &str) -> Vec<String> {
        words(text).into_iter().map(|w| w.base).collect()
    }

    #[test]
    fn words_open_contractions_and_keep_numbers_whole() {
        assert_eq!(stems("Don't boil 2.5 eggs!"), ["do", "not", "boil", "2.5", "egg"]);
        assert_eq!(stems("It's 1,000 miles"), ["it", "1,000", "mile"]);
        assert_eq!(stems("gluten-free cities"), ["gluten", "without", "city"]);
        assert_eq!(stems("I can't stop running"), ["i", "can", "not", "stop", "run"]);
    }

    #[test]
    fn sentence_starts_are_marked() {
        let w = words("Where is Paris? Rome is far.");
        let starts: Vec<_> = w.iter().filter(|w| w.sentence_start).map(|w| w.raw.as_str()).collect();
        assert_eq!(starts, ["Where", "Rome"]);
    }

    #[test]
    fn times_and_numbers_are_recognised() {
        assert!(is_time("9am") && is_time("14:30h") && is_time("tomorrow") && !is_time("rice"));
        assert_eq!(number_value("twelve").as_deref(), Some("12"));
        assert_eq!(number_value("1,000").as_deref(), Some("1000"));
    }
}
