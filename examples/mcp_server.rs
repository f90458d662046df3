//! An example MCP server with the 85-second story's behaviours, built with the official Rust SDK's server side
//! (`rmcp`), over stdio (the default) or streamable HTTP. The integration tests run it as a real
//! process; users can point witness at it to see what each failure looks like.
//!
//! Tools:
//! - `search`: holds one server-wide lock for `--lock` (default 1s), like the 85-second server's McpServer Mutex:
//!   concurrent calls queue, so n calls take about n × the lock.
//! - `sleep`: sleeps `ms` (argument, default 100) without the lock.
//! - `echo`: answers its `text` argument at once, as the Python test server's `echo` does: the tool
//!   for timing a round trip with nothing in it but the transport (`sleep` with `ms: 0` still waits
//!   for the runtime's next timer tick, up to a millisecond).
//! - `hang`: never answers; a `notifications/cancelled` for it is logged on stderr
//!   (`mcp_server: cancelled request ID: REASON`).
//! - `fail`: answers a result with `isError: true` and a text saying why.
//!
//! Flags:
//! - `--http PORT`: streamable HTTP on 127.0.0.1:PORT at `/mcp` (stateful sessions; `--stateless` for
//!   none). `/health` answers 200 too. Without it: stdio.
//! - `--lock DURATION` (ms or s suffix): how long `search` holds the lock.
//! - `--watchdog DURATION`: a startup watchdog, as the 85-second server's binary arms for every subcommand: after
//!   it, the process logs `[oi] process watchdog: force-exiting after Ns (exit 124)` and exits 124.
//! - `--require-secret-env NAME` (HTTP): `/mcp` answers 401 unless `Authorization: Bearer $NAME`.
//! - `--capacity N`: more than N tool calls in flight are refused with a JSON-RPC error naming
//!   QUEUE_FULL (witness counts those as rejected, by the body marker).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelledNotificationParam,
    ContentBlock, ErrorCode, ListToolsResult, PaginatedRequestParams, ServerCapabilities,
    ServerConfig, Tool,
};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};

struct Config {
    http: Option<u16>,
    stateless: bool,
    lock: Duration,
    watchdog: Option<Duration>,
    capacity: Option<usize>,
    bearer: Option<String>,
}

#[derive(Clone)]
struct Server {
    lock: Arc<tokio::sync::Mutex<()>>,
    hold: Duration,
    capacity: Option<usize>,
    in_flight: Arc<AtomicUsize>,
}

fn schema(v: serde_json::Value) -> serde_json::Map<String, serde_json::Value> {
    match v {
        serde_json::Value::Object(m) => m,
        _ => serde_json::Map::new(),
    }
}

fn tools() -> Vec<Tool> {
    let empty = schema(serde_json::json!({"type": "object", "properties": {}}));
    vec![
        Tool::new(
            "search",
            "Searches while holding the server-wide lock (serialised: n calls take n × the lock)",
            schema(
                serde_json::json!({"type": "object", "properties": {"query": {"type": "string"}}}),
            ),
        ),
        Tool::new(
            "sleep",
            "Sleeps `ms` milliseconds without any lock",
            schema(
                serde_json::json!({"type": "object", "properties": {"ms": {"type": "integer", "minimum": 0}}}),
            ),
        ),
        Tool::new(
            "echo",
            "Answers its `text` argument at once",
            schema(
                serde_json::json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
            ),
        ),
        Tool::new("hang", "Never answers", empty.clone()),
        Tool::new("fail", "Answers a tool error (isError: true)", empty),
    ]
}

struct Slot(Arc<AtomicUsize>);
impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl ServerHandler for Server {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let n = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        let _slot = Slot(self.in_flight.clone());
        if let Some(c) = self.capacity {
            if n > c {
                return Err(ErrorData::new(
                    ErrorCode(-32000),
                    format!("QUEUE_FULL: {n} calls in flight, capacity {c}"),
                    None,
                ));
            }
        }
        let text = match request.name.as_ref() {
            "search" => {
                let _held = self.lock.lock().await;
                tokio::time::sleep(self.hold).await;
                format!("searched in {} ms", self.hold.as_millis())
            }
            "sleep" => {
                let ms = request
                    .arguments
                    .as_ref()
                    .and_then(|a| a.get("ms"))
                    .and_then(|v| v.as_u64())
                    .unwrap_or(100);
                tokio::time::sleep(Duration::from_millis(ms)).await;
                format!("slept {ms} ms")
            }
            "echo" => request
                .arguments
                .as_ref()
                .and_then(|a| a.get("text"))
                .and_then(|v| v.as_str())
                .unwrap_or_default()
                .to_string(),
            "hang" => {
                // Ends only when the client cancels (the SDK cancels this token on
                // notifications/cancelled), and then sends no answer, as the protocol says.
                context.ct.cancelled().await;
                std::future::pending::<()>().await;
                unreachable!()
            }
            "fail" => {
                return Ok(CallToolResult::error(vec![ContentBlock::text(
                    "search backend unavailable: the daemon socket refused the connection",
                )])
                .into())
            }
            other => {
                return Err(ErrorData::new(
                    ErrorCode::INVALID_PARAMS,
                    format!("unknown tool {other:?}"),
                    None,
                ))
            }
        };
        Ok(CallToolResult::success(vec![ContentBlock::text(text)]).into())
    }

    async fn on_cancelled(
        &self,
        notification: CancelledNotificationParam,
        _context: NotificationContext<RoleServer>,
    ) {
        let id = notification
            .request_id
            .map(|i| i.to_string())
            .unwrap_or_else(|| "?".into());
        eprintln!(
            "mcp_server: cancelled request {id}: {}",
            notification.reason.unwrap_or_default()
        );
    }
}

fn parse_duration(flag: &str, v: &str) -> Result<Duration, String> {
    let (num, mult) = if let Some(n) = v.strip_suffix("ms") {
        (n, 0.001)
    } else if let Some(n) = v.strip_suffix('s') {
        (n, 1.0)
    } else {
        (v, 1.0)
    };
    match num.parse::<f64>() {
        Ok(x) if x.is_finite() && x >= 0.0 => Ok(Duration::from_secs_f64(x * mult)),
        _ => Err(format!(
            "{flag} {v:?} is not a duration: write it like 1s or 250ms"
        )),
    }
}

fn parse_args() -> Result<Config, String> {
    let mut cfg = Config {
        http: None,
        stateless: false,
        lock: Duration::from_secs(1),
        watchdog: None,
        capacity: None,
        bearer: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{a} needs a value"));
        match a.as_str() {
            "--http" => {
                let v = value()?;
                cfg.http = Some(
                    v.parse()
                        .map_err(|_| format!("--http {v:?} is not a port number"))?,
                )
            }
            "--stateless" => cfg.stateless = true,
            "--require-secret-env" => {
                let name = value()?;
                cfg.bearer = Some(
                    std::env::var(&name)
                        .map_err(|_| format!("--require-secret-env {name}: ${name} is not set"))?,
                );
            }
            "--lock" => cfg.lock = parse_duration("--lock", &value()?)?,
            "--watchdog" => cfg.watchdog = Some(parse_duration("--watchdog", &value()?)?),
            "--capacity" => {
                let v = value()?;
                cfg.capacity = Some(
                    v.parse()
                        .map_err(|_| format!("--capacity {v:?} is not a count"))?,
                )
            }
            other => return Err(format!("unknown flag {other:?}")),
        }
    }
    Ok(cfg)
}

fn main() {
    let cfg = match parse_args() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("mcp_server: {e}");
            std::process::exit(2);
        }
    };
    if let Some(after) = cfg.watchdog {
        std::thread::spawn(move || {
            std::thread::sleep(after);
            eprintln!(
                "[oi] process watchdog: force-exiting after {}s (exit 124)",
                after.as_secs_f64()
            );
            std::process::exit(124);
        });
    }
    let server = Server {
        lock: Arc::new(tokio::sync::Mutex::new(())),
        hold: cfg.lock,
        capacity: cfg.capacity,
        in_flight: Arc::new(AtomicUsize::new(0)),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let res = rt.block_on(async move {
        match cfg.http {
            None => {
                eprintln!("mcp_server: serving MCP on stdio");
                let running = server
                    .serve(rmcp::transport::stdio())
                    .await
                    .map_err(|e| e.to_string())?;
                running.waiting().await.map_err(|e| e.to_string())?;
                Ok(())
            }
            Some(port) => serve_http(server, port, cfg.stateless, cfg.bearer).await,
        }
    });
    if let Err(e) = res {
        eprintln!("mcp_server: {e}");
        std::process::exit(1);
    }
}

async fn serve_http(
    server: Server,
    port: u16,
    stateless: bool,
    bearer: Option<String>,
) -> Result<(), String> {
    let bearer = std::sync::Arc::new(bearer.map(|b| format!("Bearer {b}")));
    use rmcp::transport::streamable_http_server::{
        session::local::LocalSessionManager, StreamableHttpServerConfig, StreamableHttpService,
    };
    let mut config = StreamableHttpServerConfig::default();
    config.legacy_session_mode = !stateless;
    config.json_response = stateless;
    let service: StreamableHttpService<Server, LocalSessionManager> =
        StreamableHttpService::new(move || Ok(server.clone()), Default::default(), config);
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .map_err(|e| format!("could not listen on 127.0.0.1:{port}: {e}"))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    eprintln!(
        "mcp_server: serving MCP on http://{addr}/mcp ({})",
        if stateless { "stateless" } else { "sessions" }
    );
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let service = service.clone();
        let bearer = bearer.clone();
        tokio::spawn(async move {
            let svc =
                hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let mut service = service.clone();
                    let bearer = bearer.clone();
                    async move {
                        let wanted = bearer.as_deref();
                        let got = req
                            .headers()
                            .get("authorization")
                            .and_then(|v| v.to_str().ok());
                        if req.uri().path() == "/mcp" && wanted.is_some() && got != wanted {
                            let mut resp = hyper::Response::new(
                                http_body_util::Full::new(bytes::Bytes::from_static(
                                    b"missing or wrong bearer token",
                                ))
                                .map_err(|e| match e {})
                                .boxed_unsync(),
                            );
                            *resp.status_mut() = hyper::StatusCode::UNAUTHORIZED;
                            return Ok(resp);
                        }
                        if req.uri().path() == "/health" {
                            let resp = hyper::Response::new(
                                http_body_util::Full::new(bytes::Bytes::from_static(b"ok"))
                                    .map_err(|e| match e {})
                                    .boxed_unsync(),
                            );
                            return Ok::<_, std::convert::Infallible>(resp);
                        }
                        if req.uri().path() != "/mcp" {
                            let mut resp = hyper::Response::new(
                                http_body_util::Full::new(bytes::Bytes::from_static(b"not found"))
                                    .map_err(|e| match e {})
                                    .boxed_unsync(),
                            );
                            *resp.status_mut() = hyper::StatusCode::NOT_FOUND;
                            return Ok(resp);
                        }
                        use tower_service::Service;
                        let resp = service.call(req).await.unwrap_or_else(|e| match e {});
                        let (parts, body) = resp.into_parts();
                        Ok(hyper::Response::from_parts(parts, body.boxed_unsync()))
                    }
                });
            let io = hyper_util::rt::TokioIo::new(stream);
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(io, svc)
                .await;
        });
    }
}

use http_body_util::BodyExt;
