//! Configuration parsing.

use std::collections::HashMap;

use switchyard_gateway::Config;

/// Any bytes as a configuration file (with two variables set for `${...}` references): a clear
/// error or a configuration, never a panic or a hang. A configuration that parses also parses
/// again from the same text (loading is a function of the text).
pub fn config_parsing(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let env: HashMap<String, String> =
        [("KEY", "sk-test"), ("PORT", "8080")].into_iter().map(|(k, v)| (k.to_owned(), v.to_owned())).collect();
    let first = Config::from_yaml(&text, &env);
    let second = Config::from_yaml(&text, &env);
    assert_eq!(first.is_ok(), second.is_ok(), "the same text loads the same way");
    if let Err(e) = first {
        assert!(!e.to_string().is_empty(), "an error says what is wrong");
    }
}
