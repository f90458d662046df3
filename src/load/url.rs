//! A URL the user gave (`--url`, `--health-url`, `--base-url`, a plan's `base_url`): an http:// or
//! https:// URL with a host, or words that name the fix (a missing scheme is the usual slip:
//! `127.0.0.1:8080/call`).

use hyper::Uri;

/// `text`, the value of `what` (a flag, or a plan's key), as an http:// or https:// URI with a host;
/// otherwise why not, naming `what` and the URL to write instead.
pub fn http_url(what: &str, text: &str) -> Result<Uri, String> {
    if text.starts_with('/') {
        return Err(format!(
            "{what} {text} is a path, not a URL: give the whole URL, e.g. http://127.0.0.1:8080{text}"
        ));
    }
    if !text.contains("://") {
        // `http:/host`, `http:host`, `//host`: the scheme half written; the example has it whole.
        let (scheme, rest) = match text.split_once(':') {
            Some((s, r)) if s.eq_ignore_ascii_case("http") || s.eq_ignore_ascii_case("https") => {
                (s.to_ascii_lowercase(), r.trim_start_matches('/'))
            }
            _ => ("http".to_string(), text.trim_start_matches('/')),
        };
        return Err(format!(
            "{what} {text} has no scheme: add http:// (or https://), e.g. {scheme}://{rest}"
        ));
    }
    let uri: Uri = text
        .parse()
        .map_err(|e| format!("{what} {text:?} is not a URL: {e}"))?;
    match uri.scheme_str() {
        Some("http" | "https") => {}
        Some(other) => {
            let rest = text.split_once("://").map_or(text, |(_, r)| r);
            return Err(format!(
                "{what} {text}: witness speaks http:// and https://, not {other}://; e.g. http://{rest}"
            ));
        }
        None => {
            return Err(format!(
                "{what} {text} has no scheme: add http:// (or https://), e.g. http://{text}"
            ))
        }
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(format!(
            "{what} {text} has no host: e.g. {}://127.0.0.1:8080/",
            uri.scheme_str().unwrap_or("http")
        ));
    }
    Ok(uri)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_without_its_scheme_names_the_one_to_add() {
        let e = http_url("--url", "127.0.0.1:8080/call").unwrap_err();
        assert_eq!(
            e,
            "--url 127.0.0.1:8080/call has no scheme: add http:// (or https://), e.g. http://127.0.0.1:8080/call"
        );
        let e = http_url("--url", "localhost:8080").unwrap_err();
        assert!(e.ends_with("e.g. http://localhost:8080"), "{e}");
        let e = http_url("--health-url", "https:/127.0.0.1:8443/h").unwrap_err();
        assert!(e.ends_with("e.g. https://127.0.0.1:8443/h"), "{e}");
        let e = http_url("--url", "/call").unwrap_err();
        assert!(
            e.contains("is a path") && e.contains("http://127.0.0.1:8080/call"),
            "{e}"
        );
        let e = http_url("--url", "ftp://127.0.0.1/x").unwrap_err();
        assert!(
            e.contains("not ftp://") && e.contains("http://127.0.0.1/x"),
            "{e}"
        );
        let e = http_url("--url", "http:///x").unwrap_err();
        assert!(e.starts_with("--url \"http:///x\" is not a URL"), "{e}");
        let ok = http_url("--url", "https://127.0.0.1:8443/call").unwrap();
        assert_eq!(ok.port_u16(), Some(8443));
    }
}
