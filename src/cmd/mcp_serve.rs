//! `witness mcp serve`: witness's runs, their stories and (when allowed) bounded load, behind an
//! MCP server of its own over stdio (rmcp), for the agent beside a developer. Read-only by default:
//! the tools read the journal folder's runs; `load` exists only with `--allow-load`, aims at
//! loopback addresses only, runs at most `--max-duration`, and starts a server only when its
//! command was named with `--allow-command` when this server started.
//!
//! Tools (each with an input schema, an output schema, structured content and a short text):
//! `runs`, `story`, `explain`, `compare`, `load`. Resources: each run's journal
//! (`witness://runs/ID/journal.jsonl`) and HTML report (`witness://runs/ID/report.html`), listed in
//! pages, a live run's updates sent to subscribers.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListResourcesResult,
    ListToolsResult, PaginatedRequestParams, ProgressNotificationParam, ReadResourceRequestParams,
    ReadResourceResponse, ReadResourceResult, Resource, ResourceContents, ServerCapabilities,
    ServerConfig, SubscribeRequestParams, Tool, UnsubscribeRequestParams,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::{json, Map, Value};

use crate::cli::McpServeArgs;
use crate::report::agent;

/// Runs a listing or a page of resources gives at most.
const PAGE: usize = 20;
/// A run's verdict in the `runs` listing is read (by analysing its journal) up to this size.
const VERDICT_READ_MAX: u64 = 4 << 20;
/// A journal larger than this is not sent whole as a resource (story and explain read it).
const JOURNAL_RESOURCE_MAX: u64 = 8 << 20;

#[derive(Clone)]
struct Agent {
    allow_load: bool,
    allow_command: Vec<String>,
    max_duration: Duration,
    dir: PathBuf,
    subscribed: Arc<Mutex<HashSet<String>>>,
}

pub async fn run(args: McpServeArgs) -> anyhow::Result<i32> {
    let agent = Agent {
        allow_load: args.allow_load,
        allow_command: args.allow_command,
        max_duration: args.max_duration,
        dir: crate::files::state_dir(),
        subscribed: Arc::new(Mutex::new(HashSet::new())),
    };
    crate::errln!(
        "witness: serving witness's runs over MCP on stdio (journal folder {}; load {})",
        agent.dir.display(),
        if agent.allow_load {
            "allowed, loopback only"
        } else {
            "not allowed: --allow-load"
        }
    );
    let running = agent
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| anyhow::anyhow!("MCP over stdio: {e}"))?;
    running
        .waiting()
        .await
        .map_err(|e| anyhow::anyhow!("MCP over stdio: {e}"))?;
    Ok(0)
}

fn object(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

const RUN_ARG: &str =
    "A run: its id (from `runs`), `last` (the latest run), or `last:N` (the N-th latest).";

fn tool(name: &str, description: String, input: Value, output: Value) -> Tool {
    let mut t = Tool::new(name.to_string(), description, object(input));
    t.output_schema = Some(Arc::new(object(output)));
    t
}

fn latency_schema() -> Value {
    json!({"type": ["object", "null"], "properties": {
        "count": {"type": "integer"}, "p50_s": {"type": "number"}, "p95_s": {"type": "number"},
        "p99_s": {"type": "number"}, "max_s": {"type": "number"},
        "too_few_for": {"type": "array", "items": {"type": "string"}}}})
}

fn story_schema() -> Value {
    let suspicion = json!({"type": "object", "required": ["kind", "timer_s", "evidence"], "properties": {
        "kind": {"type": "string"}, "subject": {"type": "string"}, "timer_s": {"type": "number"},
        "timer": {"type": "string"}, "seconds": {"type": "number"}, "t_s": {"type": "number"},
        "pid": {"type": ["integer", "null"]}, "group": {"type": ["string", "null"]},
        "evidence": {"type": "string"}, "named_by": {"type": "string"}}});
    json!({"type": "object",
        "required": ["run", "mode", "verdict", "reasons", "levels", "suspicions", "exits", "lifecycle", "failures", "more"],
        "properties": {
            "run": {"type": "string"}, "mode": {"type": "string"},
            "command": {"type": "array", "items": {"type": "string"}},
            "started_at": {"type": "string"}, "live": {"type": "boolean"},
            "partial": {"type": ["string", "null"]}, "verdict": {"type": "string"},
            "reasons": {"type": "array", "items": {"type": "string"}},
            "witness_exit_code": {"type": ["integer", "null"]}, "restarts": {"type": "integer"},
            "levels": {"type": "array", "items": {"type": "object", "required": ["name", "ok", "failed"], "properties": {
                "name": {"type": "string"}, "verdict": {"type": ["string", "null"]},
                "ok": {"type": "integer"}, "failed": {"type": "integer"}, "rejected": {"type": "integer"},
                "max_s": {"type": ["number", "null"]}, "latency": latency_schema(),
                "restarted": {"type": "boolean"}, "died": {"type": ["string", "null"]},
                "reasons": {"type": "array", "items": {"type": "string"}}}}},
            "calls": {"type": "array", "items": {"type": "object"}},
            "suspicions": {"type": "array", "items": suspicion},
            "exits": {"type": "array", "items": {"type": "object", "required": ["pid"], "properties": {
                "pid": {"type": "integer"}, "at_s": {"type": ["number", "null"]}, "age_s": {"type": ["number", "null"]},
                "status": {"type": ["integer", "null"]}, "signal": {"type": ["string", "null"]},
                "meaning": {"type": ["string", "null"]}, "asked_by_witness": {"type": "boolean"},
                "oom_killed": {"type": "boolean"}, "last_line": {"type": ["string", "null"]}}}},
            "lifecycle": {"type": "array", "items": {"type": "object", "required": ["t_s", "event", "what"], "properties": {
                "t_s": {"type": "number"}, "event": {"type": "string"}, "pid": {"type": ["integer", "null"]}, "what": {"type": "string"}}}},
            "failures": {"type": "array", "items": {"type": "object", "required": ["at", "outcome"]}},
            "thresholds": {"type": "array"},
            "more": {"type": "object", "additionalProperties": {"type": "integer"}}}})
}

fn tools(a: &Agent) -> Vec<Tool> {
    let mut out = vec![
        tool(
            "runs",
            format!("Recent witness runs, newest first (at most {PAGE} a call): id, kind (wrap, load, soak, replay), command, start, how it ended, verdict, name, whether it is still running. Read-only: the journal folder's index."),
            json!({"type": "object", "properties": {
                "command": {"type": "string", "description": "Only runs whose command contains this text."},
                "state": {"type": "string", "enum": ["any", "live", "ended"], "description": "live: still running; ended: finished or cut off. Default any."},
                "limit": {"type": "integer", "minimum": 1, "maximum": PAGE, "description": "How many (default 10)."}}}),
            json!({"type": "object", "required": ["runs", "total", "folder"], "properties": {
                "folder": {"type": "string"}, "total": {"type": "integer"},
                "runs": {"type": "array", "items": {"type": "object", "required": ["id", "mode", "command", "started_at", "ended", "live"], "properties": {
                    "id": {"type": "string"}, "mode": {"type": "string"}, "command": {"type": "string"},
                    "started_at": {"type": "string"}, "ended": {"type": "string"}, "live": {"type": "boolean"},
                    "exit_code": {"type": ["integer", "null"]}, "verdict": {"type": ["string", "null"]},
                    "name": {"type": ["string", "null"]}, "journal": {"type": "string"}}}}}}),
        ),
        tool(
            "story",
            format!("One run's report as data: its verdict and reasons, levels (or soak kinds) with counts and figures (percentiles from too few requests listed in too_few_for), calls a client made through wrap, suspicions (timers) with their evidence, exits, the lifecycle, failures with the server's words. Each part holds at most {} items (`more` counts the rest); `detail` names one part to get up to {} of it.", agent::PART, agent::DETAIL),
            json!({"type": "object", "required": ["run"], "properties": {
                "run": {"type": "string", "description": RUN_ARG},
                "detail": {"type": "string", "enum": agent::PARTS, "description": "A part to give more of."}}}),
            story_schema(),
        ),
        tool(
            "explain",
            format!("One request or call of a run and everything its journal ties to it: outcome, duration, phases (witness's own wait apart), what the server said, what happened meanwhile (exits, restarts, log lines), timers suspected. Pick by `request` (its id, as story's failures give it), a relayed call by `rpc_id` (its JSON-RPC id), or `which`: slowest_ok or failed, optionally `at` one level (\"8\", \"level 8\") or kind of call (\"tools/call search\"). At most {} exchanges.", agent::PART),
            json!({"type": "object", "required": ["run"], "properties": {
                "run": {"type": "string", "description": RUN_ARG},
                "request": {"type": "integer", "minimum": 0, "description": "The request's id (witness's, as story's failures give it)."},
                "rpc_id": {"type": ["integer", "string"], "description": "A call a client made through wrap, by its JSON-RPC id (with `at` naming its kind of call when ids repeat)."},
                "which": {"type": "string", "enum": ["slowest_ok", "failed"]},
                "at": {"type": "string", "description": "A level (\"8\") or a kind of call (\"tools/call search\")."},
                "limit": {"type": "integer", "minimum": 1, "maximum": agent::PART}}}),
            json!({"type": "object", "required": ["run", "exchanges", "found"], "properties": {
                "run": {"type": "string"}, "found": {"type": "integer"},
                "exchanges": {"type": "array", "items": {"type": "object", "required": ["id", "at", "ok", "outcome", "duration_s"], "properties": {
                    "id": {"type": "integer"}, "rpc_id": {"type": ["string", "null"]},
                    "at": {"type": "string"}, "ok": {"type": "boolean"},
                    "outcome": {"type": "string"}, "status": {"type": ["integer", "null"]},
                    "start_s": {"type": "number"}, "end_s": {"type": "number"},
                    "duration_s": {"type": "number"}, "took": {"type": "string"},
                    "said": {"type": ["string", "null"]}, "phases": {"type": "object"},
                    "meanwhile": {"type": ["string", "null"]},
                    "lifecycle": {"type": "array"}, "suspicions": {"type": "array"}}}}}}),
        ),
        tool(
            "compare",
            "Two runs side by side, as `witness compare`: per level (or speed, soak kind, kind of call) whether latency and failures changed beyond noise (a Mann–Whitney U test over every ok duration, 95 % intervals per percentile, Fisher's exact test), and what happened differently: timers that appeared or went with their evidence, restarts, exits, new failures.".into(),
            json!({"type": "object", "required": ["base", "current"], "properties": {
                "base": {"type": "string", "description": RUN_ARG},
                "current": {"type": "string", "description": RUN_ARG},
                "noise": {"type": "number", "minimum": 0.01, "maximum": 1.0, "description": "A change smaller than this share of BASE's figure is noise (default 0.10)."}}}),
            json!({"type": "object", "required": ["verdict", "groups", "story", "worse", "better"], "properties": {
                "verdict": {"type": "string"}, "groups": {"type": "array"}, "story": {"type": "array"},
                "worse": {"type": "array", "items": {"type": "string"}},
                "better": {"type": "array", "items": {"type": "string"}},
                "test": {"type": "string"}, "noise": {"type": "number"}}}),
        ),
    ];
    let commands = if a.allow_command.is_empty() {
        "none (a URL of a server already running only)".to_string()
    } else {
        a.allow_command
            .iter()
            .map(|c| format!("`{c}`"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    out.push(tool(
        "load",
        format!(
            "Run a bounded `witness load` against a loopback URL (127.0.0.1, ::1 or localhost; nothing else), a concurrency ladder of at most 8 levels of up to 64 workers, {} s in all at most; or call an MCP tool over streamable HTTP (`mcp_tool`). Progress notifications as each level ends; the run's story when it is done (its id is in the first progress message). {}Commands it may start (exactly as written): {commands}.",
            a.max_duration.as_secs(),
            if a.allow_load { "" } else { "OFF: this server was started without --allow-load, so every call is refused. " }
        ),
        json!({"type": "object", "required": ["url"], "properties": {
            "url": {"type": "string", "description": "http://127.0.0.1:PORT/PATH (with mcp_tool: the streamable HTTP endpoint)."},
            "levels": {"type": "array", "items": {"type": "integer", "minimum": 1, "maximum": 64}, "maxItems": 8, "description": "Workers per level (default [1, 4])."},
            "duration_s": {"type": "number", "minimum": 0.1, "description": "How long each level sends (default 2)."},
            "mcp_tool": {"type": "string", "description": "Call this MCP tool instead of HTTP requests."},
            "command": {"type": "string", "description": "A server command to start first: one named with --allow-command."}}}),
        story_schema(),
    ));
    out
}

fn done(v: Value, text: String) -> CallToolResponse {
    let mut r = CallToolResult::structured(v);
    r.content = vec![ContentBlock::text(text)];
    r.into()
}

fn refused(why: String) -> CallToolResponse {
    CallToolResult::error(vec![ContentBlock::text(why)]).into()
}

fn arg<'a>(args: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    args.get(key).filter(|v| !v.is_null())
}

impl Agent {
    /// A run named by id, `last` or `last:N`: only runs of the journal folder's index, never an
    /// arbitrary path.
    fn resolve(&self, spec: &str) -> Result<PathBuf, String> {
        let runs = crate::runs::recent(&self.dir);
        if runs.is_empty() {
            return Err(format!(
                "no run is recorded in {} yet: run witness wrap, load or soak first",
                self.dir.display()
            ));
        }
        let n = match spec {
            "last" => Some(1),
            s => s
                .strip_prefix("last:")
                .and_then(|k| k.parse::<usize>().ok()),
        };
        if let Some(n) = n {
            return runs
                .get(n.max(1) - 1)
                .cloned()
                .ok_or_else(|| format!("{spec}: only {} runs are recorded", runs.len()));
        }
        runs.iter()
            .find(|p| id(p) == spec || p.to_str() == Some(spec))
            .cloned()
            .ok_or_else(|| {
                format!("no run {spec:?}: give an id from the `runs` tool, `last` or `last:N`")
            })
    }

    fn runs(&self, args: &Map<String, Value>) -> Value {
        let filter = arg(args, "command").and_then(|v| v.as_str()).unwrap_or("");
        let state = arg(args, "state").and_then(|v| v.as_str()).unwrap_or("any");
        let limit = arg(args, "limit")
            .and_then(|v| v.as_u64())
            .unwrap_or(10)
            .clamp(1, PAGE as u64) as usize;
        let all = crate::runs::recent(&self.dir);
        let mut out = Vec::new();
        for p in all.iter() {
            if out.len() >= limit {
                break;
            }
            let s = crate::runs::summary(p);
            let Some(h) = &s.header else { continue };
            let command = crate::runs::command_words(h);
            if !filter.is_empty() && !command.contains(filter) {
                continue;
            }
            let live = crate::runs::live(p).is_some();
            if (state == "live" && !live) || (state == "ended" && live) {
                continue;
            }
            let mut exit_code = exit_of(&s.ended);
            // A load's or soak's verdict is decided by analysis, not written at its end: read it
            // from journals small enough to analyse at once (the rest say how they ended).
            let small = std::fs::metadata(p).is_ok_and(|m| m.len() <= VERDICT_READ_MAX);
            if exit_code.is_none() && !live && small && h.mode != "wrap" {
                if let Ok(file) = crate::sources::journal::JournalFile::open(p) {
                    let a = crate::analyze::analyze(&file);
                    exit_code = a.exit_code;
                    if let Some(v) = a
                        .load
                        .as_ref()
                        .map(|l| l.verdict.clone())
                        .or_else(|| a.soak.as_ref().map(|s| s.verdict.clone()))
                    {
                        out.push(row(p, h, &command, &s.ended, live, exit_code, Some(v)));
                        continue;
                    }
                }
            }
            let verdict = match (h.mode.as_str(), exit_code) {
                (_, None) => None,
                ("wrap" | "merged" | "mcp", Some(c)) => Some(format!("exit {c}")),
                (_, Some(0)) => Some("pass".to_string()),
                (_, Some(1)) => Some("fail".to_string()),
                (_, Some(3)) => Some("refused".to_string()),
                (_, Some(130)) => Some("interrupted".to_string()),
                (_, Some(c)) => Some(format!("exit {c}")),
            };
            out.push(row(p, h, &command, &s.ended, live, exit_code, verdict));
        }
        json!({"folder": self.dir.display().to_string(), "total": all.len(), "runs": out})
    }

    fn analysed(&self, spec: &str) -> Result<(PathBuf, crate::analyze::Analysis), String> {
        let path = self.resolve(spec)?;
        let file =
            crate::sources::journal::JournalFile::open(&path).map_err(|e| format!("{e:#}"))?;
        let mut a = crate::analyze::analyze(&file);
        if let Some(pid) = crate::runs::live(&path) {
            crate::analyze::still_running(&mut a, pid);
        }
        Ok((path, a))
    }

    fn explain(&self, args: &Map<String, Value>) -> Result<Value, String> {
        use crate::journal::{Event, Outcome};
        let spec = arg(args, "run")
            .and_then(|v| v.as_str())
            .ok_or("`run` is required")?;
        let (path, a) = self.analysed(spec)?;
        let request = arg(args, "request").and_then(|v| v.as_u64());
        // A relayed call's JSON-RPC id: 7 or "7" for the number, "abc" for the string.
        let rpc = arg(args, "rpc_id").cloned();
        let rpc_matches = |stored: &Option<String>| match (&rpc, stored) {
            (Some(want), Some(have)) => {
                serde_json::from_str::<Value>(have).ok().as_ref() == Some(want)
                    || want.as_str().is_some_and(|w| w == have)
            }
            _ => false,
        };
        let which = arg(args, "which").and_then(|v| v.as_str());
        let at = arg(args, "at").and_then(|v| v.as_str()).map(|s| {
            if s.chars().next().is_some_and(|c| c.is_ascii_digit()) {
                format!("level {s}")
            } else {
                s.to_string()
            }
        });
        let limit = arg(args, "limit")
            .and_then(|v| v.as_u64())
            .unwrap_or(5)
            .clamp(1, agent::PART as u64) as usize;
        if request.is_none() && rpc.is_none() && which.is_none() {
            return Err("name the exchange: `request` (witness's id), `rpc_id` (a relayed call's JSON-RPC id) or `which` (slowest_ok or failed)".into());
        }
        let file =
            crate::sources::journal::JournalFile::open(&path).map_err(|e| format!("{e:#}"))?;
        use crate::journal::Replay;
        let mut found = Vec::new();
        let mut slowest: Option<crate::journal::Record> = None;
        let mut matched = 0u64;
        for r in file.pass() {
            let Event::Request {
                id,
                group,
                duration_s,
                outcome,
                rpc_id,
                ..
            } = &r.event
            else {
                continue;
            };
            if at.as_ref().is_some_and(|w| agent::place(&a, group) != *w) {
                continue;
            }
            if rpc.is_some() {
                // The last call with that id (a client may reuse ids across sessions).
                if rpc_matches(rpc_id) {
                    matched += 1;
                    found.clear();
                    found.push(r);
                }
                continue;
            }
            let ok = matches!(outcome, Outcome::Ok);
            match (request, which) {
                (Some(want), _) if *id == want => {
                    matched += 1;
                    found.push(r);
                    break;
                }
                (Some(_), _) => {}
                (None, Some("slowest_ok")) if ok => {
                    matched += 1;
                    let longer = match &slowest {
                        Some(s) => match &s.event {
                            Event::Request { duration_s: d, .. } => duration_s > d,
                            _ => true,
                        },
                        None => true,
                    };
                    if longer {
                        slowest = Some(r);
                    }
                }
                (None, Some("failed")) if !ok => {
                    matched += 1;
                    if found.len() < limit {
                        found.push(r);
                    }
                }
                _ => {}
            }
        }
        found.extend(slowest);
        let exchanges: Vec<Value> = found
            .iter()
            .filter_map(|r| agent::exchange(&a, r))
            .collect();
        if exchanges.is_empty() {
            if let Some(r) = &rpc {
                return Err(format!("no call with JSON-RPC id {r} in run {}", id(&path)));
            }
            return Err(match (request, at) {
                (Some(i), _) => format!("no request {i} in run {}", id(&path)),
                (None, Some(w)) => format!("no such exchange at {w} in run {}", id(&path)),
                (None, None) => format!("no such exchange in run {}", id(&path)),
            });
        }
        Ok(json!({"run": id(&path), "found": matched, "exchanges": exchanges}))
    }

    fn compare(&self, args: &Map<String, Value>) -> Result<Value, String> {
        let base = arg(args, "base")
            .and_then(|v| v.as_str())
            .ok_or("`base` is required")?;
        let current = arg(args, "current")
            .and_then(|v| v.as_str())
            .ok_or("`current` is required")?;
        let noise = arg(args, "noise")
            .and_then(|v| v.as_f64())
            .unwrap_or(crate::analyze::compare::NOISE);
        let (pa, a) = self.analysed(base)?;
        let (pb, b) = self.analysed(current)?;
        let side = |p: &Path, x| crate::analyze::compare::Side {
            label: id(p),
            name: crate::runs::read_header(p).and_then(|h| h.name),
            analysis: x,
        };
        let c = crate::analyze::compare::compare(&side(&pa, &a), &side(&pb, &b), noise, &[]);
        serde_json::to_value(&c).map_err(|e| e.to_string())
    }

    async fn load(
        &self,
        args: &Map<String, Value>,
        context: &RequestContext<RoleServer>,
    ) -> Result<Value, String> {
        if !self.allow_load {
            return Err("load is off: this MCP server was started without --allow-load (start it as `witness mcp serve --allow-load` to let an agent run bounded load against loopback URLs)".into());
        }
        let url = arg(args, "url")
            .and_then(|v| v.as_str())
            .ok_or("`url` is required")?;
        let uri = crate::load::url::http_url("url", url)?;
        super::load::resolve_target(&uri, "url", false)
            .await
            .map_err(|e| format!("{e:#}"))?;
        let levels: Vec<u64> = match arg(args, "levels") {
            Some(Value::Array(v)) => v.iter().filter_map(|x| x.as_u64()).collect(),
            Some(_) => return Err("`levels` is a list of worker counts, e.g. [1, 4, 8]".into()),
            None => vec![1, 4],
        };
        if levels.is_empty() || levels.len() > 8 || levels.iter().any(|n| !(1..=64).contains(n)) {
            return Err("`levels`: 1 to 8 levels of 1 to 64 workers each".into());
        }
        let per = arg(args, "duration_s")
            .and_then(|v| v.as_f64())
            .unwrap_or(2.0);
        let total = per * levels.len() as f64;
        if !(per >= 0.1 && total <= self.max_duration.as_secs_f64()) {
            return Err(format!(
                "{} levels of {per} s is {total} s: more than the {} s this server allows (--max-duration)",
                levels.len(),
                self.max_duration.as_secs()
            ));
        }
        let command: Option<Vec<String>> = match arg(args, "command").and_then(|v| v.as_str()) {
            None => None,
            Some(c) if self.allow_command.iter().any(|x| x == c) => {
                Some(c.split_whitespace().map(str::to_string).collect())
            }
            Some(c) => {
                return Err(format!(
                    "refused to start {c:?}: not a command this server was started with (--allow-command); allowed: {}",
                    if self.allow_command.is_empty() {
                        "none".to_string()
                    } else {
                        self.allow_command.join(", ")
                    }
                ))
            }
        };
        crate::files::ensure_state_dir(&self.dir).map_err(|e| e.to_string())?;
        let stamp = chrono_free_stamp();
        let journal = self.dir.join(format!(
            "witness-load-{stamp}-mcp{}.jsonl",
            std::process::id()
        ));
        let me = std::env::current_exe().map_err(|e| e.to_string())?;
        let mut cmd = tokio::process::Command::new(me);
        cmd.arg("load")
            .arg("--url")
            .arg(url)
            .arg("--levels")
            .arg(
                levels
                    .iter()
                    .map(u64::to_string)
                    .collect::<Vec<_>>()
                    .join(","),
            )
            .arg("--duration")
            .arg(format!("{per}s"))
            .arg("--settle")
            .arg("200ms")
            .arg("--journal")
            .arg(&journal)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true);
        if let Some(t) = arg(args, "mcp_tool").and_then(|v| v.as_str()) {
            cmd.arg("--mcp").arg(t);
        }
        if let Some(c) = &command {
            cmd.arg("--").args(c);
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("could not start witness load: {e}"))?;
        let token = context.meta.get_progress_token();
        let run = id(&journal);
        let planned = levels.len() as f64;
        let notify = |progress: f64, message: String| {
            let peer = context.peer.clone();
            let token = token.clone();
            async move {
                if let Some(t) = token {
                    let _ = peer
                        .notify_progress(
                            ProgressNotificationParam::new(t, progress)
                                .with_total(planned)
                                .with_message(message),
                        )
                        .await;
                }
            }
        };
        notify(
            0.0,
            format!("started run {run} (journal {})", journal.display()),
        )
        .await;
        // Each level's end, as the journal records it, is a step of progress.
        let limit = tokio::time::Instant::now() + self.max_duration + Duration::from_secs(30);
        let mut said = 0usize;
        let status = loop {
            tokio::select! {
                s = child.wait() => break s.map_err(|e| e.to_string())?,
                _ = tokio::time::sleep(Duration::from_millis(200)) => {}
            }
            if tokio::time::Instant::now() > limit {
                let _ = child.kill().await;
                return Err(format!("run {run} passed its time limit and was stopped"));
            }
            let ends = level_ends(&journal);
            while said < ends.len() {
                notify((said + 1) as f64, ends[said].clone()).await;
                said += 1;
            }
        };
        let ends = level_ends(&journal);
        while said < ends.len() {
            notify((said + 1) as f64, ends[said].clone()).await;
            said += 1;
        }
        let file = crate::sources::journal::JournalFile::open(&journal)
            .map_err(|e| format!("run {run} left no journal ({status}): {e:#}"))?;
        let a = crate::analyze::analyze(&file);
        Ok(agent::story(&a, &run, None))
    }
}

/// A listed run.
fn row(
    p: &Path,
    h: &crate::journal::Header,
    command: &str,
    ended: &str,
    live: bool,
    exit_code: Option<i32>,
    verdict: Option<String>,
) -> Value {
    json!({
        "id": id(p),
        "mode": h.mode,
        "command": command,
        "started_at": h.started_at,
        "ended": ended,
        "live": live,
        "exit_code": exit_code,
        "verdict": verdict,
        "name": h.name,
        "journal": p.display().to_string(),
    })
}

/// "20261207T181500" from the system clock, for a journal's name.
fn chrono_free_stamp() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now())
        .to_string()
        .replace(['-', ':'], "")
        .trim_end_matches('Z')
        .to_string()
}

/// The words of each `level_end` in a journal so far.
fn level_ends(journal: &Path) -> Vec<String> {
    let Ok(text) = std::fs::read_to_string(journal) else {
        return Vec::new();
    };
    text.lines()
        .filter(|l| l.contains("\"level_end\""))
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["kind"] == "level_end")
        .map(|v| {
            format!(
                "level {} done{}",
                v["index"].as_u64().map(|i| i + 1).unwrap_or(0),
                v["health"]["status"]
                    .as_u64()
                    .map(|s| format!("; health after: {s}"))
                    .unwrap_or_default()
            )
        })
        .collect()
}

/// "witness-load-20261207T181500-42" for its journal's path.
fn id(p: &Path) -> String {
    p.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The exit code in a run's end words ("every level ran (exit 1)").
fn exit_of(ended: &str) -> Option<i32> {
    let at = ended.find("(exit ")?;
    ended[at + 6..]
        .split(')')
        .next()
        .and_then(|n| n.trim().parse().ok())
}

const JOURNAL_SUFFIX: &str = "/journal.jsonl";
const HTML_SUFFIX: &str = "/report.html";

impl ServerHandler for Agent {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .enable_resources_subscribe()
                .build(),
        )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(tools(self)))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = request.arguments.clone().unwrap_or_default();
        let me = self.clone();
        let blocking = |f: Box<dyn FnOnce() -> Result<(Value, String), String> + Send>| async move {
            tokio::task::spawn_blocking(f)
                .await
                .unwrap_or_else(|e| Err(format!("witness failed reading the run: {e}")))
        };
        let result: Result<(Value, String), String> = match request.name.as_ref() {
            "runs" => {
                let v = me.runs(&args);
                let n = v["runs"].as_array().map_or(0, Vec::len);
                Ok((v, format!("{n} run(s), newest first")))
            }
            "story" => {
                let detail = arg(&args, "detail")
                    .and_then(|v| v.as_str())
                    .map(str::to_string);
                match arg(&args, "run")
                    .and_then(|v| v.as_str())
                    .map(str::to_string)
                {
                    None => Err("`run` is required: an id from `runs`, `last` or `last:N`".into()),
                    Some(spec) => {
                        blocking(Box::new(move || {
                            let (p, a) = me.analysed(&spec)?;
                            let v = agent::story(&a, &id(&p), detail.as_deref());
                            let t = agent::story_text(&v);
                            Ok((v, t))
                        }))
                        .await
                    }
                }
            }
            "explain" => {
                blocking(Box::new(move || {
                    let v = me.explain(&args)?;
                    let t = v["exchanges"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|x| {
                            format!(
                                "request {} at {}: {} after {}{}",
                                x["id"],
                                x["at"].as_str().unwrap_or("?"),
                                x["outcome"].as_str().unwrap_or("?"),
                                x["took"].as_str().unwrap_or("?"),
                                x["meanwhile"]
                                    .as_str()
                                    .map(|m| format!("; {m}"))
                                    .unwrap_or_default()
                            )
                        })
                        .collect::<Vec<_>>()
                        .join("\n");
                    Ok((v, t))
                }))
                .await
            }
            "compare" => {
                blocking(Box::new(move || {
                    let v = me.compare(&args)?;
                    let t = format!(
                        "{}{}",
                        v["verdict"].as_str().unwrap_or("?").to_uppercase(),
                        v["worse"]
                            .as_array()
                            .filter(|w| !w.is_empty())
                            .map(|w| format!(
                                ": {}",
                                w.iter()
                                    .filter_map(|x| x.as_str())
                                    .collect::<Vec<_>>()
                                    .join("; ")
                            ))
                            .unwrap_or_default()
                    );
                    Ok((v, t))
                }))
                .await
            }
            "load" => self.load(&args, &context).await.map(|v| {
                let t = agent::story_text(&v);
                (v, t)
            }),
            other => {
                return Err(ErrorData::invalid_params(
                    format!("no tool {other:?}: the tools are runs, story, explain, compare, load"),
                    None,
                ))
            }
        };
        Ok(match result {
            // Journals are masked as they are written: what they hold is what an agent sees.
            Ok((v, text)) => done(v, text),
            Err(why) => refused(why),
        })
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let from: usize = request
            .and_then(|r| r.cursor)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        let runs = crate::runs::recent(&self.dir);
        let mut items = Vec::new();
        for p in runs.iter().skip(from).take(PAGE) {
            let run = id(p);
            let size = std::fs::metadata(p).map(|m| m.len()).ok();
            let mut j = Resource::new(
                format!("witness://runs/{run}{JOURNAL_SUFFIX}"),
                format!("{run} journal"),
            )
            .with_mime_type("application/jsonl")
            .with_description("The run's journal: one JSON event a line, on one clock");
            if let Some(s) = size {
                j = j.with_size(s);
            }
            items.push(j);
            items.push(
                Resource::new(
                    format!("witness://runs/{run}{HTML_SUFFIX}"),
                    format!("{run} report"),
                )
                .with_mime_type("text/html")
                .with_description("The run's HTML report: one self-contained page"),
            );
        }
        let mut out = ListResourcesResult::with_all_items(items);
        if from + PAGE < runs.len() {
            out.next_cursor = Some((from + PAGE).to_string());
        }
        Ok(out)
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let uri = request.uri.clone();
        let me = self.clone();
        let text = tokio::task::spawn_blocking(move || -> Result<(String, &'static str), String> {
            let rest = uri
                .strip_prefix("witness://runs/")
                .ok_or_else(|| format!("{uri}: not a witness resource (witness://runs/ID/journal.jsonl or …/report.html)"))?;
            if let Some(run) = rest.strip_suffix(JOURNAL_SUFFIX) {
                let p = me.resolve(run)?;
                let size = std::fs::metadata(&p).map(|m| m.len()).unwrap_or(0);
                if size > JOURNAL_RESOURCE_MAX {
                    return Err(format!(
                        "{run}'s journal is {}: more than this server sends whole; read it at {} or ask the story and explain tools",
                        crate::journal::bytes(size as f64),
                        p.display()
                    ));
                }
                let t = std::fs::read_to_string(&p).map_err(|e| e.to_string())?;
                return Ok((t, "application/jsonl"));
            }
            if let Some(run) = rest.strip_suffix(HTML_SUFFIX) {
                let (_, a) = me.analysed(run)?;
                use crate::report::View;
                let b = crate::report::html::Html.render(&a).map_err(|e| e.to_string())?;
                return Ok((String::from_utf8_lossy(&b).into_owned(), "text/html"));
            }
            Err(format!("{uri}: not a witness resource (witness://runs/ID/journal.jsonl or …/report.html)"))
        })
        .await
        .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        match text {
            Ok((t, mime)) => {
                let mut c = ResourceContents::text(t, request.uri.clone());
                if let ResourceContents::TextResourceContents { mime_type, .. } = &mut c {
                    *mime_type = Some(mime.into());
                }
                Ok(ReadResourceResult::new(vec![c]).into())
            }
            Err(why) => Err(ErrorData::resource_not_found(why, None)),
        }
    }

    #[allow(deprecated)]
    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let uri = request.uri.clone();
        let run = uri
            .strip_prefix("witness://runs/")
            .and_then(|r| {
                r.strip_suffix(JOURNAL_SUFFIX)
                    .or_else(|| r.strip_suffix(HTML_SUFFIX))
            })
            .ok_or_else(|| {
                ErrorData::invalid_params(format!("{uri}: not a witness resource"), None)
            })?
            .to_string();
        let path = self
            .resolve(&run)
            .map_err(|e| ErrorData::resource_not_found(e, None))?;
        self.subscribed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(uri.clone());
        let subscribed = self.subscribed.clone();
        let peer = context.peer.clone();
        // While the run is live, each growth of its journal is an update; one last when it ends.
        tokio::spawn(async move {
            let mut size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
            loop {
                tokio::time::sleep(Duration::from_millis(500)).await;
                if !subscribed
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .contains(&uri)
                {
                    return;
                }
                let now = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
                let live = crate::runs::live(&path).is_some();
                if now != size {
                    size = now;
                    let param = rmcp::model::ResourceUpdatedNotificationParam::new(uri.clone());
                    if peer.notify_resource_updated(param).await.is_err() {
                        return;
                    }
                }
                if !live {
                    return;
                }
            }
        });
        Ok(())
    }

    #[allow(deprecated)]
    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.subscribed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&request.uri);
        Ok(())
    }
}
