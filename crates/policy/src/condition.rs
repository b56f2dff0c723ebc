//! A rule's condition, compiled and checked once, evaluated against one request's attributes.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use cel::common::value::{CowVal, Val};
use cel::context::VariableResolver;
use cel::{Context, Env, Program, Value};

use crate::attributes::{Phase, Type};
use crate::check::{CheckError, Checker};

/// A checked CEL condition.
pub struct Condition {
    program: Program,
    pub source: String,
    pub phase: Phase,
    /// The attributes it reads (the gateway provides only these).
    pub reads: Vec<&'static str>,
    /// Their roots (`request`, `key`…): the variables bound for it.
    roots: Vec<&'static str>,
}

impl std::fmt::Debug for Condition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Condition").field("source", &self.source).field("phase", &self.phase).finish()
    }
}

/// The standard environment, built once: a context per evaluation shares it.
fn env() -> Arc<Env> {
    static ENV: OnceLock<Arc<Env>> = OnceLock::new();
    ENV.get_or_init(|| Arc::new(Env::stdlib())).clone()
}

impl Condition {
    /// Parse and check `source` for a rule of `phase`: it must be a bool (or only known when
    /// evaluated) and read only attributes known by then.
    pub fn compile(source: &str, phase: Phase) -> Result<Condition, CheckError> {
        let program = parse(source)?;
        let mut checker = Checker::new(phase, program.source_info());
        let ty = checker.infer(program.expression())?;
        if !matches!(ty, Type::Bool | Type::Dyn) {
            let message = format!("a condition is a bool; this is {}", ty.name());
            return Err(CheckError { message, at: None });
        }
        let reads = checker.read;
        let mut roots: Vec<&'static str> = reads.iter().map(|p| p.split('.').next().unwrap_or(p)).collect();
        roots.dedup();
        roots.sort_unstable();
        roots.dedup();
        Ok(Condition { program, source: source.to_owned(), phase, reads, roots })
    }

    /// Whether it holds for `values`; None when it cannot be evaluated (an attribute the request
    /// lacks, a claim of the wrong type). Nothing is formatted: this is the request path's.
    pub fn check(&self, values: &Bound) -> Option<bool> {
        let mut context = Context::with_env(env());
        context.set_variable_resolver(values);
        match self.program.execute(&context) {
            Ok(Value::Bool(b)) => Some(b),
            _ => None,
        }
    }

    /// Whether it holds for `values`; an evaluation error (a claim of the wrong type at run time)
    /// is the error's text, for the caller to treat as not holding and to log.
    pub fn holds(&self, values: &Bound) -> Result<bool, String> {
        let mut context = Context::with_env(env());
        context.set_variable_resolver(values);
        match self.program.execute(&context) {
            Ok(Value::Bool(b)) => Ok(b),
            Ok(other) => Err(format!("`{}` gave {other:?}, not a bool", self.source)),
            Err(e) => Err(format!("`{}`: {e}", self.source)),
        }
    }

    /// The roots it reads (`request`, `key`…).
    pub fn roots(&self) -> &[&'static str] {
        &self.roots
    }

    /// The latest phase of the attributes it reads (`request` when it reads none of a later one).
    pub fn phase_read(&self) -> Phase {
        let phase = |path: &&str| crate::attributes::attribute(path).map_or(Phase::Request, |a| a.phase);
        self.reads.iter().map(phase).max().unwrap_or(Phase::Request)
    }
}

/// A checked CEL expression of a number (a `cost:`), evaluated against one request's attributes.
pub struct Expression {
    program: Program,
    pub source: String,
    pub reads: Vec<&'static str>,
}

impl std::fmt::Debug for Expression {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Expression").field("source", &self.source).finish()
    }
}

impl Expression {
    /// Parse and check `source` for `phase`: its value must be one of `types` (or known only when
    /// evaluated).
    pub fn compile(source: &str, phase: Phase, types: &[Type]) -> Result<Expression, CheckError> {
        let program = parse(source)?;
        let mut checker = Checker::new(phase, program.source_info());
        let ty = checker.infer(program.expression())?;
        if ty != Type::Dyn && !types.contains(&ty) {
            let want: Vec<String> = types.iter().map(Type::name).collect();
            return Err(CheckError {
                message: format!("this is a {}; it must be {}", ty.name(), want.join(" or ")),
                at: None,
            });
        }
        let reads = checker.read;
        Ok(Expression { program, source: source.to_owned(), reads })
    }

    /// Its value as a number; None when it cannot be evaluated.
    pub fn value(&self, values: &Bound) -> Option<f64> {
        self.number(values).ok()
    }

    /// Its value as a number, or why not.
    pub fn number(&self, values: &Bound) -> Result<f64, String> {
        let mut context = Context::with_env(env());
        context.set_variable_resolver(values);
        match self.program.execute(&context) {
            Ok(Value::Int(n)) => Ok(n as f64),
            Ok(Value::UInt(n)) => Ok(n as f64),
            Ok(Value::Float(x)) if x.is_finite() => Ok(x),
            Ok(other) => Err(format!("`{}` gave {other:?}, not a number", self.source)),
            Err(e) => Err(format!("`{}`: {e}", self.source)),
        }
    }
}

fn parse(source: &str) -> Result<Program, CheckError> {
    Program::compile(source).map_err(|errors| {
        let first = errors.errors.first();
        CheckError {
            message: first.map_or_else(|| "not a CEL expression".to_owned(), |e| format!("syntax: {}", e.msg)),
            at: first.map(|e| (e.pos.1.max(0) as u32, e.pos.1.max(0) as u32 + 1)),
        }
    })
}

/// One request's attributes, by path (`request.model`), as they are gathered.
#[derive(Debug, Clone, Default)]
pub struct Values {
    set: Vec<(&'static str, Value)>,
}

impl Values {
    /// Set the attribute at `path` (`root.field`).
    pub fn set(&mut self, path: &'static str, value: impl Into<Value>) -> &mut Values {
        let value = value.into();
        match self.set.iter_mut().find(|(p, _)| *p == path) {
            Some(slot) => slot.1 = value,
            None => self.set.push((path, value)),
        }
        self
    }

    /// Set the attribute at `path` from JSON text (a token's claims); unreadable text sets nothing.
    pub fn set_json(&mut self, path: &'static str, json: &str) -> &mut Values {
        match serde_json::from_str::<serde_json::Value>(json).ok().and_then(|v| cel::to_value(v).ok()) {
            Some(value) => self.set(path, value),
            None => self,
        }
    }

    /// Every attribute `json` gives, by the attribute table's paths (`{"request": {"model": "m"},
    /// "key": {"tags": ["intern"]}}`); others are refused, naming them.
    pub fn from_json(json: &serde_json::Value) -> Result<Values, String> {
        let mut v = Values::default();
        let Some(roots) = json.as_object() else { return Err("the attributes are a JSON object".into()) };
        let unix = json.pointer("/time/unix").map(|t| t.as_i64().ok_or("`time.unix` is an integer (seconds)"));
        if let Some(unix) = unix {
            v.set_time(unix?.saturating_mul(1000));
        }
        for (root, fields) in roots.iter().filter(|(root, _)| *root != "time") {
            let fields = fields.as_object().ok_or_else(|| format!("`{root}` is an object of attributes"))?;
            for (field, value) in fields {
                let path = format!("{root}.{field}");
                let attribute =
                    crate::attributes::attribute(&path).ok_or_else(|| format!("unknown attribute `{path}`"))?;
                let value = cel::to_value(value.clone()).map_err(|e| format!("`{path}`: {e}"))?;
                v.set(attribute.path, value);
            }
        }
        Ok(v)
    }

    /// The `time.*` attributes for `unix_ms` (hour and weekday in UTC; `time.now` for CEL's
    /// time-zone functions).
    pub fn set_time(&mut self, unix_ms: i64) -> &mut Values {
        use chrono::{Datelike, Timelike};
        let Some(now) = chrono::DateTime::from_timestamp_millis(unix_ms) else { return self };
        self.set("time.unix", unix_ms.div_euclid(1000))
            .set("time.hour", i64::from(now.hour()))
            .set("time.weekday", i64::from(now.weekday().num_days_from_sunday()))
            .set("time.now", Value::Timestamp(now.fixed_offset()))
    }

    /// Converted once into what the interpreter reads, for every rule of the request to borrow:
    /// each attribute by its own path (the interpreter asks for `request.model` before
    /// `request`, so a rule never converts a whole root).
    pub fn bind(self) -> Bound {
        let leaves =
            self.set.into_iter().filter_map(|(path, value)| Some((path, Box::<dyn Val>::try_from(value).ok()?)));
        Bound { leaves: leaves.collect() }
    }
}

/// A request's attributes in the interpreter's own form; its rules borrow them (no copy per rule).
#[derive(Debug, Default)]
pub struct Bound {
    leaves: Vec<(&'static str, Box<dyn Val>)>,
}

/// Every attribute's root (`request`, `key`…).
const ROOTS: [&str; 8] = ["request", "key", "team", "user", "jwt", "source", "time", "mcp"];

impl VariableResolver for Bound {
    fn resolve<'b>(&'b self, variable: &str) -> Option<CowVal<'b, 'b>> {
        if let Some((_, value)) = self.leaves.iter().find(|(p, _)| *p == variable) {
            return Some(CowVal::Borrowed(&**value));
        }
        if !ROOTS.contains(&variable) {
            return None;
        }
        // A root is asked for only by `has()` and for a field the request lacks: made then, as
        // a map of the fields present (placeholders); a root the request has none of is empty.
        let fields: HashMap<String, Value> = self
            .leaves
            .iter()
            .filter_map(|(path, _)| path.strip_prefix(variable)?.strip_prefix('.'))
            .map(|field| (field.to_owned(), Value::Null))
            .collect();
        if fields.is_empty() {
            return Some(CowVal::Borrowed(empty_map()));
        }
        Box::<dyn Val>::try_from(Value::from(fields)).ok().map(CowVal::Owned)
    }
}

fn empty_map() -> &'static dyn Val {
    static EMPTY: OnceLock<Box<dyn Val>> = OnceLock::new();
    &**EMPTY.get_or_init(|| {
        let empty: HashMap<String, Value> = HashMap::new();
        Box::<dyn Val>::try_from(Value::from(empty)).unwrap_or_else(|_| Box::new(cel::common::types::CelNull))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> Bound {
        let mut v = Values::default();
        let headers: HashMap<String, Value> = [("x-data-class".to_owned(), Value::from("restricted"))].into();
        let claims: HashMap<String, Value> = [("admin".to_owned(), Value::Bool(true))].into();
        v.set("request.model", "gpt-4o")
            .set("request.stream", true)
            .set("request.size", 512i64)
            .set("request.headers", headers)
            .set("key.tags", vec![Value::from("intern")])
            .set("key.team", "research")
            .set("jwt.claims", claims)
            .set("time.hour", 14i64);
        v.bind()
    }

    #[test]
    fn typical_rules_evaluate() {
        let cases = [
            ("'intern' in key.tags && request.model.startsWith('gpt-4')", true),
            ("request.headers['x-data-class'] == 'restricted'", true),
            ("has(request.headers.authorization)", false),
            ("jwt.claims.admin == true && time.hour >= 9 && time.hour < 17", true),
            ("request.size > 1024 || !request.stream", false),
            ("key.tags.exists(t, t == 'intern')", true),
            ("key.team in ['research', 'ops']", true),
            ("has(key.team) && !has(key.name)", true),
        ];
        for (source, expected) in cases {
            let c = Condition::compile(source, Phase::Request).unwrap_or_else(|e| panic!("{source}: {e}"));
            assert_eq!(c.holds(&request()), Ok(expected), "{source}");
        }
    }

    #[test]
    fn time_zones_are_cel_functions() {
        let mut v = Values::default();
        v.set_time(1_780_000_000_000); // 2026-05-28T20:26:40Z, a Thursday
        let v = v.bind();
        let cases = [
            ("time.hour == 20 && time.weekday == 4", true),
            ("time.now.getHours('Europe/Paris') == 22", true),
            ("time.now.getHours('Asia/Tokyo') == 5 && time.now.getDayOfWeek('Asia/Tokyo') == 5", true),
            ("time.now.getHours('America/New_York') >= 9 && time.now.getHours('America/New_York') < 17", true),
        ];
        for (source, expected) in cases {
            let c = Condition::compile(source, Phase::Request).unwrap_or_else(|e| panic!("{source}: {e}"));
            assert_eq!(c.holds(&v), Ok(expected), "{source}");
        }
        let e = Condition::compile("time.hour.getHours() == 1", Phase::Request).expect_err("not a timestamp");
        assert!(e.message.contains("takes timestamp"), "{e}");
        let e = Expression::compile("request.estimated_tokens * 0.5", Phase::Request, &[Type::Int, Type::Double]);
        assert!(e.expect_err("mixed").message.contains("use double"));
        let cost = Expression::compile("double(request.size) * 0.5", Phase::Request, &[Type::Int, Type::Double]);
        let mut v = Values::default();
        v.set("request.size", 10i64);
        assert_eq!(cost.expect("valid").number(&v.bind()), Ok(5.0));
    }

    #[test]
    fn a_root_the_request_lacks_is_empty() {
        let c = Condition::compile("!has(key.name) && !has(jwt.claims)", Phase::Request).expect("valid");
        assert_eq!(c.holds(&Values::default().bind()), Ok(true));
    }

    #[test]
    fn load_time_errors_name_what_and_where() {
        let cases = [
            ("request.modle == 'x'", "unknown attribute `request.modle`"),
            ("user.name == 'x'", "unknown attribute `user.name`"),
            ("request.size == 'big'", "compares int with string"),
            ("request.model", "a condition is a bool"),
            ("request.model > 3", "compares string with int"),
            ("mcp.tool == 'delete'", "known only in the mcp phase"),
            ("key.tags['x'] == 'y'", "an index of list(string) is an int"),
            ("request == 'x'", "`request` is not a value"),
            ("lowerAscii(request.model) == 'x'", "unknown function `lowerAscii`"),
            ("request.model ==", "syntax"),
        ];
        for (source, expected) in cases {
            let e = Condition::compile(source, Phase::Request).expect_err(source);
            assert!(e.message.contains(expected), "{source}: {e}");
        }
        let e = Condition::compile("request.size == 'big'", Phase::Request).expect_err("type");
        assert!(e.at.is_some(), "a check error says where: {e}");
        assert!(Condition::compile("mcp.tool.startsWith('github__delete')", Phase::Mcp).is_ok());
    }
}
