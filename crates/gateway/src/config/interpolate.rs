//! `${VAR}` and `${VAR:-default}` in config string values; `$${` is a literal `${`.
//! Applied to parsed YAML scalars (never to raw text), so a value cannot inject YAML structure.

/// Where variables come from: the process environment in production, a map in tests.
pub trait Env {
    fn var(&self, name: &str) -> Option<String>;
}

pub struct ProcessEnv;

impl Env for ProcessEnv {
    fn var(&self, name: &str) -> Option<String> {
        std::env::var(name).ok()
    }
}

impl Env for std::collections::HashMap<String, String> {
    fn var(&self, name: &str) -> Option<String> {
        self.get(name).cloned()
    }
}

/// Expand every reference in `text`. An unset variable without a default is an error naming it.
pub fn interpolate(text: &str, env: &dyn Env) -> Result<String, String> {
    if !text.contains('$') {
        return Ok(text.to_owned());
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(pos) = rest.find('$') {
        out.push_str(&rest[..pos]);
        let after = &rest[pos..];
        if let Some(tail) = after.strip_prefix("$${") {
            out.push_str("${");
            rest = tail;
        } else if let Some(tail) = after.strip_prefix("${") {
            let end = tail.find('}').ok_or_else(|| format!("unclosed `${{` in `{text}`"))?;
            let expr = &tail[..end];
            let (name, default) = match expr.split_once(":-") {
                Some((n, d)) => (n, Some(d)),
                None => (expr, None),
            };
            if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Err(format!("`${{{expr}}}` is not a valid variable reference"));
            }
            match (env.var(name), default) {
                (Some(v), Some(d)) if v.is_empty() => out.push_str(d),
                (Some(v), _) => out.push_str(&v),
                (None, Some(d)) => out.push_str(d),
                (None, None) => {
                    return Err(format!(
                        "environment variable {name} is not set (use ${{{name}:-default}} for a default)"
                    ))
                }
            }
            rest = &tail[end + 1..];
        } else {
            out.push('$');
            rest = &after[1..];
        }
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env() -> HashMap<String, String> {
        HashMap::from([("KEY".to_owned(), "sekrit".to_owned()), ("EMPTY".to_owned(), String::new())])
    }

    #[test]
    fn expands() {
        let e = env();
        assert_eq!(interpolate("Bearer ${KEY}", &e).unwrap(), "Bearer sekrit");
        assert_eq!(interpolate("${MISSING:-dflt}", &e).unwrap(), "dflt");
        assert_eq!(interpolate("${EMPTY:-dflt}", &e).unwrap(), "dflt");
        assert_eq!(interpolate("${MISSING:-}", &e).unwrap(), "");
        assert_eq!(interpolate("cost $5 $${KEY}", &e).unwrap(), "cost $5 ${KEY}");
        assert_eq!(interpolate("no refs", &e).unwrap(), "no refs");
    }

    #[test]
    fn errors() {
        let e = env();
        assert!(interpolate("${MISSING}", &e).unwrap_err().contains("MISSING"));
        assert!(interpolate("${KEY", &e).is_err());
        assert!(interpolate("${bad name}", &e).is_err());
    }
}
