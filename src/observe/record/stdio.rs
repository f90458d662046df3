//! An MCP session over stdio as `wrap --record` writes it: JSONL, one object per line.
//!
//! - line 1, the header: `{"witness_recording":1,"transport":"stdio","started_unix_ms":..,
//!   "command":[..],"max_bytes":..,"answer_bytes":..}`;
//! - each message the client sent: `{"t":<s since start>,"from":"client","msg":<JSON-RPC, masked>}`;
//! - each answer to a client's request: `{"t":..,"from":"server","id":..,"outcome":"ok"|"error"|
//!   "tool_error","code":..,"message":..,"result":..,"result_cut":..}`;
//! - a message the server sent on its own: `{"t":..,"from":"server","msg":..}` (kept for a reader,
//!   ignored by replay);
//! - last, on a cap or at the end: `{"t":..,"note":"..","not_kept":<messages>}`.
//!
//! The reader tolerates a cut last line (witness was killed mid-write) and counts lines it could
//! not read rather than refusing the file.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The recording format's version, in the header.
pub const VERSION: u32 = 1;

/// The first line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Header {
    pub witness_recording: u32,
    pub transport: String,
    pub started_unix_ms: u64,
    /// The server's command line, masked.
    #[serde(default)]
    pub command: Vec<String>,
    /// The cap on the file's size (bytes), after which messages are counted, not kept.
    pub max_bytes: u64,
    /// An answer's result longer than this (serialized) is not kept (`result_cut`).
    pub answer_bytes: u64,
}

/// A message the client sent, as sent (masked), at `t` seconds since the session's start.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClientMessage {
    pub t: f64,
    /// Always `"client"`.
    pub from: String,
    pub msg: Value,
}

impl ClientMessage {
    pub fn new(t: f64, msg: Value) -> Self {
        Self {
            t,
            from: "client".into(),
            msg,
        }
    }

    /// The JSON-RPC method (`None` for an answer the client sent to a server's request).
    pub fn method(&self) -> Option<&str> {
        self.msg.get("method").and_then(Value::as_str)
    }

    /// The request's id (`None` for a notification).
    pub fn id(&self) -> Option<&Value> {
        self.msg.get("id").filter(|_| self.method().is_some())
    }

    /// The tool's name for `tools/call`.
    pub fn tool(&self) -> Option<&str> {
        (self.method() == Some("tools/call"))
            .then(|| self.msg.pointer("/params/name").and_then(Value::as_str))
            .flatten()
    }
}

/// How the server answered a client's request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AnswerOutcome {
    /// A `result` (for `tools/call`, one without `isError: true`).
    Ok,
    /// A JSON-RPC `error` (its `code` and `message` are kept).
    Error,
    /// A `tools/call` result with `isError: true`.
    ToolError,
}

/// The server's answer to the client's request `id`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Answer {
    pub t: f64,
    /// Always `"server"`.
    pub from: String,
    /// The request's id, as sent.
    pub id: Value,
    pub outcome: AnswerOutcome,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The result as sent (masked); absent for an error or when cut.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// The result was longer than the header's `answer_bytes` and was not kept.
    #[serde(default)]
    pub result_cut: bool,
}

/// A message the server sent on its own (a notification, or a request to the client).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServerMessage {
    pub t: f64,
    /// Always `"server"`.
    pub from: String,
    pub msg: Value,
}

/// The last line: what was not kept (a cap was reached) or how the session ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Note {
    pub t: f64,
    pub note: String,
    #[serde(default)]
    pub not_kept: u64,
}

/// One line after the header.
#[derive(Debug, Clone, PartialEq)]
pub enum Entry {
    Client(ClientMessage),
    Answer(Answer),
    Server(ServerMessage),
    Note(Note),
}

impl Entry {
    /// Reads one line after the header (`None`: not a line of this format).
    pub fn parse(line: &str) -> Option<Entry> {
        let v: Value = serde_json::from_str(line).ok()?;
        if v.get("note").is_some() {
            return serde_json::from_value(v).ok().map(Entry::Note);
        }
        match v.get("from").and_then(Value::as_str)? {
            "client" => serde_json::from_value(v).ok().map(Entry::Client),
            "server" if v.get("outcome").is_some() => {
                serde_json::from_value(v).ok().map(Entry::Answer)
            }
            "server" => serde_json::from_value(v).ok().map(Entry::Server),
            _ => None,
        }
    }
}

/// A whole stdio recording, read back.
#[derive(Debug, Clone, PartialEq)]
pub struct StdioRecording {
    pub header: Header,
    /// What the client sent, in the order sent (offsets never decrease).
    pub client: Vec<ClientMessage>,
    /// The server's answers, in the order answered.
    pub answers: Vec<Answer>,
    /// What the server sent on its own.
    pub server: Vec<ServerMessage>,
    /// The last note line, if any (none when witness was killed before writing it).
    pub note: Option<Note>,
    /// Lines that could not be read (a line cut by a kill, or not of this format).
    pub unreadable: u64,
}

impl StdioRecording {
    /// Reads the lines of a recording whose first line is `header`.
    pub fn read(header: Header, lines: impl Iterator<Item = String>) -> Self {
        let mut r = StdioRecording {
            header,
            client: Vec::new(),
            answers: Vec::new(),
            server: Vec::new(),
            note: None,
            unreadable: 0,
        };
        for line in lines {
            if line.trim().is_empty() {
                continue;
            }
            match Entry::parse(&line) {
                Some(Entry::Client(c)) => r.client.push(c),
                Some(Entry::Answer(a)) => r.answers.push(a),
                Some(Entry::Server(s)) => r.server.push(s),
                Some(Entry::Note(n)) => r.note = Some(n),
                None => r.unreadable += 1,
            }
        }
        r
    }

    /// The recorded answer to the client's request `id` (the first one, if several).
    pub fn answer_to(&self, id: &Value) -> Option<&Answer> {
        self.answers.iter().find(|a| a.id == *id)
    }

    /// The client's requests (messages with a method and an id), in the order sent.
    pub fn requests(&self) -> impl Iterator<Item = &ClientMessage> {
        self.client.iter().filter(|c| c.id().is_some())
    }
}

/// One line, as written: compact JSON and a newline.
pub fn line<T: Serialize>(item: &T) -> Vec<u8> {
    let mut v = serde_json::to_vec(item).expect("recording lines serialize");
    v.push(b'\n');
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_recording_reads_back_and_a_cut_last_line_is_counted_not_refused() {
        let header = Header {
            witness_recording: VERSION,
            transport: "stdio".into(),
            started_unix_ms: 1,
            command: vec!["srv".into()],
            max_bytes: 100,
            answer_bytes: 10,
        };
        let lines = [
            String::from_utf8(line(&ClientMessage::new(
                0.1,
                json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo"}}),
            )))
            .unwrap(),
            r#"{"t":0.2,"from":"server","id":1,"outcome":"tool_error","result":{"isError":true}}"#
                .into(),
            r#"{"t":0.3,"from":"server","id":2,"outcome":"error","code":-32601,"message":"no"}"#
                .into(),
            r#"{"t":0.3,"from":"server","msg":{"method":"notifications/progress"}}"#.into(),
            r#"{"t":0.4,"note":"cap","not_kept":3}"#.into(),
            r#"{"t":0.5,"from":"client","msg":{"id"#.into(),
        ];
        let r = StdioRecording::read(header, lines.into_iter());
        assert_eq!(r.client.len(), 1);
        assert_eq!(r.client[0].tool(), Some("echo"));
        assert_eq!(r.requests().count(), 1);
        assert_eq!(
            r.answer_to(&json!(1)).unwrap().outcome,
            AnswerOutcome::ToolError
        );
        assert_eq!(r.answer_to(&json!(2)).unwrap().code, Some(-32601));
        assert_eq!(r.server.len(), 1);
        assert_eq!(r.note.as_ref().unwrap().not_kept, 3);
        assert_eq!(r.unreadable, 1);
    }
}
