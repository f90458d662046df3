//! Reading the text: a mistake is reported with its line, column, key and how to fix it.

use super::*;

/// A mistake in the plan, located (boxed: it travels in every `Result` of the resolver).
#[derive(Debug, Clone, PartialEq)]
pub struct PlanError(pub Box<Located>);

impl std::ops::Deref for PlanError {
    type Target = Located;
    fn deref(&self) -> &Located {
        &self.0
    }
}

impl std::ops::DerefMut for PlanError {
    fn deref_mut(&mut self) -> &mut Located {
        &mut self.0
    }
}

/// Where and what: line and column (1-based), the key, what is wrong, how to fix it.
#[derive(Debug, Clone, PartialEq)]
pub struct Located {
    pub file: PathBuf,
    pub line: usize,
    pub column: usize,
    /// The key as a dotted path ("drivers.burst.gap"), when it can be told.
    pub key: Option<String>,
    pub message: String,
    pub fix: Option<String>,
    /// The offending line of the plan.
    pub text: String,
}

impl std::fmt::Display for PlanError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "plan {}: line {}, column {}",
            self.file.display(),
            self.line,
            self.column
        )?;
        if let Some(k) = &self.key {
            write!(f, ", key `{k}`")?;
        }
        write!(f, ": {}", self.message)?;
        if !self.text.is_empty() {
            write!(f, "\n  {:>4} | {}", self.line, self.text)?;
        }
        if let Some(x) = &self.fix {
            write!(f, "\n  fix: {x}")?;
        }
        Ok(())
    }
}

impl std::error::Error for PlanError {}

/// Locates a byte span of the plan: line, column, the line's text and the dotted key there.
pub fn locate(src: &str, file: &Path, span: Range<usize>, message: &str) -> PlanError {
    let at = span.start.min(src.len());
    let line_start = src[..at].rfind('\n').map(|i| i + 1).unwrap_or(0);
    let line_no = src[..line_start].matches('\n').count() + 1;
    let text = src[line_start..]
        .split('\n')
        .next()
        .unwrap_or("")
        .trim_end_matches('\r');
    let column = src[line_start..at].chars().count() + 1;
    PlanError(Box::new(Located {
        file: file.to_owned(),
        line: line_no,
        column,
        key: key_at(src, line_start, text),
        message: message.trim().to_string(),
        fix: None,
        text: text.trim().to_string(),
    }))
}

/// The dotted key a line sets, prefixed by the table it is in.
pub(super) fn key_at(src: &str, line_start: usize, text: &str) -> Option<String> {
    let header = |l: &str| -> Option<String> {
        let l = l.trim();
        let inner = l
            .strip_prefix("[[")
            .and_then(|r| r.strip_suffix("]]"))
            .or_else(|| l.strip_prefix('[').and_then(|r| r.strip_suffix(']')))?;
        Some(inner.trim().replace(['"', ' '], ""))
    };
    if let Some(h) = header(text) {
        return Some(h);
    }
    let table = src[..line_start].lines().rev().find_map(header);
    let key = text
        .split_once('=')
        .map(|(k, _)| k.trim().trim_matches('"').to_string())
        .filter(|k| {
            !k.is_empty()
                && k.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "_-.\" ".contains(c))
        });
    match (table, key) {
        (Some(t), Some(k)) => Some(format!("{t}.{k}")),
        (None, Some(k)) => Some(k),
        (Some(t), None) => Some(t),
        (None, None) => None,
    }
}

/// The fix that goes with a message, when one is known.
pub(super) fn fix_for(message: &str) -> Option<String> {
    if message.contains("unknown field") {
        Some("check the spelling against the fields listed; examples/plans/ has a plan that uses every one".into())
    } else if message.contains("missing field") {
        Some("add it to this table".into())
    } else if message.contains("duration") {
        Some("write durations as strings with a unit: \"250ms\", \"2s\", \"1m30s\"".into())
    } else if message.contains("range") {
        Some("write ranges as [min, max] with min ≤ max".into())
    } else if message.contains("unknown variant") {
        Some("use one of the values listed".into())
    } else {
        None
    }
}

/// Parses the plan's text; every error names its line, column and key.
pub fn parse(src: &str, file: &Path) -> Result<PlanFile, PlanError> {
    toml::from_str::<PlanFile>(src).map_err(|e| {
        let mut err = locate(src, file, e.span().unwrap_or(0..0), e.message());
        err.fix = fix_for(e.message());
        err
    })
}
