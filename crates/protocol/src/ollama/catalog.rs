//! What the gateway answers Ollama clients about models: `GET /api/tags`, `GET /api/ps` and
//! `GET /api/version`, built from the gateway's own model catalogue.

use crate::json::push_str;

/// Times the gateway cannot know (when a model was modified) are reported as the epoch.
const UNKNOWN_TIME: &str = "1970-01-01T00:00:00Z";

fn write_models(out: &mut Vec<u8>, names: &[&str], extra: &[u8]) {
    out.extend_from_slice(b"{\"models\":[");
    for (i, name) in names.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(b"{\"name\":");
        push_str(out, name);
        out.extend_from_slice(b",\"model\":");
        push_str(out, name);
        out.extend_from_slice(b",\"modified_at\":\"");
        out.extend_from_slice(UNKNOWN_TIME.as_bytes());
        out.extend_from_slice(b"\",\"size\":0,\"digest\":\"\",\"details\":{\"parent_model\":\"\",\"format\":\"\",\"family\":\"\",\"families\":[],\"parameter_size\":\"\",\"quantization_level\":\"\"}");
        out.extend_from_slice(extra);
        out.push(b'}');
    }
    out.extend_from_slice(b"]}");
}

/// `GET /api/tags`: the models the gateway serves.
pub fn encode_tags(names: &[&str]) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 + names.len() * 256);
    write_models(&mut out, names, b"");
    out
}

/// `GET /api/ps`: models loaded now; the gateway reports those a healthy backend serves.
pub fn encode_ps(names: &[&str]) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 + names.len() * 256);
    write_models(&mut out, names, b",\"expires_at\":\"1970-01-01T00:00:00Z\",\"size_vram\":0");
    out
}

/// `GET /api/version`.
pub fn encode_version(version: &str) -> Vec<u8> {
    let mut out = b"{\"version\":".to_vec();
    push_str(&mut out, version);
    out.push(b'}');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_parse_as_the_gateway_reads_them() {
        let tags: super::super::TagList = serde_json::from_slice(&encode_tags(&["a:1b", "b"])).unwrap();
        assert_eq!(tags.models.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(), ["a:1b", "b"]);
        let ps: serde_json::Value = serde_json::from_slice(&encode_ps(&["a"])).unwrap();
        assert_eq!(ps["models"][0]["size_vram"], 0);
        assert_eq!(encode_version("0.1.0"), br#"{"version":"0.1.0"}"#);
    }
}
