//! Agent cards through a gateway: every interface URL a card names (A2A 1.0's
//! `supportedInterfaces[].url`, 0.3's top-level `url` and `additionalInterfaces[].url`) is checked
//! against the allow-list — a card naming any other host is refused whole — and replaced by the
//! gateway's address for the agent, so clients come back through the gateway. The agent's own
//! addresses are returned for the gateway to call. gRPC interfaces are left out of the card the
//! client sees: the gateway relays JSON-RPC and the REST binding (HTTP+JSON), not gRPC.

use http::Uri;
use serde_json::Value;

use crate::hosts::{parse_url, AllowedHosts};

/// Where an agent listens, per protocol binding, as its card says.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Interfaces {
    pub jsonrpc: Option<Uri>,
    /// The REST binding's base (its paths, `/message:send`…, are appended).
    pub rest: Option<Uri>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum CardError {
    /// An interface URL on a host the allow-list does not name.
    HostRefused(String),
    /// Not a card: a field of the wrong type, an interface URL that is not an absolute URL.
    Malformed(String),
}

impl std::fmt::Display for CardError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CardError::HostRefused(url) => write!(f, "the agent card names `{url}`, on a host agents may not use"),
            CardError::Malformed(why) => write!(f, "the agent card is malformed: {why}"),
        }
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Binding {
    JsonRpc,
    Rest,
    Grpc,
}

fn binding(name: Option<&str>) -> Result<Binding, CardError> {
    match name.map(str::to_ascii_uppercase).as_deref() {
        None | Some("JSONRPC") => Ok(Binding::JsonRpc),
        Some("HTTP+JSON" | "REST" | "HTTP_JSON") => Ok(Binding::Rest),
        Some("GRPC") => Ok(Binding::Grpc),
        Some(other) => Err(CardError::Malformed(format!("unknown protocol binding `{other}`"))),
    }
}

/// Rewrite `card` in place for clients of `gateway` (the agent's base on the gateway, e.g.
/// `https://gw.example/a2a/research`, no trailing slash): a JSON-RPC interface becomes
/// `{gateway}/`, a REST interface `{gateway}`. Returns the agent's own addresses.
pub fn rewrite_card(card: &mut Value, gateway: &str, allowed: &AllowedHosts) -> Result<Interfaces, CardError> {
    let Some(fields) = card.as_object_mut() else {
        return Err(CardError::Malformed("not a JSON object".to_owned()));
    };
    let mut found = Interfaces::default();
    // 1.0: supportedInterfaces.
    if let Some(list) = fields.get_mut("supportedInterfaces") {
        rewrite_list(list, "protocolBinding", gateway, allowed, &mut found)?;
    }
    // 0.3: the preferred transport's `url`, then additionalInterfaces.
    if let Some(url) = fields.get("url") {
        let url = url.as_str().ok_or_else(|| CardError::Malformed("`url` is not a string".to_owned()))?;
        let preferred = binding(fields.get("preferredTransport").and_then(Value::as_str))?;
        let agent = checked(url, allowed)?;
        note(&mut found, preferred, agent);
        if let Some(public) = public(preferred, gateway) {
            fields.insert("url".to_owned(), Value::String(public));
        } else {
            // The preferred transport is gRPC: point `url` at the JSON-RPC endpoint instead.
            fields.insert("url".to_owned(), Value::String(format!("{gateway}/")));
            fields.insert("preferredTransport".to_owned(), Value::String("JSONRPC".to_owned()));
        }
    }
    if let Some(list) = fields.get_mut("additionalInterfaces") {
        rewrite_list(list, "transport", gateway, allowed, &mut found)?;
    }
    Ok(found)
}

/// Each interface of a list checked and rewritten; gRPC ones taken out.
fn rewrite_list(
    list: &mut Value,
    binding_field: &str,
    gateway: &str,
    allowed: &AllowedHosts,
    found: &mut Interfaces,
) -> Result<(), CardError> {
    let Some(items) = list.as_array_mut() else {
        return Err(CardError::Malformed("an interface list is not a list".to_owned()));
    };
    let mut kept = Vec::with_capacity(items.len());
    for mut item in items.drain(..) {
        let Some(fields) = item.as_object_mut() else {
            return Err(CardError::Malformed("an interface is not an object".to_owned()));
        };
        let url = fields.get("url").and_then(Value::as_str);
        let url = url.ok_or_else(|| CardError::Malformed("an interface has no `url`".to_owned()))?;
        let agent = checked(url, allowed)?;
        let which = binding(fields.get(binding_field).and_then(Value::as_str))?;
        note(found, which, agent);
        if let Some(public) = public(which, gateway) {
            fields.insert("url".to_owned(), Value::String(public));
            kept.push(item);
        }
    }
    *items = kept;
    Ok(())
}

fn checked(url: &str, allowed: &AllowedHosts) -> Result<Uri, CardError> {
    let uri = parse_url(url).map_err(CardError::Malformed)?;
    if !allowed.allows(&uri) {
        return Err(CardError::HostRefused(url.to_owned()));
    }
    Ok(uri)
}

/// The first address of each binding is the one used.
fn note(found: &mut Interfaces, which: Binding, agent: Uri) {
    match which {
        Binding::JsonRpc => found.jsonrpc = found.jsonrpc.take().or(Some(agent)),
        Binding::Rest => found.rest = found.rest.take().or(Some(agent)),
        Binding::Grpc => {}
    }
}

/// The gateway's address for a binding; None for gRPC (not relayed).
fn public(which: Binding, gateway: &str) -> Option<String> {
    match which {
        Binding::JsonRpc => Some(format!("{gateway}/")),
        Binding::Rest => Some(gateway.to_owned()),
        Binding::Grpc => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn allowed() -> AllowedHosts {
        AllowedHosts::new(["agent.internal:8000"])
    }

    #[test]
    fn a_1_0_card_names_only_the_gateway() {
        let mut card = json!({
            "name": "research",
            "supportedInterfaces": [
                {"url": "http://agent.internal:8000/rpc", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
                {"url": "http://agent.internal:8000/rest", "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"},
                {"url": "http://agent.internal:8000", "protocolBinding": "GRPC", "protocolVersion": "1.0"},
            ],
        });
        let found = rewrite_card(&mut card, "https://gw/a2a/research", &allowed()).unwrap();
        assert_eq!(found.jsonrpc.unwrap().to_string(), "http://agent.internal:8000/rpc");
        assert_eq!(found.rest.unwrap().to_string(), "http://agent.internal:8000/rest");
        let urls: Vec<&str> =
            card["supportedInterfaces"].as_array().unwrap().iter().map(|i| i["url"].as_str().unwrap()).collect();
        assert_eq!(urls, ["https://gw/a2a/research/", "https://gw/a2a/research"]);
        assert!(!card.to_string().contains("agent.internal"));
    }

    #[test]
    fn a_0_3_card_names_only_the_gateway() {
        let mut card = json!({
            "name": "research", "url": "http://agent.internal:8000/", "preferredTransport": "JSONRPC",
            "additionalInterfaces": [{"url": "http://agent.internal:8000/", "transport": "JSONRPC"},
                                     {"url": "http://agent.internal:8000/v1", "transport": "HTTP+JSON"}],
        });
        let found = rewrite_card(&mut card, "http://gw:1/a2a/r", &allowed()).unwrap();
        assert_eq!(found.rest.unwrap().path(), "/v1");
        assert_eq!(card["url"], "http://gw:1/a2a/r/");
        assert_eq!(card["additionalInterfaces"][1]["url"], "http://gw:1/a2a/r");
        assert!(!card.to_string().contains("agent.internal"));
    }

    #[test]
    fn a_card_naming_another_host_is_refused() {
        for url in ["http://169.254.169.254/latest/", "http://agent.internal:8001/", "file:///etc/passwd"] {
            let mut card = json!({"supportedInterfaces": [{"url": url, "protocolBinding": "JSONRPC"}]});
            assert!(rewrite_card(&mut card, "http://gw/a2a/x", &allowed()).is_err(), "{url}");
            let mut card = json!({"url": url});
            assert!(rewrite_card(&mut card, "http://gw/a2a/x", &allowed()).is_err(), "{url}");
        }
        let mut card = json!({"supportedInterfaces": [{"url": "http://169.254.169.254/", "protocolBinding": "GRPC"}]});
        assert!(matches!(rewrite_card(&mut card, "http://gw/a2a/x", &allowed()), Err(CardError::HostRefused(_))));
    }
}
