//! Ollama native wire types the gateway reads: the model list from `GET /api/tags`.

use serde::Deserialize;

#[derive(Debug, Deserialize, Clone, PartialEq)]
pub struct TagList {
    #[serde(default)]
    pub models: Vec<Tag>,
}

#[derive(Debug, Deserialize, Clone, PartialEq)]
pub struct Tag {
    /// Ollama sends both `name` and `model`; older versions only `name`.
    pub name: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_tags() {
        let t: TagList =
            serde_json::from_str(r#"{"models":[{"name":"llama3.2:1b","model":"llama3.2:1b","size":1}]}"#).unwrap();
        assert_eq!(t.models[0].name, "llama3.2:1b");
    }
}
