//! The console's static files, embedded in the binary: looked up by name, each with its content type
//! and a gzip copy made once on first use (the UI is served to a few operators, never on the hot path).
//!
//! The files are hand-written HTML, CSS and JavaScript with no build step (no Node toolchain needed),
//! plus uPlot for charts, vendored minified with its licence (`assets/uPlot-LICENSE`). The JavaScript
//! is native ES modules the browser loads as they are: `app.js` is the entry, `lib/` the shared pieces
//! (DOM helpers, formatting, the API client, charts, view components, the router) and `pages/` one
//! module per page. A new file needs a line below (and a module a `modulepreload` in `index.html`):
//! the tests say so.

use std::io::Write;
use std::sync::OnceLock;

/// One embedded file.
pub struct Asset {
    pub name: &'static str,
    pub bytes: &'static [u8],
    pub content_type: &'static str,
    gzipped: OnceLock<Vec<u8>>,
    etag: OnceLock<String>,
}

impl Asset {
    /// The file gzipped (compressed the first time it is asked for).
    pub fn gzipped(&self) -> &[u8] {
        self.gzipped.get_or_init(|| gzip(self.bytes))
    }

    /// A validator for `ETag`/`If-None-Match` (computed once): the files change only with the binary.
    pub fn etag(&self) -> &str {
        self.etag.get_or_init(|| {
            // FNV-1a: stable across runs and builds of the same files, and enough to tell versions apart.
            let hash = self
                .bytes
                .iter()
                .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3));
            format!("\"{hash:016x}\"")
        })
    }
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::with_capacity(bytes.len() / 3), flate2::Compression::best());
    // Writing to a Vec cannot fail; an empty answer would only mean the plain file is served.
    if encoder.write_all(bytes).is_err() {
        return Vec::new();
    }
    encoder.finish().unwrap_or_default()
}

macro_rules! assets {
    ($($name:literal => $type:literal),* $(,)?) => {
        static ASSETS: [Asset; [$($name),*].len()] = [
            $(Asset {
                name: $name,
                bytes: include_bytes!(concat!("../assets/", $name)),
                content_type: $type,
                gzipped: OnceLock::new(),
                etag: OnceLock::new(),
            }),*
        ];
    };
}

assets! {
    "index.html" => "text/html; charset=utf-8",
    "login.html" => "text/html; charset=utf-8",
    "app.js" => "text/javascript; charset=utf-8",
    "lib/dom.js" => "text/javascript; charset=utf-8",
    "lib/format.js" => "text/javascript; charset=utf-8",
    "lib/api.js" => "text/javascript; charset=utf-8",
    "lib/chart.js" => "text/javascript; charset=utf-8",
    "lib/components.js" => "text/javascript; charset=utf-8",
    "lib/router.js" => "text/javascript; charset=utf-8",
    "lib/session.js" => "text/javascript; charset=utf-8",
    "lib/forms.js" => "text/javascript; charset=utf-8",
    "pages/overview.js" => "text/javascript; charset=utf-8",
    "pages/usage.js" => "text/javascript; charset=utf-8",
    "pages/requests.js" => "text/javascript; charset=utf-8",
    "pages/keys.js" => "text/javascript; charset=utf-8",
    "pages/teams.js" => "text/javascript; charset=utf-8",
    "pages/users.js" => "text/javascript; charset=utf-8",
    "pages/backends.js" => "text/javascript; charset=utf-8",
    "pages/mcp.js" => "text/javascript; charset=utf-8",
    "pages/cache.js" => "text/javascript; charset=utf-8",
    "pages/experiments.js" => "text/javascript; charset=utf-8",
    "pages/playground.js" => "text/javascript; charset=utf-8",
    "pages/audit.js" => "text/javascript; charset=utf-8",
    "app.css" => "text/css; charset=utf-8",
    "uplot.iife.min.js" => "text/javascript; charset=utf-8",
    "uplot.min.css" => "text/css; charset=utf-8",
    "uPlot-LICENSE" => "text/plain; charset=utf-8",
    "favicon.svg" => "image/svg+xml",
}

/// The file called `name` (`app.js`, `pages/keys.js`, `index.html`…), if the console has one.
pub fn asset(name: &str) -> Option<&'static Asset> {
    ASSETS.iter().find(|a| a.name == name)
}

/// Every embedded file.
pub fn all() -> &'static [Asset] {
    &ASSETS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_whole_ui_is_small() {
        let gzipped: usize = all().iter().map(|a| a.gzipped().len()).sum();
        assert!(gzipped > 0);
        assert!(gzipped < 200 * 1024, "the console is {gzipped} bytes gzipped; the budget is 200 KB");
    }

    #[test]
    fn lookups_and_types() {
        assert_eq!(asset("app.js").map(|a| a.content_type), Some("text/javascript; charset=utf-8"));
        assert!(asset("../Cargo.toml").is_none());
        let a = asset("index.html").map(Asset::etag);
        assert_eq!(a, asset("index.html").map(Asset::etag));
        assert_ne!(a, asset("login.html").map(Asset::etag));
        assert!(asset("pages/keys.js").is_some_and(|a| a.content_type.starts_with("text/javascript")));
    }

    /// Every file under `assets/` is embedded (a module left out would be a 404 in the browser), and
    /// every module is preloaded by `index.html` and small enough to read (600 lines at most).
    #[test]
    fn every_file_is_embedded_and_every_module_preloaded() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("assets");
        let mut dirs = vec![root.clone()];
        let mut files = Vec::new();
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).unwrap().map(Result::unwrap) {
                let path = entry.path();
                if entry.file_name().to_string_lossy().starts_with('.') {
                    continue; // an editor's swap file, say
                } else if path.is_dir() {
                    dirs.push(path);
                } else {
                    files.push(path.strip_prefix(&root).unwrap().to_string_lossy().replace('\\', "/"));
                }
            }
        }
        files.sort();
        let mut embedded: Vec<String> = all().iter().map(|a| a.name.to_owned()).collect();
        embedded.sort();
        assert_eq!(files, embedded, "the files in assets/ and the ones embedded differ");

        let index = String::from_utf8_lossy(asset("index.html").map(|a| a.bytes).unwrap_or_default()).into_owned();
        for a in all().iter().filter(|a| a.name.ends_with(".js") && a.name != "uplot.iife.min.js") {
            let lines = a.bytes.iter().filter(|b| **b == b'\n').count();
            assert!(lines <= 600, "{} has {lines} lines; split it (the budget is 600)", a.name);
            if a.name != "app.js" {
                let preload = format!(r#"<link rel="modulepreload" href="/ui/assets/{}">"#, a.name);
                assert!(index.contains(&preload), "index.html does not preload {}", a.name);
            }
        }
    }
}
