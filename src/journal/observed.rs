//! How an exchange witness observed (a real client's, passing through `wrap`) is named in the
//! journal: its group says where it passed and what it was, so analysis and views can tell observed
//! calls from a load level or a soak kind, and group them per method or tool, knowing only the
//! journal's types.
//!
//! ```text
//! stdio tools/call echo              a client's tool call, over wrap's stdio relay
//! stdio resources/read               any other request of the client's
//! stdio <- sampling/createMessage    a request the server sent the client (the other way)
//! http tools/call echo               an MCP call read from streamable HTTP through the proxy
//! http GET /api/items                a plain HTTP request through the proxy (path, no query)
//! ```

/// How a detail of the proxy's own answer ends ("…; witness's proxy answered 502"): the words are
/// witness's, not the server's, and every view keeps them.
pub const PROXY_ANSWERED: &str = "witness's proxy answered";

/// Where an observed exchange passed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Via {
    /// wrap's stdio relay (MCP JSON-RPC over the server's stdin and stdout).
    Stdio,
    /// wrap's recording HTTP proxy (`--proxy`).
    Http,
}

impl Via {
    pub fn as_str(self) -> &'static str {
        match self {
            Via::Stdio => "stdio",
            Via::Http => "http",
        }
    }
}

/// The parts of an observed exchange's group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observed {
    pub via: Via,
    /// The server asked the client (MCP sampling, elicitation, roots): the other way round.
    pub to_client: bool,
    /// The JSON-RPC method, or the HTTP method.
    pub method: String,
    /// The tool of a `tools/call`, or the path of a plain HTTP request.
    pub name: Option<String>,
}

/// The marker of a request going the other way (server to client).
const TO_CLIENT: &str = "<-";

impl Observed {
    /// The group string the journal keeps.
    pub fn group(&self) -> String {
        let mut g = String::from(self.via.as_str());
        if self.to_client {
            g.push(' ');
            g.push_str(TO_CLIENT);
        }
        g.push(' ');
        g.push_str(&one_word(&self.method));
        if let Some(n) = &self.name {
            g.push(' ');
            g.push_str(&one_word(n));
        }
        g
    }

    /// Reads a group back; None for a group that is not an observed exchange's (a load level, a soak
    /// kind).
    pub fn parse(group: &str) -> Option<Observed> {
        let mut words = group.split(' ');
        let via = match words.next()? {
            "stdio" => Via::Stdio,
            "http" => Via::Http,
            _ => return None,
        };
        let mut method = words.next()?;
        let to_client = method == TO_CLIENT;
        if to_client {
            method = words.next()?;
        }
        if method.is_empty() {
            return None;
        }
        let name = words.next().map(str::to_string);
        if words.next().is_some() {
            return None;
        }
        Some(Observed {
            via,
            to_client,
            method: method.to_string(),
            name,
        })
    }

    /// As a person reads it: "tools/call echo", "server → client: sampling/createMessage".
    pub fn label(&self) -> String {
        let what = match &self.name {
            Some(n) => format!("{} {n}", self.method),
            None => self.method.clone(),
        };
        if self.to_client {
            format!("server → client: {what}")
        } else {
            what
        }
    }
}

/// A method, tool or path as one word of the group: spaces (which no method, tool name or request
/// path has) become `_`, and an empty one is `-`.
fn one_word(s: &str) -> String {
    if s.is_empty() {
        return "-".into();
    }
    s.replace([' ', '\t', '\n', '\r'], "_")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_read_back_as_they_were_made() {
        let cases = [
            (
                Via::Stdio,
                false,
                "tools/call",
                Some("echo"),
                "stdio tools/call echo",
            ),
            (
                Via::Stdio,
                false,
                "resources/read",
                None,
                "stdio resources/read",
            ),
            (
                Via::Stdio,
                true,
                "sampling/createMessage",
                None,
                "stdio <- sampling/createMessage",
            ),
            (
                Via::Http,
                false,
                "GET",
                Some("/api/items"),
                "http GET /api/items",
            ),
            (
                Via::Http,
                false,
                "tools/call",
                Some("a tool"),
                "http tools/call a_tool",
            ),
        ];
        for (via, to_client, method, name, group) in cases {
            let o = Observed {
                via,
                to_client,
                method: method.into(),
                name: name.map(Into::into),
            };
            assert_eq!(o.group(), group);
            let back = Observed::parse(group).unwrap();
            assert_eq!((back.via, back.to_client), (via, to_client));
            assert_eq!(back.method, method);
        }
    }

    #[test]
    fn load_levels_and_soak_kinds_are_not_observed_groups() {
        for g in [
            "level0",
            "L4",
            "embed",
            "chat",
            "stdio",
            "http",
            "stdio a b c",
            "",
        ] {
            assert_eq!(Observed::parse(g), None, "{g}");
        }
    }
}
