//! TypeScript-style declarations of tools for Code Mode's `search_tools`: a tool's input schema (JSON Schema)
//! as a one-line type, its description as a doc comment. Shorter than the schema, and what a model already
//! reads fluently. Schemas this does not understand become `any`, never an error.

use serde_json::Value;

/// Nesting deeper than this is written `any` (schemas can be recursive through `$ref`; we do not follow those).
const MAX_DEPTH: usize = 4;

/// `/** description */\ntools.server.tool(args: {...}): Promise<any>;`
pub fn declare(server: &str, tool: &str, definition: &Value) -> String {
    let mut out = String::new();
    if let Some(d) = definition.get("description").and_then(Value::as_str).filter(|d| !d.trim().is_empty()) {
        out.push_str(&format!("/** {} */\n", d.trim().replace("*/", "* /")));
    }
    let args = definition.get("inputSchema").map_or_else(|| "{}".to_owned(), |s| type_of(s, 0));
    out.push_str(&format!("tools{}{}(args: {args}): Promise<any>;", member(server), member(tool)));
    out
}

/// `.name`, or `["na-me"]` when the name is not an identifier: what works in code.
fn member(name: &str) -> String {
    if is_identifier(name) {
        format!(".{name}")
    } else {
        format!("[{}]", Value::String(name.to_owned()))
    }
}

fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == '$')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$')
}

fn type_of(schema: &Value, depth: usize) -> String {
    if depth > MAX_DEPTH {
        return "any".into();
    }
    if let Some(values) = schema.get("enum").and_then(Value::as_array) {
        return values.iter().map(Value::to_string).collect::<Vec<_>>().join(" | ");
    }
    if let Some(c) = schema.get("const") {
        return c.to_string();
    }
    for combinator in ["anyOf", "oneOf"] {
        if let Some(options) = schema.get(combinator).and_then(Value::as_array) {
            return options.iter().map(|o| type_of(o, depth + 1)).collect::<Vec<_>>().join(" | ");
        }
    }
    match schema.get("type") {
        Some(Value::String(t)) => named_type(t, schema, depth),
        Some(Value::Array(types)) => {
            types.iter().filter_map(Value::as_str).map(|t| named_type(t, schema, depth)).collect::<Vec<_>>().join(" | ")
        }
        _ if schema.get("properties").is_some() => object_type(schema, depth),
        _ => "any".into(),
    }
}

fn named_type(t: &str, schema: &Value, depth: usize) -> String {
    match t {
        "string" => "string".into(),
        "integer" | "number" => "number".into(),
        "boolean" => "boolean".into(),
        "null" => "null".into(),
        "array" => {
            let item = schema.get("items").map_or_else(|| "any".to_owned(), |i| type_of(i, depth + 1));
            if item.contains(' ') {
                format!("Array<{item}>")
            } else {
                format!("{item}[]")
            }
        }
        "object" => object_type(schema, depth),
        _ => "any".into(),
    }
}

fn object_type(schema: &Value, depth: usize) -> String {
    let Some(props) = schema.get("properties").and_then(Value::as_object) else {
        return "Record<string, any>".into();
    };
    if props.is_empty() {
        return "{}".into();
    }
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map_or_else(Vec::new, |r| r.iter().filter_map(Value::as_str).collect());
    let fields: Vec<String> = props
        .iter()
        .map(|(name, prop)| {
            let key = if is_identifier(name) { name.clone() } else { Value::String(name.clone()).to_string() };
            let optional = if required.contains(&name.as_str()) { "" } else { "?" };
            let doc = prop
                .get("description")
                .and_then(Value::as_str)
                .filter(|d| depth == 0 && !d.is_empty() && d.len() <= 120)
                .map(|d| format!(" /* {} */", d.replace("*/", "* /")))
                .unwrap_or_default();
            format!("{key}{optional}: {}{doc}", type_of(prop, depth + 1))
        })
        .collect();
    format!("{{ {} }}", fields.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn schemas_become_compact_types() {
        let tool = json!({
            "description": "Create an issue.",
            "inputSchema": {"type": "object", "required": ["title"], "properties": {
                "title": {"type": "string"},
                "labels": {"type": "array", "items": {"type": "string"}},
                "state": {"enum": ["open", "closed"]},
                "meta": {"type": "object", "properties": {"n": {"type": "integer"}}},
                "x-y": {"type": ["string", "null"]}
            }}
        });
        assert_eq!(
            declare("github", "create_issue", &tool),
            "/** Create an issue. */\ntools.github.create_issue(args: { labels?: string[]; meta?: { n?: number }; \
             state?: \"open\" | \"closed\"; title: string; \"x-y\"?: string | null }): Promise<any>;"
        );
    }

    #[test]
    fn odd_names_and_missing_schemas_still_declare() {
        let d = declare("my-server", "get-item", &json!({}));
        assert_eq!(d, "tools[\"my-server\"][\"get-item\"](args: {}): Promise<any>;");
        assert!(declare("s", "t", &json!({"inputSchema": {"$ref": "#/x"}})).contains("args: any"));
    }
}
