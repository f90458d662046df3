//! From the file as written to the plan the engine runs: URLs joined and checked, templates split
//! once, secrets read, every rule between keys validated.

use super::*;

/// Turns a parsed plan into the one the engine runs. `src` and `file` locate any error.
pub fn resolve(
    p: PlanFile,
    src: &str,
    file: &Path,
    o: &Overrides,
    secrets: &dyn SecretSource,
) -> Result<SoakPlan, PlanError> {
    let at = |span: Range<usize>, msg: String, fix: &str| {
        let mut e = locate(src, file, span, &msg);
        if !fix.is_empty() {
            e.fix = Some(fix.to_string());
        }
        e
    };
    let top = |msg: String, fix: &str| {
        PlanError(Box::new(Located {
            file: file.to_owned(),
            line: 1,
            column: 1,
            key: None,
            message: msg,
            fix: (!fix.is_empty()).then(|| fix.to_string()),
            text: String::new(),
        }))
    };

    let duration = o.duration.or(p.duration.map(|d| d.0)).ok_or_else(|| {
        top(
            "no duration: the plan has no `duration` and --duration was not given".into(),
            "add `duration = \"10m\"` at the top of the plan, or pass --duration 10m",
        )
    })?;
    if duration.is_zero() {
        return Err(top(
            "the duration is zero".into(),
            "give a positive duration, e.g. --duration 10m",
        ));
    }
    let interval = o
        .interval
        .or(p.interval.map(|d| d.0))
        .unwrap_or(Duration::from_secs(10));
    if interval < Duration::from_millis(100) {
        return Err(top(
            format!(
                "the progress interval {} is under 100ms",
                crate::journal::secs(interval.as_secs_f64())
            ),
            "set `interval` (or --interval) to 100ms or more; 10s suits most soaks",
        ));
    }
    for (i, a) in p.asserts.iter().enumerate() {
        if let Err(why) = crate::analyze::asserts::parse(a.get_ref()) {
            return Err(at(
                a.span(),
                format!("asserts[{i}] '{}': {why}", a.get_ref()),
                "fix the threshold as the grammar says",
            ));
        }
    }
    if !(0.0..=1.0).contains(p.max_error_rate.get_ref()) {
        return Err(at(
            p.max_error_rate.span(),
            format!(
                "max_error_rate {} is not a fraction",
                p.max_error_rate.get_ref()
            ),
            "write it between 0 and 1, e.g. 0.001 for one in a thousand",
        ));
    }
    if p.timeout.0.is_zero() || p.check_timeout.0.is_zero() {
        return Err(top(
            "timeout and check_timeout must be more than zero".into(),
            "e.g. timeout = \"30s\"",
        ));
    }

    // Secrets: each must be found now; there is no fallback.
    let mut values: BTreeMap<String, String> = BTreeMap::new();
    for (name, r) in &p.secrets {
        let span = r.span();
        let r = r.get_ref();
        let v = match (&r.secret_env, &r.secret_file) {
            (Some(var), None) => match secrets.env(var) {
                Some(v) if !v.is_empty() => v,
                _ => {
                    return Err(at(
                        span,
                        format!(
                            "secrets.{name}: the environment variable {var} (secret_env) is not set or is empty"
                        ),
                        &format!("export {var} before running witness; the plan holds no fallback on purpose"),
                    ))
                }
            },
            (None, Some(path)) => {
                let v = secrets.file(path).map_err(|e| {
                    at(
                        span.clone(),
                        format!(
                            "secrets.{name}: could not read secret_file {}: {e}",
                            path.display()
                        ),
                        "point secret_file at a readable file holding only the secret",
                    )
                })?;
                let v = v.trim_end_matches(['\n', '\r']).to_string();
                if v.is_empty() {
                    return Err(at(
                        span,
                        format!("secrets.{name}: secret_file {} is empty", path.display()),
                        "put the secret in the file",
                    ));
                }
                v
            }
            _ => {
                return Err(at(
                    span,
                    format!("secrets.{name} must name exactly one of secret_env or secret_file"),
                    "write secret_env = \"NAME\" or secret_file = \"PATH\"",
                ))
            }
        };
        if v.len() < 4 {
            return Err(at(
                span,
                format!(
                    "secrets.{name} is {} bytes long: too short to redact safely",
                    v.len()
                ),
                "use a real credential (4 bytes or more)",
            ));
        }
        if HeaderValue::from_str(&v).is_err() {
            return Err(at(
                span,
                format!("secrets.{name} holds characters a header cannot carry"),
                "remove control characters and newlines from the secret",
            ));
        }
        values.insert(name.clone(), v);
    }

    let transport = p
        .target
        .transport
        .as_ref()
        .map(|t| *t.get_ref())
        .unwrap_or(Transport::Http);
    let stdio = transport == Transport::Stdio;
    let base = if stdio {
        // The server's pipes are its only door: a URL for it would contradict the plan.
        if let Some(b) = &p.target.base_url {
            return Err(at(
                b.span(),
                format!("{STDIO} talks to the server over its stdin/stdout, so it has no base_url"),
                "remove base_url, or set transport = \"http\" to reach the server at a URL",
            ));
        }
        if let Some(b) = &o.base_url {
            return Err(top(
                format!("--base-url {b} contradicts the plan's {STDIO}: over stdio the server has no URL"),
                "drop --base-url, or set transport = \"http\" in the plan",
            ));
        }
        if let Some(h) = &p.target.health {
            return Err(at(
                h.span(),
                format!("{STDIO}: health is MCP ping on the server's pipe, so target.health has no URL to ask"),
                "remove health from [target]",
            ));
        }
        None
    } else {
        let base_text = match (&o.base_url, &p.target.base_url) {
            (Some(b), _) => b.clone(),
            (None, Some(b)) => b.get_ref().clone(),
            (None, None) => {
                return Err(top(
                    "no base URL: [target] has no base_url and --base-url was not given".into(),
                    "add base_url = \"http://127.0.0.1:8000\" under [target] (or, for an MCP server witness starts and talks to over its stdin/stdout, transport = \"stdio\")",
                ))
            }
        };
        let base_span = p.target.base_url.as_ref().map(|b| b.span()).unwrap_or(0..0);
        // Named by where it was written: the flag, or the plan's key.
        let what = if o.base_url.is_some() {
            "--base-url"
        } else {
            "target.base_url"
        };
        let base =
            crate::load::url::http_url(what, base_text.trim_end_matches('/')).map_err(|why| {
                let fix = "write it like http://127.0.0.1:8000 or https://127.0.0.1:8443";
                match o.base_url {
                    Some(_) => top(why, fix),
                    None => at(base_span.clone(), why, fix),
                }
            })?;
        Some(base)
    };
    let join = |path_or_url: &str, span: Range<usize>| -> Result<Uri, PlanError> {
        let text = match (path_or_url.starts_with('/'), &base) {
            (true, Some(base)) => {
                format!("{}{}", base.to_string().trim_end_matches('/'), path_or_url)
            }
            (true, None) => {
                return Err(at(
                    span,
                    format!("{path_or_url:?} is a path, and a plan with {STDIO} has no base URL to join it to"),
                    "give a whole URL like \"http://127.0.0.1:9000/stats\" (another service on loopback), or a command",
                ))
            }
            (false, _) => path_or_url.to_string(),
        };
        text.parse::<Uri>()
            .ok()
            .filter(|u| matches!(u.scheme_str(), Some("http" | "https")) && u.host().is_some())
            .ok_or_else(|| {
                at(
                    span,
                    format!("{path_or_url:?} is neither a path starting with / nor an http:// or https:// URL"),
                    "write a path like \"/v1/embed\" or a URL like \"http://127.0.0.1:9000/x\"",
                )
            })
    };
    let headers_of = |h: &BTreeMap<String, Spanned<String>>| -> Result<HeaderMap, PlanError> {
        let mut map = HeaderMap::new();
        for (k, v) in h {
            let name = HeaderName::from_bytes(k.as_bytes()).map_err(|_| {
                at(
                    v.span(),
                    format!("{k:?} is not a header name"),
                    "header names are letters, digits and dashes",
                )
            })?;
            let (text, secret) = substitute_secrets(v.get_ref(), &values).map_err(|m| {
                at(
                    v.span(),
                    m,
                    "declare it under [secrets.NAME] with secret_env or secret_file",
                )
            })?;
            let mut value = HeaderValue::from_str(&text).map_err(|_| {
                at(
                    v.span(),
                    format!("the value of header {k} has characters a header cannot carry"),
                    "",
                )
            })?;
            if secret {
                value.set_sensitive(true);
            }
            map.append(name, value);
        }
        Ok(map)
    };

    // Kinds, in name order.
    let mut kinds = Vec::new();
    let mut kind_index: BTreeMap<String, usize> = BTreeMap::new();
    for (name, k) in &p.kinds {
        let span = k.span();
        let k = k.get_ref();
        let method =
            Method::from_bytes(k.method.to_ascii_uppercase().as_bytes()).map_err(|_| {
                at(
                    span.clone(),
                    format!("kinds.{name}: {:?} is not an HTTP method", k.method),
                    "",
                )
            })?;
        let uri = match (stdio, &k.mcp, &k.path, &k.url) {
            (true, None, ..) => {
                return Err(at(
                    span,
                    format!("kinds.{name} is a plain HTTP request (it has no `mcp` key), but the plan's {STDIO} speaks MCP over the server's stdin/stdout: there is no HTTP server to send it to"),
                    "give the kind mcp = \"TOOL\" to call a tool over the pipe, or remove it (HTTP kinds need transport = \"http\" and a base_url)",
                ))
            }
            (true, Some(_), None, None) => None,
            (true, Some(_), ..) => {
                return Err(at(
                    span,
                    format!("kinds.{name}: with {STDIO} an MCP kind has no path or url (the server's stdin/stdout is its endpoint)"),
                    "remove path and url from this kind",
                ))
            }
            (false, _, Some(p), None) | (false, _, None, Some(p)) => Some(join(p, span.clone())?),
            (false, ..) => {
                return Err(at(
                    span,
                    format!("kinds.{name} needs exactly one of path or url"),
                    "write path = \"/v1/embed\" (joined to the base URL) or url = \"http://…\"",
                ))
            }
        };
        if stdio && !k.headers.is_empty() {
            // A header (a secret's, perhaps) would silently go nowhere.
            return Err(at(
                span,
                format!("kinds.{name}: with {STDIO} there are no HTTP headers to send"),
                "remove headers from this kind",
            ));
        }
        if k.body.get_ref().contains("${secret.") {
            return Err(at(
                k.body.span(),
                format!("kinds.{name}: the body names a secret"),
                "secrets go in headers only, so no body, URL or journal line can carry one",
            ));
        }
        let vars: Vec<(String, Vec<String>)> =
            k.vars.iter().map(|(a, b)| (a.clone(), b.clone())).collect();
        if let Some((v, _)) = vars.iter().find(|(_, vals)| vals.is_empty()) {
            return Err(at(
                span,
                format!("kinds.{name}.vars.{v} has no values"),
                "give at least one variant, e.g. [\"[1]\", \"[1,2]\"]",
            ));
        }
        let body = split_template(k.body.get_ref(), &vars).map_err(|m| {
            at(
                k.body.span(),
                format!("kinds.{name}: {m}"),
                "declare it under vars, or use ${id}",
            )
        })?;
        kind_index.insert(name.clone(), kinds.len());
        kinds.push(Kind {
            name: name.clone(),
            method,
            uri,
            headers: headers_of(&k.headers)?,
            shown_headers: as_written(&k.headers),
            body,
            vars,
            weight: k.weight,
            tool: k.mcp.clone(),
        });
        if let Some(tool) = &k.mcp {
            mcp_kind_check(&kinds[kinds.len() - 1], tool, span.clone(), &at)?;
        }
    }
    let lookup = |names: &[Spanned<String>],
                  kind_index: &BTreeMap<String, usize>|
     -> Result<Vec<usize>, PlanError> {
        names
            .iter()
            .map(|n| {
                kind_index.get(n.get_ref()).copied().ok_or_else(|| {
                    at(
                        n.span(),
                        format!("there is no kind named {:?}", n.get_ref()),
                        &format!(
                            "declare [kinds.{}], or use one of: {}",
                            n.get_ref(),
                            kind_index.keys().cloned().collect::<Vec<_>>().join(", ")
                        ),
                    )
                })
            })
            .collect()
    };

    let mut drivers = Vec::new();
    for dspec in &p.drivers {
        let span = dspec.span();
        let ds = dspec.get_ref();
        let chosen: Vec<(usize, u32)> = if ds.kinds.is_empty() {
            kinds
                .iter()
                .enumerate()
                .filter(|(_, k)| k.weight > 0)
                .map(|(i, k)| (i, k.weight))
                .collect()
        } else {
            lookup(&ds.kinds, &kind_index)?
                .into_iter()
                .map(|i| (i, kinds[i].weight.max(1)))
                .collect()
        };
        if chosen.is_empty() {
            return Err(at(
                span,
                "this driver group has no kind to send".into(),
                "declare a [kinds.NAME] with weight above 0, or list kinds = [\"NAME\"]",
            ));
        }
        if ds.cycle.is_empty() || ds.cycle.iter().all(|ph| *ph == Phase::Idle) {
            return Err(at(
                span,
                "the driver's cycle sends nothing".into(),
                "cycle needs burst or steady, e.g. cycle = [\"burst\", \"steady\", \"idle\"]",
            ));
        }
        if ds.count == 0 {
            return Err(at(
                span,
                "count is 0".into(),
                "remove the group or set count = 1",
            ));
        }
        drivers.push(Driver {
            count: ds.count,
            kinds: chosen,
            cycle: ds.cycle.clone(),
            burst: (ds.burst.requests, ds.burst.gap),
            steady: (ds.steady.requests, ds.steady.gap),
            idle: ds.idle.for_,
        });
    }
    let mut readers = Vec::new();
    for rspec in &p.readers {
        let span = rspec.span();
        let rs = rspec.get_ref();
        if rs.get.is_empty() || rs.count == 0 {
            return Err(at(
                span,
                "a reader group needs count ≥ 1 and at least one endpoint in get".into(),
                "e.g. get = [\"/health\", \"/stats\"]",
            ));
        }
        if stdio {
            return Err(at(
                span,
                format!(
                    "this reader group polls GET {}, a plain HTTP request, but the plan's {STDIO} speaks MCP over the server's stdin/stdout: there is no HTTP server to poll",
                    rs.get[0]
                ),
                "remove the [[readers]] group (or set transport = \"http\" with a base_url)",
            ));
        }
        let headers = headers_of(&rs.headers)?;
        let mut ix = Vec::new();
        for g in &rs.get {
            let uri = join(g, span.clone())?;
            let name = format!("GET {g}");
            let i = match kind_index.get(&name) {
                Some(&i) => i,
                None => {
                    kind_index.insert(name.clone(), kinds.len());
                    kinds.push(Kind {
                        name,
                        method: Method::GET,
                        uri: Some(uri),
                        headers: headers.clone(),
                        shown_headers: as_written(&rs.headers),
                        body: vec![],
                        vars: vec![],
                        weight: 0,
                        tool: None,
                    });
                    kinds.len() - 1
                }
            };
            ix.push(i);
        }
        readers.push(Reader {
            count: rs.count,
            kinds: ix,
            gap: rs.gap,
        });
    }
    let mut background = Vec::new();
    for bspec in &p.background {
        let span = bspec.span();
        let bs = bspec.get_ref();
        if bs.kinds.is_empty() || bs.count == 0 || bs.every.0.is_zero() {
            return Err(at(
                span,
                "a background group needs count ≥ 1, at least one kind and every > 0".into(),
                "e.g. kinds = [\"collect\"], every = \"5s\"",
            ));
        }
        background.push(Background {
            count: bs.count,
            kinds: lookup(&bs.kinds, &kind_index)?,
            every: bs.every.0,
        });
    }
    let health = health_check(&p.target, stdio, &kinds, &join)?;
    if drivers.is_empty() && readers.is_empty() && background.is_empty() {
        return Err(top(
            "the plan has no workers: no [[drivers]], [[readers]] or [[background]]".into(),
            "add a [[drivers]] group (it sends every kind with a weight)",
        ));
    }
    let total: u64 = drivers.iter().map(|d| d.count as u64).sum::<u64>()
        + readers.iter().map(|r| r.count as u64).sum::<u64>()
        + background.iter().map(|b| b.count as u64).sum::<u64>();
    let max = crate::units::MAX_CONCURRENCY;
    if total > max as u64 {
        return Err(top(
            format!("the plan asks for {total} workers in all (drivers, readers and background counts); witness runs from 1 to {max}"),
            "lower the groups' count values so they add up to at most 10000",
        ));
    }

    let source = |get: &Option<String>,
                  command: &Option<Vec<String>>,
                  headers: &BTreeMap<String, Spanned<String>>,
                  pointer: &Option<String>,
                  what: &str,
                  span: Range<usize>|
     -> Result<Source, PlanError> {
        if let Some(ptr) = pointer {
            if !ptr.is_empty() && !ptr.starts_with('/') {
                return Err(at(
                    span,
                    format!("{what}: pointer {ptr:?} is not a JSON pointer"),
                    "JSON pointers start with /, e.g. \"/queue/depth\"",
                ));
            }
        }
        match (get, command) {
            (Some(g), None) => Ok(Source::Http {
                uri: join(g, span)?,
                headers: headers_of(headers)?,
                pointer: pointer.clone(),
            }),
            (None, Some(c)) if !c.is_empty() && pointer.is_none() => Ok(Source::Command(c.clone())),
            _ => Err(at(
                span,
                format!("{what} needs exactly one of get (with an optional pointer) or command"),
                "e.g. get = \"/stats\", pointer = \"/queued\"; or command = [\"sh\", \"-c\", \"…\"]",
            )),
        }
    };
    let mut checks = Vec::new();
    for c in &p.checks {
        let span = c.span();
        let c = c.get_ref();
        let what = format!("check {:?}", c.name);
        let expect = match (&c.equals, c.min, c.max) {
            (None, None, None) => None,
            (Some(v), None, None) => Some(Expect::Equals(v.clone())),
            (None, min, max) => Some(Expect::Range { min, max }),
            _ => {
                return Err(at(
                    span,
                    format!("{what}: equals cannot go with min or max"),
                    "use equals for an exact value, min/max for bounds",
                ))
            }
        };
        if expect.is_some() && c.pointer.is_none() {
            return Err(at(
                span,
                format!("{what}: equals/min/max need a pointer into the JSON body"),
                "add pointer = \"/field\"",
            ));
        }
        checks.push(Check {
            name: c.name.clone(),
            source: source(&c.get, &c.command, &c.headers, &c.pointer, &what, span)?,
            status: c.status,
            expect,
        });
    }
    let mut gauges = Vec::new();
    for g in &p.gauges {
        let span = g.span();
        let g = g.get_ref();
        let what = format!("gauge {:?}", g.name);
        if let Source::Http { pointer: None, .. } = source(
            &g.get,
            &g.command,
            &g.headers,
            &g.pointer,
            &what,
            span.clone(),
        )? {
            return Err(at(
                span,
                format!("{what}: an HTTP gauge needs a pointer to the number"),
                "add pointer = \"/field\"",
            ));
        }
        gauges.push(Gauge {
            name: g.name.clone(),
            source: source(&g.get, &g.command, &g.headers, &g.pointer, &what, span)?,
            drain: g.drain,
        });
    }
    let mut names = std::collections::BTreeSet::new();
    for n in checks
        .iter()
        .map(|c| &c.name)
        .chain(gauges.iter().map(|g| &g.name))
    {
        if !names.insert(n.clone()) {
            return Err(top(
                format!("two checks or gauges are both named {n:?}"),
                "give each check and gauge its own name",
            ));
        }
    }

    let inv = &p.invariants;
    Ok(SoakPlan {
        duration,
        interval,
        seed: o.seed.or(p.seed).unwrap_or_else(rand::random),
        limits: Limits {
            connect: p
                .connect_timeout
                .map(|d| d.0)
                .unwrap_or(p.timeout.0.min(Duration::from_secs(5))),
            whole: p.timeout.0,
            max_body: crate::load::client::DEFAULT_MAX_BODY,
        },
        check_timeout: p.check_timeout.0,
        drain_grace: p.drain_grace.0,
        fault_grace: p.fault_grace.0,
        max_error_rate: *p.max_error_rate.get_ref(),
        asserts: p.asserts.iter().map(|a| a.get_ref().clone()).collect(),
        rejection: Rejection {
            statuses: p.reject_status.clone(),
            body_marker: (!p.reject_body.is_empty()).then(|| p.reject_body.clone()),
            accepted: Vec::new(),
        },
        transport,
        base,
        health,
        ready_timeout: p.target.ready_timeout.0,
        kinds,
        drivers,
        readers,
        background,
        invariants: Invariants {
            health: inv.health,
            same_identity: inv.same_identity,
            rss_limit: inv.rss_limit.map(|s| s.0),
            fatal_labels: inv.fatal_labels.clone(),
            fatal_log: inv.fatal_log.clone(),
        },
        checks,
        gauges,
        secret_values: values.into_values().collect(),
    })
}

/// How health is asked (see the module's words): the plan's URL when it names one; MCP ping over
/// stdio, or for MCP kinds only; `/health` for HTTP kinds only; `/health`, else ping, for both.
pub(super) fn health_check(
    t: &TargetSpec,
    stdio: bool,
    kinds: &[Kind],
    join: &impl Fn(&str, Range<usize>) -> Result<Uri, PlanError>,
) -> Result<HealthCheck, PlanError> {
    if stdio {
        return Ok(HealthCheck::Ping(PingAt::Stdio));
    }
    if let Some(h) = &t.health {
        return Ok(HealthCheck::Url(join(h.get_ref(), h.span())?));
    }
    let ping = kinds.iter().find_map(|k| match (&k.tool, &k.uri) {
        (Some(_), Some(uri)) => Some(PingAt::Http {
            uri: uri.clone(),
            headers: k.headers.clone(),
        }),
        _ => None,
    });
    let http_kinds = kinds.iter().any(|k| k.tool.is_none());
    Ok(match (ping, http_kinds) {
        (None, _) => HealthCheck::Url(join("/health", 0..0)?),
        (Some(p), false) => HealthCheck::Ping(p),
        (Some(p), true) => HealthCheck::UrlOrPing(join("/health", 0..0)?, p),
    })
}

/// An MCP kind names a tool, and its body (every first variant, `${id}` as 0) is a JSON object.
pub(super) fn mcp_kind_check(
    k: &Kind,
    tool: &str,
    span: Range<usize>,
    at: &impl Fn(Range<usize>, String, &str) -> PlanError,
) -> Result<(), PlanError> {
    if tool.trim().is_empty() {
        return Err(at(
            span,
            format!("kinds.{}: mcp needs a tool name", k.name),
            "write mcp = \"search\" (see `witness mcp tools`)",
        ));
    }
    if k.body.is_empty() {
        return Ok(());
    }
    let text = k.render(0, &mut |_| 0);
    match serde_json::from_slice::<serde_json::Value>(&text) {
        Ok(v) if v.is_object() => Ok(()),
        _ => Err(at(
            span,
            format!(
                "kinds.{}: an MCP kind's body is the tool's arguments and must be a JSON object; with the first variants it reads {:?}",
                k.name,
                String::from_utf8_lossy(&text)
            ),
            "write body = '{\"query\": \"${q}\"}' with vars.q = [...]",
        )),
    }
}

pub(super) fn as_written(h: &BTreeMap<String, Spanned<String>>) -> BTreeMap<String, String> {
    h.iter()
        .map(|(k, v)| (k.clone(), v.get_ref().clone()))
        .collect()
}

/// Replaces `${secret.NAME}` with its value; says whether any was used. An unknown name is an error.
pub(super) fn substitute_secrets(
    text: &str,
    values: &BTreeMap<String, String>,
) -> Result<(String, bool), String> {
    let mut out = String::new();
    let mut rest = text;
    let mut used = false;
    while let Some(i) = rest.find("${secret.") {
        out.push_str(&rest[..i]);
        let after = &rest[i + "${secret.".len()..];
        let end = after
            .find('}')
            .ok_or_else(|| "an unclosed ${secret.… reference".to_string())?;
        let name = &after[..end];
        let v = values.get(name).ok_or_else(|| {
            format!("the header names secret {name:?}, which [secrets] does not declare")
        })?;
        out.push_str(v);
        used = true;
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok((out, used))
}
