use super::*;

fn file() -> PathBuf {
    PathBuf::from("plan.toml")
}

const GOOD: &str = r#"
duration = "30s"
interval = "1s"

[target]
base_url = "http://127.0.0.1:8000"

[secrets.gateway]
secret_env = "WITNESS_TEST_TOKEN"

[kinds.embed]
method = "POST"
path = "/call"
headers = { Authorization = "Bearer ${secret.gateway}", "Content-Type" = "application/json" }
body = '{"inputs": ${inputs}, "n": ${id}}'
vars.inputs = ['["a"]', '["a","b"]']
weight = 3

[kinds.collect]
path = "/collect"
weight = 0

[[drivers]]
count = 2
burst = { requests = [2, 3], gap = ["20ms", "50ms"] }

[[readers]]
get = ["/stats", "/health"]

[[background]]
kinds = ["collect"]
every = "2s"

[[gauges]]
name = "queued"
get = "/stats"
pointer = "/queued"
drain = true
"#;

struct Fake;
impl SecretSource for Fake {
    fn env(&self, name: &str) -> Option<String> {
        (name == "WITNESS_TEST_TOKEN").then(|| "t0ken-value".to_string())
    }
    fn file(&self, path: &Path) -> std::io::Result<String> {
        Err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("{} not found", path.display()),
        ))
    }
}

fn resolved(src: &str) -> Result<SoakPlan, PlanError> {
    let p = parse(src, &file())?;
    resolve(p, src, &file(), &Overrides::default(), &Fake)
}

#[test]
fn a_good_plan_resolves_with_its_kinds_groups_and_secret() {
    let p = resolved(GOOD).unwrap();
    assert_eq!(p.duration, Duration::from_secs(30));
    let names: Vec<_> = p.kinds.iter().map(|k| k.name.as_str()).collect();
    assert_eq!(names, ["collect", "embed", "GET /stats", "GET /health"]);
    let embed = &p.kinds[1];
    let auth = embed.headers.get("authorization").unwrap();
    assert!(auth.is_sensitive());
    assert_eq!(auth.to_str().unwrap(), "Bearer t0ken-value");
    // Only weighted kinds are drawn by default drivers.
    assert_eq!(p.drivers[0].kinds, vec![(1, 3)]);
    assert_eq!(p.drivers[0].burst.0, CountRange { min: 2, max: 3 });
    assert_eq!(p.drivers[0].steady.1, steady_gap(), "defaults stay");
    assert_eq!(p.secret_values, vec!["t0ken-value".to_string()]);
    let mut n = 0;
    let body = embed.render(7, &mut |len| {
        n += 1;
        len - 1
    });
    assert_eq!(&body[..], br#"{"inputs": ["a","b"], "n": 7}"#);
    let s = summary(&p).to_string();
    assert!(!s.contains("t0ken"), "{s}");
    assert!(s.contains("Bearer ${secret.gateway}"), "{s}");
}

#[test]
fn worker_and_request_counts_are_bounded_with_the_range_in_words() {
    let src = GOOD.replace("count = 2", "count = 100000000");
    let e = resolved(&src).unwrap_err().to_string();
    assert!(
        e.contains("100000002 workers") && e.contains("from 1 to 10000"),
        "{e}"
    );
    let src = GOOD.replace("requests = [2, 3]", "requests = [2, 99999999999]");
    let e = resolved(&src).unwrap_err().to_string();
    assert!(e.contains("from 1 to 10000000"), "{e}");
    let src = GOOD.replace("count = 2", "count = 9998");
    assert!(resolved(&src).is_ok());
}

#[test]
fn an_mcp_kind_names_its_tool_and_its_body_must_be_an_arguments_object() {
    let src = GOOD.replace("weight = 3", "weight = 3\nmcp = \"search\"");
    let p = resolved(&src).unwrap();
    assert_eq!(p.kinds[1].tool.as_deref(), Some("search"));
    assert_eq!(p.kinds[0].tool, None);
    let src = GOOD
        .replace("weight = 3", "weight = 3\nmcp = \"search\"")
        .replace(
            r#"body = '{"inputs": ${inputs}, "n": ${id}}'"#,
            "body = '[${id}]'",
        );
    let e = resolved(&src).unwrap_err();
    assert!(e.message.contains("must be a JSON object"), "{e}");
    assert!(e.message.contains("kinds.embed"), "{e}");
}

const STDIO_PLAN: &str = r#"
duration = "3s"
[target]
transport = "stdio"
[kinds.search]
mcp = "search"
body = '{"query": "${q}"}'
vars.q = ["a", "b"]
[[drivers]]
count = 2
"#;

#[test]
fn a_stdio_plan_sends_its_mcp_kinds_over_the_pipe_and_pings_for_health() {
    let p = resolved(STDIO_PLAN).unwrap();
    assert_eq!(p.transport, Transport::Stdio);
    assert!(p.base.is_none());
    assert!(p.kinds[0].uri.is_none());
    assert!(matches!(p.health, HealthCheck::Ping(PingAt::Stdio)));
    // Nothing to check for loopback: no URL at all.
    assert!(p.urls().is_empty());
    let s = summary(&p);
    assert_eq!(s["transport"], "stdio");
    assert_eq!(s["health"], "mcp ping (stdio)");
    assert_eq!(s["kinds"][0]["url"], "stdio");
    // An unknown transport is named with the values it may take.
    let e = resolved(&STDIO_PLAN.replace("\"stdio\"", "\"sse\"")).unwrap_err();
    assert!(e.message.contains("unknown variant `sse`"), "{e}");
    assert!(
        e.message.contains("`http`") && e.message.contains("`stdio`"),
        "{e}"
    );
    assert_eq!(e.key.as_deref(), Some("target.transport"));
}

#[test]
fn a_stdio_plan_refuses_http_kinds_readers_urls_and_headers_naming_each() {
    let err = |src: String| resolved(&src).unwrap_err();
    let e = err(STDIO_PLAN.replace(
        "[[drivers]]",
        "[kinds.stats]\npath = \"/stats\"\n[[drivers]]",
    ));
    assert!(
        e.message.contains("kinds.stats is a plain HTTP request"),
        "{e}"
    );
    assert!(e.fix.as_deref().unwrap().contains("mcp = \"TOOL\""), "{e}");
    let e = err(STDIO_PLAN.replace("mcp = \"search\"", "mcp = \"search\"\npath = \"/mcp\""));
    assert!(
        e.message.contains(
            "kinds.search: with [target] transport = \"stdio\" an MCP kind has no path or url"
        ),
        "{e}"
    );
    let e = err(STDIO_PLAN.replace(
        "mcp = \"search\"",
        "mcp = \"search\"\nheaders = { Authorization = \"x\" }",
    ));
    assert!(e.message.contains("no HTTP headers"), "{e}");
    let e = err(STDIO_PLAN.to_string() + "[[readers]]\nget = [\"/stats\"]\n");
    assert!(
        e.message.contains("polls GET /stats, a plain HTTP request"),
        "{e}"
    );
    let e = err(STDIO_PLAN.replace("[target]", "[target]\nbase_url = \"http://127.0.0.1:1\""));
    assert!(e.message.contains("has no base_url"), "{e}");
    assert_eq!(e.key.as_deref(), Some("target.base_url"));
    let e = err(STDIO_PLAN.replace("[target]", "[target]\nhealth = \"/health\""));
    assert!(e.message.contains("health is MCP ping"), "{e}");
    // A check reading a path has no base URL to join it to; a whole URL is fine.
    let check = "[[checks]]\nname = \"q\"\nget = \"/stats\"\n";
    let e = err(STDIO_PLAN.to_string() + check);
    assert!(e.message.contains("has no base URL to join it to"), "{e}");
    let whole = check.replace("/stats", "http://127.0.0.1:9/stats");
    assert!(resolved(&(STDIO_PLAN.to_string() + &whole)).is_ok());
    // And --base-url contradicts the plan.
    let o = Overrides {
        base_url: Some("http://127.0.0.1:8000".into()),
        ..Default::default()
    };
    let e = resolve(
        parse(STDIO_PLAN, &file()).unwrap(),
        STDIO_PLAN,
        &file(),
        &o,
        &Fake,
    )
    .unwrap_err();
    assert!(
        e.message
            .contains("--base-url http://127.0.0.1:8000 contradicts"),
        "{e}"
    );
}

#[test]
fn health_is_the_named_url_else_ping_for_mcp_kinds_else_health_or_ping_on_404() {
    let mcp = STDIO_PLAN
        .replace(
            "transport = \"stdio\"",
            "base_url = \"http://127.0.0.1:8000\"",
        )
        .replace("mcp = \"search\"", "mcp = \"search\"\npath = \"/mcp\"");
    // MCP kinds only, no health named: ping at the kind's endpoint.
    match resolved(&mcp).unwrap().health {
        HealthCheck::Ping(PingAt::Http { uri, .. }) => {
            assert_eq!(uri, "http://127.0.0.1:8000/mcp")
        }
        h => panic!("{h:?}"),
    }
    // A health URL named: asked as it is, whatever the kinds.
    let named = mcp.replace("[target]", "[target]\nhealth = \"/ready\"");
    match resolved(&named).unwrap().health {
        HealthCheck::Url(u) => assert_eq!(u, "http://127.0.0.1:8000/ready"),
        h => panic!("{h:?}"),
    }
    // HTTP and MCP kinds: /health, or ping when it answers 404.
    let mixed = mcp.replace(
        "[[drivers]]",
        "[kinds.stats]\npath = \"/stats\"\n[[drivers]]",
    );
    let p = resolved(&mixed).unwrap();
    assert!(
        matches!(&p.health, HealthCheck::UrlOrPing(u, PingAt::Http { .. }) if u == "http://127.0.0.1:8000/health"),
        "{:?}",
        p.health
    );
    assert_eq!(
        summary(&p)["health"],
        "GET http://127.0.0.1:8000/health (mcp ping http://127.0.0.1:8000/mcp if it answers 404)"
    );
    // HTTP kinds only: /health, as always.
    let p = resolved(GOOD).unwrap();
    assert!(matches!(&p.health, HealthCheck::Url(u) if u == "http://127.0.0.1:8000/health"));
}

#[test]
fn a_misspelt_key_names_its_line_column_and_key() {
    let src = GOOD.replace("weight = 3", "wieght = 3");
    let e = resolved(&src).unwrap_err();
    let line = src.lines().position(|l| l.starts_with("wieght")).unwrap() + 1;
    assert_eq!(e.line, line);
    assert_eq!(e.column, 1);
    assert_eq!(e.key.as_deref(), Some("kinds.embed.wieght"));
    assert!(e.message.contains("unknown field `wieght`"), "{e}");
    let text = e.to_string();
    assert!(text.contains(&format!("line {line}, column 1")), "{text}");
    assert!(text.contains("fix:"), "{text}");
}

#[test]
fn a_backwards_range_is_located_and_explained() {
    let src = GOOD.replace(r#"gap = ["20ms", "50ms"]"#, r#"gap = ["400ms", "50ms"]"#);
    let e = resolved(&src).unwrap_err();
    assert!(
        e.message.contains("starts above its end (400ms > 50ms)"),
        "{e}"
    );
    assert_eq!(e.key.as_deref(), Some("drivers.burst"));
    assert!(e.column > 10, "{e:?}");
    assert!(e.to_string().contains("[min, max]"), "{e}");
}

#[test]
fn a_bad_duration_says_how_to_write_one() {
    let src = GOOD.replace(r#"every = "2s""#, r#"every = "2 parsecs""#);
    let e = resolved(&src).unwrap_err();
    assert_eq!(e.key.as_deref(), Some("background.every"));
    assert!(e.message.contains("unknown unit \"parsecs\""), "{e}");
    assert!(e.fix.as_deref().unwrap().contains("\"250ms\""), "{e}");
    assert_eq!(e.column, 9);
}

#[test]
fn an_unset_secret_env_is_an_error_naming_the_key_with_no_fallback() {
    let src = GOOD.replace("WITNESS_TEST_TOKEN", "WITNESS_SURELY_UNSET_VAR");
    let e = resolved(&src).unwrap_err();
    assert!(e.message.contains("secrets.gateway"), "{e}");
    assert!(e.message.contains("WITNESS_SURELY_UNSET_VAR"), "{e}");
    assert!(e.fix.as_deref().unwrap().contains("no fallback"));
    // And a fallback value cannot even be written.
    let src = GOOD.replace(
        "secret_env = \"WITNESS_TEST_TOKEN\"",
        "secret_env = \"WITNESS_TEST_TOKEN\"\ndefault = \"hunter2\"",
    );
    let e = resolved(&src).unwrap_err();
    assert!(e.message.contains("unknown field `default`"), "{e}");
}

#[test]
fn a_secret_file_is_read_without_its_newline_and_a_missing_one_is_named() {
    struct File;
    impl SecretSource for File {
        fn env(&self, _: &str) -> Option<String> {
            None
        }
        fn file(&self, path: &Path) -> std::io::Result<String> {
            match path.to_str() {
                Some("/run/secrets/gw") => Ok("fr0m-file\n".into()),
                _ => Err(std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "no such file",
                )),
            }
        }
    }
    let src = GOOD.replace(
        "secret_env = \"WITNESS_TEST_TOKEN\"",
        "secret_file = \"/run/secrets/gw\"",
    );
    let p = resolve(
        parse(&src, &file()).unwrap(),
        &src,
        &file(),
        &Overrides::default(),
        &File,
    )
    .unwrap();
    let auth = p.kinds[1].headers.get("authorization").unwrap();
    assert_eq!(auth.to_str().unwrap(), "Bearer fr0m-file");
    let src = src.replace("/run/secrets/gw", "/nope");
    let e = resolve(
        parse(&src, &file()).unwrap(),
        &src,
        &file(),
        &Overrides::default(),
        &File,
    )
    .unwrap_err();
    assert!(
        e.message
            .contains("secrets.gateway: could not read secret_file /nope"),
        "{e}"
    );
    let src = src.replace(
        "secret_file = \"/nope\"",
        "secret_file = \"/nope\"\nsecret_env = \"X\"",
    );
    let e = resolve(
        parse(&src, &file()).unwrap(),
        &src,
        &file(),
        &Overrides::default(),
        &File,
    )
    .unwrap_err();
    assert!(
        e.message
            .contains("exactly one of secret_env or secret_file"),
        "{e}"
    );
}

#[test]
fn a_secret_in_a_body_or_an_unknown_secret_is_refused() {
    let src = GOOD.replace("\"n\": ${id}", "\"k\": \"${secret.gateway}\"");
    let e = resolved(&src).unwrap_err();
    assert!(
        e.fix.as_deref().unwrap().contains("headers only"),
        "{}",
        e.message
    );
    let src = GOOD.replace("${secret.gateway}", "${secret.other}");
    let e = resolved(&src).unwrap_err();
    assert!(e.message.contains("\"other\""), "{e}");
}

#[test]
fn references_to_missing_kinds_and_vars_are_located() {
    let src = GOOD.replace(r#"kinds = ["collect"]"#, r#"kinds = ["colect"]"#);
    let e = resolved(&src).unwrap_err();
    assert!(e.message.contains("no kind named \"colect\""), "{e}");
    assert!(e.fix.as_deref().unwrap().contains("collect"));
    assert_eq!(e.key.as_deref(), Some("background.kinds"));
    let src = GOOD.replace("${inputs}", "${batch}");
    let e = resolved(&src).unwrap_err();
    assert!(e.message.contains("vars has no \"batch\""), "{e}");
}

#[test]
fn a_plan_without_duration_or_workers_says_what_to_add() {
    let src = GOOD.replace("duration = \"30s\"", "");
    let e = resolved(&src).unwrap_err();
    assert!(e.fix.as_deref().unwrap().contains("--duration"));
    let p = parse(&src, &file()).unwrap();
    let o = Overrides {
        duration: Some(Duration::from_secs(5)),
        seed: Some(9),
        ..Default::default()
    };
    let r = resolve(p, &src, &file(), &o, &Fake).unwrap();
    assert_eq!((r.duration, r.seed), (Duration::from_secs(5), 9));
    let src = "duration = \"1s\"\n[target]\nbase_url = \"http://127.0.0.1:1\"\n";
    let e = resolved(src).unwrap_err();
    assert!(e.message.contains("no workers"), "{e}");
}
