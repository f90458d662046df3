//! The run's secret values (credential headers, a plan's secrets), known once before anything is
//! written, so that every artifact and every line witness prints can be scrubbed of them.
//!
//! One process runs one witness command, so the set is process-wide: `main` scrubs its last error
//! line with it, the journal scrubs every line, the log reader scrubs a server's line before it is
//! cut, and files are created 0600 when there is anything in it.

use std::borrow::Cow;
use std::sync::OnceLock;

static SECRETS: OnceLock<Vec<String>> = OnceLock::new();

/// What replaces a secret.
pub const MASK: &str = "***";

/// Values shorter than this are refused as secrets: scrubbing them would mangle ordinary text and
/// hide nothing.
pub const MIN_LEN: usize = 4;

/// Sets the run's secrets (once; longest first, so a value containing another is masked whole).
/// A second call with other values is an error: what was already printed was scrubbed of the first.
pub fn install(values: &[String]) -> anyhow::Result<()> {
    let mut v: Vec<String> = values.to_vec();
    if let Some(short) = v.iter().find(|s| s.len() < MIN_LEN) {
        anyhow::bail!(
            "a secret of {} bytes is too short to keep out of witness's output (at least {MIN_LEN})",
            short.len()
        );
    }
    v.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
    v.dedup();
    if SECRETS.get() == Some(&v) {
        return Ok(());
    }
    SECRETS
        .set(v)
        .map_err(|_| anyhow::anyhow!("the run's secrets were already set"))
}

/// The run's secret values, longest first.
pub fn values() -> &'static [String] {
    SECRETS.get().map(|v| v.as_slice()).unwrap_or(&[])
}

/// Whether the run carries secrets (its files are then created 0600).
pub fn carried() -> bool {
    !values().is_empty()
}

/// Header names whose values are credentials.
pub fn is_credential(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    matches!(
        n.as_str(),
        "authorization" | "proxy-authorization" | "cookie"
    ) || [
        "api-key", "apikey", "api_key", "token", "secret", "session", "password", "auth",
    ]
    .iter()
    .any(|w| n.contains(w))
}

/// `text` with every secret value replaced by `***`.
pub fn scrub(text: &str) -> Cow<'_, str> {
    scrub_with(text, values())
}

/// `text` scrubbed of `secrets` (longest first).
pub fn scrub_with<'a>(text: &'a str, secrets: &[String]) -> Cow<'a, str> {
    let mut out = Cow::Borrowed(text);
    for s in secrets {
        if out.contains(s.as_str()) {
            out = Cow::Owned(out.replace(s.as_str(), MASK));
        }
    }
    out
}

/// A line cut at a length limit: scrubbed whole first, then cut at `max` bytes, and a tail that is
/// the start of a secret (the cut fell inside it) masked too, so no secret's first bytes survive the
/// cut. Returns the bytes kept and whether anything was cut.
pub fn scrub_and_cut(line: &[u8], max: usize, secrets: &[Vec<u8>]) -> (Vec<u8>, bool) {
    let mut v = line.to_vec();
    for s in secrets {
        if s.is_empty() || memchr::memmem::find(&v, s).is_none() {
            continue;
        }
        let mut out = Vec::with_capacity(v.len());
        let mut last = 0;
        for at in memchr::memmem::find_iter(&v, s) {
            if at < last {
                continue;
            }
            out.extend_from_slice(&v[last..at]);
            out.extend_from_slice(MASK.as_bytes());
            last = at + s.len();
        }
        out.extend_from_slice(&v[last..]);
        v = out;
    }
    if v.len() <= max {
        return (v, false);
    }
    v.truncate(max);
    // The longest tail of the kept bytes that begins some secret: it is that secret's first bytes.
    let tail = secrets
        .iter()
        .map(|s| {
            (1..s.len().min(v.len() + 1))
                .rev()
                .find(|&k| v.ends_with(&s[..k]))
                .unwrap_or(0)
        })
        .max()
        .unwrap_or(0);
    if tail > 0 {
        v.truncate(v.len() - tail);
        v.extend_from_slice(MASK.as_bytes());
    }
    (v, true)
}

/// Scrubs a byte stream passed through in chunks (a server's output with `--show-output`): a
/// secret split across two chunks is still masked, because the last bytes that could begin one are
/// held back until the next chunk (or the end) shows whether they do. Occurrences are found with
/// one multi-substring search per chunk (leftmost, then longest: the longest-first order of
/// [`scrub_with`]), not a comparison at every byte.
pub struct StreamScrubber {
    secrets: Vec<Vec<u8>>,
    finder: Option<aho_corasick::AhoCorasick>,
    held: Vec<u8>,
}

impl StreamScrubber {
    pub fn new(secrets: &[String]) -> Self {
        let secrets: Vec<Vec<u8>> = secrets
            .iter()
            .filter(|s| !s.is_empty())
            .map(|s| s.as_bytes().to_vec())
            .collect();
        let finder = (!secrets.is_empty()).then(|| {
            aho_corasick::AhoCorasick::builder()
                .match_kind(aho_corasick::MatchKind::LeftmostLongest)
                .build(&secrets)
                .expect("secrets are plain strings")
        });
        Self {
            secrets,
            finder,
            held: Vec::new(),
        }
    }

    /// The bytes of `chunk` (after what was held) that are safe to write now, scrubbed.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<u8> {
        let Some(finder) = &self.finder else {
            return chunk.to_vec();
        };
        self.held.extend_from_slice(chunk);
        let buf = std::mem::take(&mut self.held);
        // The longest end of the buffer that begins some secret (and is not all of it): it may be
        // a secret cut by the chunk's end, held back until the next chunk says.
        let longest = self.secrets.iter().map(Vec::len).max().unwrap_or(0);
        let hold = (buf.len().saturating_sub(longest - 1)..buf.len())
            .find(|&i| {
                self.secrets
                    .iter()
                    .any(|s| s.len() > buf.len() - i && s.starts_with(&buf[i..]))
            })
            .unwrap_or(buf.len());
        let mut out = Vec::with_capacity(buf.len());
        let mut last = 0;
        for m in finder.find_iter(&buf[..]) {
            if m.start() >= hold {
                break;
            }
            out.extend_from_slice(&buf[last..m.start()]);
            out.extend_from_slice(MASK.as_bytes());
            last = m.end();
        }
        // A masked secret that ran into the held end: what follows it is held instead (at most
        // the longest secret's length).
        let keep = hold.max(last);
        out.extend_from_slice(&buf[last..keep]);
        self.held = buf[keep..].to_vec();
        out
    }

    /// The end of the stream: what was held back is no cut secret, but may hold whole ones.
    pub fn finish(&mut self) -> Vec<u8> {
        let held = std::mem::take(&mut self.held);
        match &self.finder {
            Some(f) => {
                let mut out = Vec::with_capacity(held.len());
                f.replace_all_with_bytes(&held, &mut out, |_, _, dst| {
                    dst.extend_from_slice(MASK.as_bytes());
                    true
                });
                out
            }
            None => held,
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_stream_split_inside_a_secret_is_still_masked() {
        let mut s = StreamScrubber::new(&["hunter22".to_string()]);
        let mut out = s.push(b"pass=hun");
        assert_eq!(out, b"pass=", "the possible start is held back");
        out.extend(s.push(b"ter22 ok\nhu"));
        out.extend(s.push(b"m"));
        out.extend(s.finish());
        assert_eq!(String::from_utf8(out).unwrap(), "pass=*** ok\nhum");
    }

    #[test]
    fn a_stream_scrubbed_in_any_chunks_is_the_whole_scrubbed_at_once() {
        // Secrets that overlap, share prefixes and contain each other, in random text cut into
        // random chunks: the stream's output is the whole text scrubbed at once (longest first),
        // and no secret survives.
        use rand::{Rng, SeedableRng};
        let secrets: Vec<String> = ["abcdefgh", "cdef", "abab", "xyz-token"]
            .map(String::from)
            .to_vec();
        let mut sorted = secrets.clone();
        sorted.sort_by_key(|s| std::cmp::Reverse(s.len()));
        let mut rng = rand::rngs::StdRng::seed_from_u64(14);
        for _ in 0..300 {
            let alphabet = b"abcdefghxyz-tokn \n";
            let len = rng.gen_range(0..200);
            let text: Vec<u8> = (0..len)
                .map(|_| alphabet[rng.gen_range(0..alphabet.len())])
                .collect();
            let mut s = StreamScrubber::new(&sorted);
            let mut out = Vec::new();
            let mut rest = &text[..];
            while !rest.is_empty() {
                let n = rng.gen_range(1..=rest.len().min(12));
                out.extend(s.push(&rest[..n]));
                rest = &rest[n..];
            }
            out.extend(s.finish());
            let whole = String::from_utf8(text.clone()).unwrap();
            let got = String::from_utf8(out).unwrap();
            for secret in &secrets {
                assert!(
                    !got.contains(secret.as_str()),
                    "{secret} in {got:?} from {whole:?}"
                );
            }
            let mut once = StreamScrubber::new(&sorted);
            let mut want = once.push(&text);
            want.extend(once.finish());
            assert_eq!(got, String::from_utf8(want).unwrap(), "from {whole:?}");
        }
    }

    use super::*;

    #[test]
    fn scrubbing_masks_every_occurrence_longest_first() {
        let s = vec!["token-123456".to_string(), "token".to_string()];
        assert_eq!(scrub_with("a token-123456 b token c", &s), "a *** b *** c");
        assert!(matches!(scrub_with("nothing here", &s), Cow::Borrowed(_)));
    }

    #[test]
    fn a_cut_never_leaves_a_secrets_first_bytes() {
        let secret = b"s3cret-VALUE-0123".to_vec();
        let secrets = vec![secret.clone()];
        // The secret straddles the limit: cut first, its first 5 bytes would survive; masked
        // first, the mask is what is kept.
        let mut line = vec![b'x'; 20];
        line.extend_from_slice(&secret);
        line.extend_from_slice(&[b'y'; 40]);
        let (kept, cut) = scrub_and_cut(&line, 25, &secrets);
        assert!(cut);
        let text = String::from_utf8(kept).unwrap();
        assert!(!text.contains("s3cre"), "{text}");
        assert_eq!(text, format!("{}***yy", "x".repeat(20)));
        // Whole inside the limit: masked, then cut.
        let (kept, _) = scrub_and_cut(&line, 30, &secrets);
        assert_eq!(
            String::from_utf8(kept).unwrap(),
            format!("{}***yyyyyyy", "x".repeat(20))
        );
        // A cut that ends in a prefix of a secret not in the line at all is masked too.
        let (kept, _) = scrub_and_cut(b"abc s3cr tail", 8, &secrets);
        assert_eq!(kept, b"abc ***");
        let (kept, cut) = scrub_and_cut(b"short", 100, &secrets);
        assert_eq!((kept.as_slice(), cut), (&b"short"[..], false));
    }
}
