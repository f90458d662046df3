//! `witness mcp tools`: what an MCP server offers (its tools and their input schemas), over
//! streamable HTTP (`--url`) or stdio (the command after `--`, started with pipes and stopped after).

use std::time::{Duration, Instant};

use hyper::Uri;
use serde_json::Value;

use crate::cli::{McpArgs, McpCommand, McpToolsArgs};
use crate::error::{refuse, usage};
use crate::load::client::Limits;
use crate::load::mcp::{McpTarget, Session, StdioLink, ToolCall};
use crate::load::outcome::Rejection;
use crate::server::process::StdioPipes;

pub async fn run(args: McpArgs) -> anyhow::Result<i32> {
    match args.command {
        McpCommand::Tools(a) => tools(a).await,
        McpCommand::Serve(a) => super::mcp_serve::run(a).await,
    }
}

async fn tools(a: McpToolsArgs) -> anyhow::Result<i32> {
    if a.timeout.is_zero() {
        return Err(usage("--timeout must be more than zero"));
    }
    super::tls_trust(a.tls.cacert.as_deref(), a.tls.insecure)?;
    let url = match &a.url {
        Some(u) => {
            let uri = crate::load::url::http_url("--url", u).map_err(usage)?;
            super::load::resolve_target(&uri, "--url", false).await?;
            Some(uri)
        }
        None => None,
    };
    if url.is_none() && a.command.first().is_none_or(|c| c.is_empty()) {
        return Err(usage(
            "give the server: --url http://127.0.0.1:PORT/mcp, or its command after `--` for stdio",
        ));
    }
    let mut child = None;
    let mut stdio_pipes = None;
    if let Some(cmd0) = a.command.first() {
        let mut cmd = tokio::process::Command::new(cmd0);
        cmd.args(&a.command[1..])
            .stdin(if url.is_none() {
                std::process::Stdio::piped()
            } else {
                std::process::Stdio::null()
            })
            .stdout(if url.is_none() {
                std::process::Stdio::piped()
            } else {
                std::process::Stdio::null()
            })
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true);
        let mut c = cmd.spawn().map_err(|e| {
            usage(format!(
                "could not start {cmd0:?}: {e} (is the command after `--` right?)"
            ))
        })?;
        if url.is_none() {
            if let (Some(stdin), Some(stdout)) = (c.stdin.take(), c.stdout.take()) {
                stdio_pipes = Some(StdioPipes {
                    pid: c.id().unwrap_or(0),
                    stdin: stdin.into_owned_fd()?,
                    stdout: stdout.into_owned_fd()?,
                });
            }
        }
        child = Some(c);
    }
    // The listing's own journal goes to the temp folder: it records the handshake only.
    let journal = super::open_journal(
        "mcp",
        &crate::cli::OutputArgs {
            journal: None,
            report: None,
            html: None,
            trace: None,
            junit: None,
            name: None,
        },
    )?;
    let call = ToolCall {
        tool: String::new(),
        arguments: Value::Null,
        limits: Limits {
            connect: a.timeout.min(Duration::from_secs(5)),
            whole: a.timeout,
            max_body: crate::load::client::DEFAULT_MAX_BODY,
        },
        rejection: Rejection::default(),
        modern: crate::load::mcp::revision(a.mcp_protocol.as_deref()).map_err(usage)?,
        headers: Default::default(),
        http2: false,
    };
    let result = match (url, stdio_pipes) {
        (Some(uri), _) => list_http(uri, &call, &journal, child.is_some()).await,
        (None, Some(p)) => {
            let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
            let _ = tx.send(p);
            // No restarts here: once these pipes close, the server is gone (not waited for).
            drop(tx);
            let mut s = Session::Stdio(StdioLink::new(
                rx,
                journal.clone(),
                call.modern.clone(),
                a.timeout,
            ));
            s.list_tools(a.timeout).await
        }
        (None, None) => Err(anyhow::anyhow!("the server's pipes could not be opened")),
    };
    if let Some(mut c) = child {
        let _ = c.start_kill();
        let _ = c.wait().await;
    }
    let _ = std::fs::remove_file(journal.path());
    let tools = result.map_err(|e| refuse(format!("could not list the tools: {e:#}")))?;
    if a.json {
        crate::outln!("{}", serde_json::to_string_pretty(&tools)?);
    } else {
        crate::out!("{}", render(&tools));
    }
    Ok(0)
}

/// Over HTTP: a server witness just started may need a moment to listen; retried until the limit.
async fn list_http(
    uri: Uri,
    call: &ToolCall,
    journal: &crate::journal::Journal,
    started: bool,
) -> anyhow::Result<Vec<Value>> {
    let target = McpTarget::Http(uri);
    let deadline = Instant::now() + call.limits.whole;
    loop {
        let mut s = target.open(0, call, Some(journal)).await;
        match s.list_tools(call.limits.whole).await {
            Ok(t) => return Ok(t),
            Err(e) if !started || Instant::now() >= deadline => return Err(e),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// One tool a paragraph: name, description, and its input schema on one line.
fn render(tools: &[Value]) -> String {
    let mut out = String::new();
    for t in tools {
        out.push_str(t["name"].as_str().unwrap_or("?"));
        if let Some(d) = t["description"].as_str() {
            out.push_str(&format!("  {d}"));
        }
        out.push('\n');
        out.push_str(&format!(
            "    input: {}\n",
            serde_json::to_string(&t["inputSchema"]).unwrap_or_default()
        ));
    }
    if tools.is_empty() {
        out.push_str("the server offers no tools\n");
    }
    out
}
