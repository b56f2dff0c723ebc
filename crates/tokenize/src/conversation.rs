//! A chat request's messages, tools and template arguments as vLLM hands them to the chat
//! template (vLLM 0.34's `parse_chat_messages` for templates that take string content, its tool
//! model's dump, and `build_chat_params`), so the prompt rendered here is the one it renders.
//!
//! - Each message is rebuilt from its role and its content as one string (text parts joined by
//!   newlines, other parts dropped, none as ""), plus only the fields vLLM carries over:
//!   assistant `tool_calls` (arguments parsed to an object; invalid or not an object: `{}`) and
//!   `reasoning` (also as `reasoning_content`), tool `tool_call_id`, any string `name`.
//! - A system message's text part opening with Claude Code's per-request billing header loses
//!   that first line (vLLM strips it so the header does not break the prefix cache).
//! - Developer messages become system ones, merged at the front, when the template does not name
//!   the developer role.
//! - Tools keep `type` and `function` with `name`, `description` and `parameters` (null when
//!   absent), and `strict` / `defer_loading` only when set.

use indexmap::IndexMap;
use minijinja::value::{Value, ValueKind};

/// Content part types read as text, and the field their text is in.
const TEXT_PARTS: [(&str, &str); 5] =
    [("text", "text"), ("input_text", "text"), ("output_text", "text"), ("thinking", "text"), ("refusal", "refusal")];
const BILLING_HEADER: &str = "x-anthropic-billing-header";

type Map = IndexMap<Value, Value>;

fn get(value: &Value, key: &str) -> Option<Value> {
    value.get_attr(key).ok().filter(|v| !v.is_undefined() && !v.is_none())
}

fn map(entries: Map) -> Value {
    Value::from(entries)
}

/// The messages as the template sees them.
pub fn messages(request: &Value, template_source: &str) -> Result<Vec<Value>, String> {
    let list = get(request, "messages").filter(|m| m.kind() == ValueKind::Seq);
    let list = list.ok_or_else(|| "a chat request needs `messages`".to_owned())?;
    let mut out = Vec::new();
    for message in list.try_iter().map_err(|e| e.to_string())? {
        let role =
            get(&message, "role").and_then(|r| r.as_str().map(str::to_owned)).ok_or("a message needs a `role`")?;
        out.push(rebuild(&message, &role));
    }
    if out.is_empty() {
        return Err("Cannot apply chat template to an empty conversation".to_owned());
    }
    let names_developer = template_source.contains("\"developer\"") || template_source.contains("'developer'");
    let has_developer = out.iter().any(|m| get(m, "role").as_ref().and_then(Value::as_str) == Some("developer"));
    if has_developer && !names_developer {
        out = developer_to_system(out);
    }
    Ok(out)
}

fn rebuild(message: &Value, role: &str) -> Value {
    let mut m = Map::new();
    m.insert("role".into(), role.into());
    m.insert("content".into(), Value::from(string_content(role, get(message, "content"))));
    match role {
        "assistant" => {
            if let Some(calls) = get(message, "tool_calls").filter(|c| c.kind() == ValueKind::Seq && c.len() != Some(0))
            {
                let calls: Vec<Value> = calls.try_iter().map(|c| c.map(parse_arguments).collect()).unwrap_or_default();
                m.insert("tool_calls".into(), Value::from(calls));
            }
            if let Some(reasoning) = get(message, "reasoning") {
                m.insert("reasoning".into(), reasoning.clone());
                m.insert("reasoning_content".into(), reasoning);
            }
        }
        "tool" => {
            if let Ok(id) = message.get_attr("tool_call_id") {
                if !id.is_undefined() {
                    m.insert("tool_call_id".into(), id);
                }
            }
        }
        _ => {}
    }
    if let Some(name) = get(message, "name").filter(|n| n.kind() == ValueKind::String) {
        m.insert("name".into(), name);
    }
    if role == "developer" {
        m.insert("tools".into(), get(message, "tools").unwrap_or(Value::from(())));
    }
    map(m)
}

/// A message's content as one string.
fn string_content(role: &str, content: Option<Value>) -> String {
    let parts: Vec<Value> = match content {
        None => Vec::new(),
        Some(c) if c.kind() == ValueKind::String => vec![c],
        Some(c) => c.try_iter().map(|i| i.collect()).unwrap_or_default(),
    };
    let mut texts: Vec<String> = Vec::new();
    for part in parts {
        let text = match part.kind() {
            ValueKind::String => part.as_str().map(str::to_owned),
            ValueKind::Map => {
                let kind = get(&part, "type");
                let field = TEXT_PARTS.iter().find(|(t, _)| kind.as_ref().and_then(Value::as_str) == Some(*t));
                field.and_then(|(_, f)| get(&part, f)).and_then(|t| t.as_str().map(str::to_owned))
            }
            _ => None,
        };
        let Some(text) = text else { continue };
        if role == "system" && text.starts_with(BILLING_HEADER) {
            match text.split_once('\n') {
                Some((_, rest)) if !rest.is_empty() => texts.push(rest.to_owned()),
                _ => {}
            }
            continue;
        }
        texts.push(text);
    }
    texts.join("\n")
}

/// A tool call with its `function.arguments` as an object (a JSON string parsed; anything else
/// that is not an object: `{}`).
fn parse_arguments(call: Value) -> Value {
    let Some(function) = get(&call, "function") else { return call };
    let arguments = match get(&function, "arguments") {
        Some(a) if a.kind() == ValueKind::Map => a,
        Some(a) if a.kind() == ValueKind::String => a
            .as_str()
            .and_then(|text| serde_json::from_str::<Value>(text).ok())
            .filter(|v| v.kind() == ValueKind::Map)
            .unwrap_or_else(|| map(Map::new())),
        _ => map(Map::new()),
    };
    let mut f: Map = entries(&function);
    f.insert("arguments".into(), arguments);
    let mut c: Map = entries(&call);
    c.insert("function".into(), map(f));
    map(c)
}

fn entries(value: &Value) -> Map {
    value
        .try_iter()
        .map(|keys| keys.map(|k| (k.clone(), value.get_item(&k).unwrap_or_default())).collect())
        .unwrap_or_default()
}

/// Developer messages as system ones; more than one system message, or one not first, merged
/// into one at the front (their non-empty contents joined by a blank line).
fn developer_to_system(messages: Vec<Value>) -> Vec<Value> {
    let converted: Vec<Value> = messages
        .into_iter()
        .map(|m| {
            if get(&m, "role").as_ref().and_then(Value::as_str) != Some("developer") {
                return m;
            }
            let mut e = entries(&m);
            e.shift_remove(&Value::from("tools"));
            e.insert("role".into(), "system".into());
            map(e)
        })
        .collect();
    let is_system = |m: &Value| get(m, "role").as_ref().and_then(Value::as_str) == Some("system");
    let positions: Vec<usize> = converted.iter().enumerate().filter(|(_, m)| is_system(m)).map(|(i, _)| i).collect();
    if positions.is_empty() || positions == [0] {
        return converted;
    }
    let contents: Vec<String> = positions
        .iter()
        .filter_map(|&i| get(&converted[i], "content").and_then(|c| c.as_str().map(str::to_owned)))
        .filter(|c| !c.is_empty())
        .collect();
    let mut merged = Map::new();
    merged.insert("role".into(), "system".into());
    merged.insert("content".into(), Value::from(contents.join("\n\n")));
    std::iter::once(map(merged)).chain(converted.into_iter().filter(|m| !is_system(m))).collect()
}

/// The request's tools as vLLM's tool model dumps them; `None` when it sent none.
pub fn tools(request: &Value) -> Option<Value> {
    let tools = get(request, "tools").filter(|t| t.kind() == ValueKind::Seq)?;
    let rendered: Vec<Value> = tools
        .try_iter()
        .ok()?
        .map(|tool| {
            let function = get(&tool, "function").unwrap_or_default();
            let mut f = Map::new();
            f.insert("name".into(), get(&function, "name").unwrap_or(Value::from(())));
            f.insert("description".into(), get(&function, "description").unwrap_or(Value::from(())));
            f.insert("parameters".into(), get(&function, "parameters").unwrap_or(Value::from(())));
            if let Some(strict) = get(&function, "strict") {
                f.insert("strict".into(), strict);
            }
            let defer = get(&function, "defer_loading").or_else(|| get(&tool, "defer_loading"));
            if let Some(defer) = &defer {
                f.insert("defer_loading".into(), defer.clone());
            }
            let mut t = Map::new();
            t.insert("type".into(), "function".into());
            t.insert("function".into(), map(f));
            if let Some(defer) = get(&tool, "defer_loading") {
                t.insert("defer_loading".into(), defer);
            }
            map(t)
        })
        .collect();
    Some(Value::from(rendered))
}

/// The template arguments the request sets besides messages and tools: its
/// `chat_template_kwargs`, overridden by `add_generation_prompt` (default true),
/// `continue_final_message` (default false), `documents` and `reasoning_effort` (which also sets
/// `enable_thinking` unless the kwargs do).
pub fn kwargs(request: &Value) -> Vec<(String, Value)> {
    let mut out: IndexMap<String, Value> = IndexMap::new();
    if let Some(extra) = get(request, "chat_template_kwargs").filter(|e| e.kind() == ValueKind::Map) {
        for (k, v) in entries(&extra) {
            out.insert(k.to_string(), v);
        }
    }
    let effort = get(request, "reasoning_effort");
    if let Some(effort) = &effort {
        if !out.contains_key("enable_thinking") {
            out.insert("enable_thinking".into(), Value::from(effort.as_str() != Some("none")));
        }
    }
    let fields = [
        ("add_generation_prompt", Some(get(request, "add_generation_prompt").unwrap_or(Value::from(true)))),
        ("continue_final_message", Some(get(request, "continue_final_message").unwrap_or(Value::from(false)))),
        ("documents", get(request, "documents")),
        ("reasoning_effort", effort.filter(|e| e.as_str() != Some("auto"))),
    ];
    for (name, value) in fields {
        if let Some(value) = value {
            out.insert(name.into(), value);
        }
    }
    out.into_iter().collect()
}
