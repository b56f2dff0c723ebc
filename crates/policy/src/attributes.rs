//! The attributes a rule reads, their types, and the phase of the request each becomes known in.
//! One table: the documentation's table is written from it.

/// When in a request an attribute is known. Rules run in a phase and may read only what is
/// known by then.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    /// The request is authenticated and parsed: who asks, for what, how big.
    Request,
    /// An MCP tool call: its server, tool and arguments.
    Mcp,
}

impl Phase {
    pub fn name(self) -> &'static str {
        match self {
            Phase::Request => "request",
            Phase::Mcp => "mcp",
        }
    }
}

/// What a CEL expression's value is, as far as the load-time check knows.
#[derive(Debug, Clone, PartialEq)]
pub enum Type {
    Bool,
    Int,
    Double,
    String,
    List(Box<Type>),
    /// String keys.
    Map(Box<Type>),
    Null,
    Timestamp,
    /// Not known until it is evaluated (a JWT claim, a comprehension's variable).
    Dyn,
    /// A prefix of attribute paths (`request`, `key`): only its fields are values.
    Object(&'static str),
}

impl Type {
    pub fn name(&self) -> String {
        match self {
            Type::Bool => "bool".into(),
            Type::Int => "int".into(),
            Type::Double => "double".into(),
            Type::String => "string".into(),
            Type::List(t) => format!("list({})", t.name()),
            Type::Map(t) => format!("map(string, {})", t.name()),
            Type::Null => "null".into(),
            Type::Timestamp => "timestamp".into(),
            Type::Dyn => "dyn".into(),
            Type::Object(path) => format!("`{path}`"),
        }
    }
}

/// One attribute: its path, type, phase and what it is.
pub struct Attribute {
    pub path: &'static str,
    pub ty: fn() -> Type,
    pub phase: Phase,
    pub about: &'static str,
}

fn string() -> Type {
    Type::String
}
fn int() -> Type {
    Type::Int
}
fn boolean() -> Type {
    Type::Bool
}
fn strings() -> Type {
    Type::List(Box::new(Type::String))
}
fn string_map() -> Type {
    Type::Map(Box::new(Type::String))
}
fn timestamp() -> Type {
    Type::Timestamp
}
fn any_map() -> Type {
    Type::Map(Box::new(Type::Dyn))
}

macro_rules! attributes {
    ($($path:literal: $ty:ident, $phase:ident, $about:literal;)*) => {
        /// Every attribute, by path.
        pub const ATTRIBUTES: &[Attribute] = &[
            $(Attribute { path: $path, ty: $ty, phase: Phase::$phase, about: $about }),*
        ];
    };
}

attributes! {
    "request.method": string, Request, "the HTTP method";
    "request.path": string, Request, "the path, without the query";
    "request.endpoint": string, Request, "the API asked: `chat`, `messages`, `responses`, `embeddings`…";
    "request.headers": string_map, Request, "the request's headers, by lower-case name";
    "request.model": string, Request, "the model as asked";
    "request.resolved_model": string, Request, "the model after aliases";
    "request.stream": boolean, Request, "whether a stream was asked for";
    "request.size": int, Request, "the body's bytes";
    "request.estimated_tokens": int, Request, "the prompt's tokens, estimated";
    "key.id": string, Request, "the virtual key's id";
    "key.name": string, Request, "the key's name";
    "key.tags": strings, Request, "the key's tags";
    "key.team": string, Request, "the key's team's name";
    "key.user": string, Request, "the key's user (email)";
    "team.name": string, Request, "the team's name";
    "user.email": string, Request, "the user's email";
    "jwt.claims": any_map, Request, "a signed-in caller's token claims";
    "source.ip": string, Request, "the client's address";
    "time.hour": int, Request, "the hour (0–23), UTC";
    "time.weekday": int, Request, "the day of the week, 0 = Sunday, UTC";
    "time.unix": int, Request, "seconds since 1970";
    "time.now": timestamp, Request, "now, a CEL timestamp: `time.now.getHours('Europe/Paris')`, `getDayOfWeek(tz)`…";
    "mcp.server": string, Mcp, "the MCP server called";
    "mcp.tool": string, Mcp, "the tool called";
    "mcp.arguments": any_map, Mcp, "the tool call's arguments";
}

/// The attribute at `path`, if there is one.
pub fn attribute(path: &str) -> Option<&'static Attribute> {
    ATTRIBUTES.iter().find(|a| a.path == path)
}

/// The path of `prefix.field`, when it is an attribute or a prefix of some (`request`, `key`).
pub fn child(prefix: &str, field: &str) -> Option<&'static str> {
    ATTRIBUTES.iter().find_map(|a| {
        let rest = if prefix.is_empty() { Some(a.path) } else { a.path.strip_prefix(prefix)?.strip_prefix('.') };
        let rest = rest?;
        let (first, _) = rest.split_once('.').unwrap_or((rest, ""));
        (first == field).then(|| &a.path[..a.path.len() - rest.len() + first.len()])
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/POLICIES.md's table lists every attribute with its type and phase, and no other.
    #[test]
    fn the_documented_table_is_the_table() {
        let doc = include_str!("../../../docs/POLICIES.md");
        let rows: Vec<&str> = doc.lines().filter(|l| l.starts_with("| `")).collect();
        assert_eq!(rows.len(), ATTRIBUTES.len(), "one row per attribute");
        for a in ATTRIBUTES {
            let row = rows.iter().find(|r| r.starts_with(&format!("| `{}` |", a.path)));
            let row = row.unwrap_or_else(|| panic!("docs/POLICIES.md has no row for `{}`", a.path));
            let cells: Vec<&str> = row.split('|').map(str::trim).collect();
            assert_eq!((cells[2], cells[3]), ((a.ty)().name().as_str(), a.phase.name()), "{}", a.path);
        }
    }
}
