//! A model's chat template rendered as Hugging Face's `apply_chat_template` renders it: Jinja
//! with `trim_blocks` and `lstrip_blocks`, Python's string and dict methods, `tojson` as Python's
//! `json.dumps`, `raise_exception` and `strftime_now`, and the tokenizer's special tokens in the
//! context; the messages first normalised as vLLM does for a template that takes text content.

use minijinja::value::{Kwargs, Value, ValueKind};
use std::collections::BTreeMap;

use minijinja::{Environment, Error, ErrorKind};

use crate::conversation;

/// The name the template is registered under.
const NAME: &str = "chat";

/// A compiled chat template and the special tokens its context carries.
pub struct ChatTemplate {
    env: Environment<'static>,
    /// `bos_token`, `eos_token`, … as `tokenizer_config.json` names them.
    special: Vec<(String, String)>,
    /// The template's text (whether it names the developer role).
    source: String,
}

impl ChatTemplate {
    pub fn new(source: String, special: Vec<(String, String)>) -> Result<Self, String> {
        let mut env = Environment::new();
        let syntax = minijinja::syntax::SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .build()
            .map_err(|e| e.to_string())?;
        env.set_syntax(syntax);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_filter("tojson", tojson);
        env.add_function("raise_exception", |message: String| -> Result<Value, Error> {
            Err(Error::new(ErrorKind::InvalidOperation, message))
        });
        env.add_function("strftime_now", |format: String| strftime_now(&format));
        env.add_template_owned(NAME, source.clone()).map_err(|e| format!("chat template: {e}"))?;
        Ok(ChatTemplate { env, special, source })
    }

    /// The prompt text for `body` (an OpenAI chat request), as vLLM renders it: its messages,
    /// tools and template arguments (`conversation.rs`), the tokenizer's special tokens. The body
    /// is read straight into template values, so objects keep the client's key order.
    pub fn render(&self, body: &str) -> Result<String, String> {
        let request: Value = serde_json::from_str(body).map_err(|e| format!("not a JSON object: {e}"))?;
        if request.kind() != ValueKind::Map {
            return Err("a chat request is a JSON object".to_owned());
        }
        let mut context: BTreeMap<String, Value> =
            self.special.iter().map(|(k, v)| (k.clone(), Value::from(v.as_str()))).collect();
        context.extend(conversation::kwargs(&request));
        context.insert("messages".into(), Value::from(conversation::messages(&request, &self.source)?));
        context.insert("tools".into(), conversation::tools(&request).unwrap_or_else(|| Value::from(())));
        let continues = context.get("continue_final_message").is_some_and(Value::is_true);
        let last = context.get("messages").and_then(|m| m.get_item(&Value::from(-1)).ok());
        let template = self.env.get_template(NAME).map_err(|e| e.to_string())?;
        let text = template.render(Value::from(context)).map_err(|e| format!("chat template: {e}"))?;
        match (continues, last) {
            (true, Some(last)) => continue_final_message(text, &last),
            _ => Ok(text),
        }
    }
}

/// The prompt cut right after the final message's content, so the model carries that message on
/// (`continue_final_message`, as transformers cuts it: at the content's last occurrence, or at
/// its trimmed form's).
fn continue_final_message(text: String, last: &Value) -> Result<String, String> {
    let content = last.get_attr("content").ok().and_then(|c| c.as_str().map(str::to_owned)).unwrap_or_default();
    for needle in [content.as_str(), content.trim()] {
        if let Some(at) = text.rfind(needle) {
            let mut text = text;
            text.truncate(at + needle.len());
            return Ok(text);
        }
    }
    Err("continue_final_message: the final message's content is not in the rendered prompt".to_owned())
}

/// `tojson` as Hugging Face defines it: Python's `json.dumps(x, ensure_ascii=False, indent=…,
/// separators=…, sort_keys=…)`, keys in their given order.
fn tojson(value: Value, kwargs: Kwargs) -> Result<Value, Error> {
    let indent: Option<usize> = kwargs.get("indent")?;
    let sort_keys: Option<bool> = kwargs.get("sort_keys")?;
    let separators: Option<Vec<String>> = kwargs.get("separators")?;
    let _: Option<bool> = kwargs.get("ensure_ascii")?;
    kwargs.assert_all_used()?;
    let (item, key) = match &separators {
        Some(s) if s.len() == 2 => (s[0].clone(), s[1].clone()),
        _ if indent.is_some() => (",".to_owned(), ": ".to_owned()),
        _ => (", ".to_owned(), ": ".to_owned()),
    };
    let style = Style { indent, item, key, sort_keys: sort_keys.unwrap_or(false) };
    let mut out = String::new();
    write_json(&mut out, &value, &style, 0)?;
    Ok(Value::from_safe_string(out))
}

struct Style {
    indent: Option<usize>,
    item: String,
    key: String,
    sort_keys: bool,
}

fn write_json(out: &mut String, value: &Value, style: &Style, depth: usize) -> Result<(), Error> {
    match value.kind() {
        ValueKind::Undefined | ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if value.is_true() { "true" } else { "false" }),
        ValueKind::Number => out.push_str(&python_number(value)),
        ValueKind::String | ValueKind::Bytes => write_string(out, value.as_str().unwrap_or_default()),
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<Value> = value.try_iter()?.collect();
            write_items(out, style, depth, ('[', ']'), items.len(), |out, i| {
                write_json(out, &items[i], style, depth + 1)
            })?;
        }
        ValueKind::Map => {
            let mut keys: Vec<Value> = value.try_iter()?.collect();
            if style.sort_keys {
                keys.sort();
            }
            write_items(out, style, depth, ('{', '}'), keys.len(), |out, i| {
                write_string(out, &keys[i].to_string());
                out.push_str(&style.key);
                write_json(out, &value.get_item(&keys[i])?, style, depth + 1)
            })?;
        }
        _ => write_string(out, &value.to_string()),
    }
    Ok(())
}

fn write_items(
    out: &mut String,
    style: &Style,
    depth: usize,
    (open, close): (char, char),
    n: usize,
    mut item: impl FnMut(&mut String, usize) -> Result<(), Error>,
) -> Result<(), Error> {
    out.push(open);
    if n == 0 {
        out.push(close);
        return Ok(());
    }
    let newline = |out: &mut String, level: usize| {
        if let Some(width) = style.indent {
            out.push('\n');
            out.push_str(&" ".repeat(width * level));
        }
    };
    for i in 0..n {
        if i > 0 {
            out.push_str(&style.item);
        }
        newline(out, depth + 1);
        item(out, i)?;
    }
    newline(out, depth);
    out.push(close);
    Ok(())
}

/// A number as Python's `json.dumps` prints it: an integer plainly; a float as `repr` does, the
/// shortest digits that read back the same, in exponent form below 1e-4 and from 1e16 on
/// (`1e-05`, `2.5e+16`), else with a decimal point (`2.0`).
fn python_number(value: &Value) -> String {
    if value.is_integer() {
        return value.to_string();
    }
    let f = f64::try_from(value.clone()).unwrap_or(f64::NAN);
    if f.is_nan() {
        return "NaN".to_owned();
    }
    if f.is_infinite() {
        return if f > 0.0 { "Infinity" } else { "-Infinity" }.to_owned();
    }
    let scientific = format!("{f:e}");
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    if f != 0.0 && !(-4..16).contains(&exponent) {
        let sign = if exponent < 0 { '-' } else { '+' };
        return format!("{mantissa}e{sign}{:02}", exponent.abs());
    }
    let fixed = format!("{f}");
    if fixed.contains('.') {
        fixed
    } else {
        format!("{fixed}.0")
    }
}

/// A JSON string as `json.dumps(ensure_ascii=False)` writes it.
fn write_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// `strftime_now(format)`: today's UTC date and time for the codes templates use
/// (`%d %b %Y`, `%Y-%m-%d`, `%B`, `%H:%M`), read off the HTTP date of now.
fn strftime_now(format: &str) -> Result<Value, Error> {
    strftime(&httpdate::fmt_http_date(std::time::SystemTime::now()), format)
}

/// `format` filled from an HTTP date (`Sun, 06 Dec 2026 14:44:11 GMT`).
fn strftime(http_date: &str, format: &str) -> Result<Value, Error> {
    const MONTHS: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    let fields: Vec<&str> = http_date.split([' ', ':']).collect();
    let [_, day, mon, year, hour, minute, second, ..] = fields[..] else {
        return Err(Error::new(ErrorKind::InvalidOperation, "strftime_now: no date"));
    };
    let month = MONTHS.iter().position(|m| m.starts_with(mon)).unwrap_or(0);
    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('d') => out.push_str(day),
            Some('m') => out.push_str(&format!("{:02}", month + 1)),
            Some('Y') => out.push_str(year),
            Some('y') => out.push_str(&year[year.len().saturating_sub(2)..]),
            Some('b') => out.push_str(mon),
            Some('B') => out.push_str(MONTHS[month]),
            Some('H') => out.push_str(hour),
            Some('M') => out.push_str(minute),
            Some('S') => out.push_str(second),
            Some('%') => out.push('%'),
            Some(other) => {
                return Err(Error::new(ErrorKind::InvalidOperation, format!("strftime_now: %{other} is not supported")))
            }
            None => out.push('%'),
        }
    }
    Ok(Value::from(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tojson_writes_what_python_json_dumps_writes() {
        let t = ChatTemplate::new("{{ x | tojson }}|{{ x | tojson(indent=2) }}".into(), Vec::new()).unwrap();
        let req = r#"{"messages": [{"role": "user", "content": "hi"}], "chat_template_kwargs": {"x": {"b": [1, 2.0, "é\"\n"], "a": null, "c": true}}}"#;
        let out = t.render(req).unwrap();
        assert_eq!(
            out,
            "{\"b\": [1, 2.0, \"é\\\"\\n\"], \"a\": null, \"c\": true}|{\n  \"b\": [\n    1,\n    2.0,\n    \"é\\\"\\n\"\n  ],\n  \"a\": null,\n  \"c\": true\n}"
        );
    }

    #[test]
    fn floats_are_written_as_python_writes_them() {
        let cases = [
            (1e-5, "1e-05"),
            (2.5e-5, "2.5e-05"),
            (1e16, "1e+16"),
            (1e22, "1e+22"),
            (1e15, "1000000000000000.0"),
            (123456789.12345679, "123456789.12345679"),
            (0.0001, "0.0001"),
            (-0.0, "-0.0"),
            (3.0, "3.0"),
        ];
        for (f, want) in cases {
            assert_eq!(python_number(&Value::from(f)), want, "{f}");
        }
    }

    #[test]
    fn dates_are_written_as_strftime_writes_them() {
        let date = "Mon, 07 Dec 2026 06:05:09 GMT";
        assert_eq!(strftime(date, "%d %b %Y").unwrap().as_str(), Some("07 Dec 2026"));
        assert_eq!(
            strftime(date, "%Y-%m-%d %H:%M:%S %B %y %%").unwrap().as_str(),
            Some("2026-12-07 06:05:09 December 26 %")
        );
        assert!(strftime(date, "%j").is_err());
    }
}
