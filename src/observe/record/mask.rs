//! What a recording never holds: the values of JSON keys that name a secret (`token`, `password`,
//! `api_key`, … matched case-insensitively, also as a part of a key like `access_token` or
//! `clientSecret`), credential headers, and the run's secret values (`secrets.rs`).
//!
//! A key is split into words (at `_`, `-`, `.`, spaces and camelCase humps); it names a secret when
//! some run of its consecutive words, joined, equals a secret name with its separators removed. So
//! `access_token`, `accessToken` and `X-Api-Key` are masked, and `max_tokens` or `author` are not.

use serde_json::Value;

use crate::secrets::MASK;

/// The names masked by default; `--record-mask-key NAME` adds to them.
pub const DEFAULT_KEYS: &[&str] = &[
    "token",
    "password",
    "passwd",
    "secret",
    "api_key",
    "authorization",
    "auth",
    "credential",
    "credentials",
    "cookie",
    "private_key",
    "access_key",
];

/// Masks JSON values, header values and argv words by key names and the run's secret values.
#[derive(Debug, Clone)]
pub struct Masker {
    /// Secret names, lowercased, separators removed.
    names: Vec<String>,
    /// The run's secret values, longest first.
    secrets: Vec<String>,
}

impl Default for Masker {
    fn default() -> Self {
        Self::new(&[], crate::secrets::values())
    }
}

impl Masker {
    /// The default names plus `extra`, and `secrets` (values scrubbed wherever they appear).
    pub fn new(extra: &[String], secrets: &[String]) -> Self {
        let mut names: Vec<String> = DEFAULT_KEYS
            .iter()
            .map(|s| s.to_string())
            .chain(extra.iter().cloned())
            .map(|n| words(&n).concat())
            .filter(|n| !n.is_empty())
            .collect();
        names.sort();
        names.dedup();
        Self {
            names,
            secrets: secrets.to_vec(),
        }
    }

    /// Whether a JSON key (or header, or query parameter) names a secret.
    pub fn is_secret_key(&self, key: &str) -> bool {
        let w = words(key);
        for i in 0..w.len() {
            let mut joined = String::new();
            for part in &w[i..] {
                joined.push_str(part);
                if self.names.contains(&joined) {
                    return true;
                }
                if !self.names.iter().any(|n| n.starts_with(joined.as_str())) {
                    break;
                }
            }
        }
        false
    }

    /// Whether an HTTP header's value is a credential: the proxy's rule (Authorization, Cookie,
    /// anything naming a key, token, secret, session, password or auth) or a secret key name.
    pub fn is_credential_header(&self, name: &str) -> bool {
        crate::secrets::is_credential(name) || self.is_secret_key(name)
    }

    /// `v` with every secret key's value replaced by `"***"` and every string scrubbed of the run's
    /// secret values (keys too).
    pub fn value(&self, v: &mut Value) {
        match v {
            Value::Object(map) => {
                let keys: Vec<String> = map.keys().cloned().collect();
                for k in keys {
                    let scrubbed = self.text(&k);
                    let mut val = map.remove(&k).unwrap_or(Value::Null);
                    if self.is_secret_key(&k) {
                        val = Value::String(MASK.into());
                    } else {
                        self.value(&mut val);
                    }
                    map.insert(scrubbed, val);
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|i| self.value(i)),
            Value::String(s) => {
                if let std::borrow::Cow::Owned(o) = self.text(s).into() {
                    *s = o;
                }
            }
            _ => {}
        }
    }

    /// `text` scrubbed of the run's secret values.
    pub fn text(&self, text: &str) -> String {
        crate::secrets::scrub_with(text, &self.secrets).into_owned()
    }

    /// A body as text, masked: JSON has its secret keys masked; anything else (a form, plain
    /// text) has its `name=value` pairs with a secret name masked; both are scrubbed.
    pub fn body(&self, text: &str) -> String {
        if let Ok(mut v) = serde_json::from_str::<Value>(text) {
            let before = v.clone();
            self.value(&mut v);
            // Unchanged, it stays as sent (its keys' order and spacing too).
            return if v == before {
                text.to_string()
            } else {
                v.to_string()
            };
        }
        self.pairs(text, '&')
    }

    /// `a=1&token=x` with the values of secret names masked (a query string, a form body).
    pub fn pairs(&self, text: &str, sep: char) -> String {
        let masked: Vec<String> = text
            .split(sep)
            .map(|pair| match pair.split_once('=') {
                Some((k, _)) if self.is_secret_key(&percent_decode(k)) => format!("{k}={MASK}"),
                _ => pair.to_string(),
            })
            .collect();
        self.text(&masked.join(&sep.to_string()))
    }

    /// A URL with its query's secret values masked, scrubbed.
    pub fn url(&self, url: &str) -> String {
        match url.split_once('?') {
            Some((base, query)) => format!("{}?{}", self.text(base), self.pairs(query, '&')),
            None => self.text(url),
        }
    }

    /// A command line: `--token X`, `--token=X` and `TOKEN=X` lose X; everything is scrubbed.
    pub fn argv(&self, argv: &[String]) -> Vec<String> {
        let mut out = Vec::with_capacity(argv.len());
        let mut next_secret = false;
        for a in argv {
            if next_secret {
                out.push(MASK.to_string());
                next_secret = false;
                continue;
            }
            let flag = a.trim_start_matches('-');
            if let Some((k, _)) = flag.split_once('=') {
                if self.is_secret_key(k) {
                    out.push(format!("{}={MASK}", &a[..a.len() - flag.len() + k.len()]));
                    continue;
                }
            } else if a.starts_with('-') && flag.len() > 1 && self.is_secret_key(flag) {
                next_secret = true;
            }
            out.push(self.text(a));
        }
        out
    }
}

/// A key's words, lowercased: split at non-alphanumerics and camelCase humps (`APIKey` → api, key).
fn words(key: &str) -> Vec<String> {
    let chars: Vec<char> = key.chars().collect();
    let mut out = Vec::new();
    let mut cur = String::new();
    for (i, &c) in chars.iter().enumerate() {
        if !c.is_alphanumeric() {
            if !cur.is_empty() {
                out.push(std::mem::take(&mut cur));
            }
            continue;
        }
        if c.is_uppercase() && !cur.is_empty() {
            let prev = chars[i - 1];
            let next_lower = chars.get(i + 1).is_some_and(|n| n.is_lowercase());
            if prev.is_lowercase() || prev.is_numeric() || (prev.is_uppercase() && next_lower) {
                out.push(std::mem::take(&mut cur));
            }
        }
        cur.extend(c.to_lowercase());
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// `%XX` sequences and `+` decoded, for matching a query's key names only.
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let hex = |c: u8| (c as char).to_digit(16);
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' if i + 2 < b.len() => match (hex(b[i + 1]), hex(b[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push((h * 16 + l) as u8);
                    i += 3;
                    continue;
                }
                _ => out.push(b'%'),
            },
            b'+' => out.push(b' '),
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keys_naming_a_secret_are_matched_as_words_in_any_case() {
        let m = Masker::new(&["pin".into()], &[]);
        for k in [
            "token",
            "access_token",
            "accessToken",
            "X-Api-Key",
            "APIKey",
            "apikey",
            "api_key",
            "Authorization",
            "newPassword",
            "client_secret",
            "PIN",
            "user.pin",
        ] {
            assert!(m.is_secret_key(k), "{k} is a secret key");
        }
        for k in [
            "max_tokens",
            "author",
            "name",
            "text",
            "secretary",
            "spin",
            "ms",
        ] {
            assert!(!m.is_secret_key(k), "{k} is not a secret key");
        }
    }

    #[test]
    fn values_of_secret_keys_are_masked_at_any_depth_and_secrets_scrubbed() {
        let m = Masker::new(&[], &["hunter22".into()]);
        let mut v = json!({"params": {"name": "login", "arguments": {
            "user": "ann", "password": "pw1", "nested": [{"api_key": 7}],
            "note": "my hunter22 pass"}}});
        m.value(&mut v);
        let s = v.to_string();
        assert!(!s.contains("pw1") && !s.contains("hunter22"), "{s}");
        assert_eq!(v["params"]["arguments"]["password"], "***");
        assert_eq!(v["params"]["arguments"]["nested"][0]["api_key"], "***");
        assert_eq!(v["params"]["arguments"]["user"], "ann");
        assert_eq!(v["params"]["arguments"]["note"], "my *** pass");
    }

    #[test]
    fn bodies_queries_and_argv_lose_their_secrets() {
        let m = Masker::new(&[], &[]);
        assert_eq!(m.body(r#"{"password":"x1"}"#), r#"{"password":"***"}"#);
        assert_eq!(m.body(r#"{"b": 1, "a": 2}"#), r#"{"b": 1, "a": 2}"#);
        assert_eq!(m.body("user=a&password=x1"), "user=a&password=***");
        assert_eq!(
            m.url("http://h/p?q=1&access_token=abc"),
            "http://h/p?q=1&access_token=***"
        );
        let argv: Vec<String> = ["srv", "--token", "t1", "--api-key=k1", "--port", "80"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(
            m.argv(&argv),
            ["srv", "--token", "***", "--api-key=***", "--port", "80"]
        );
    }
}
