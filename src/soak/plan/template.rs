//! Body and path templates (`${var}`, `${id}`, `${secret.NAME}`), and the plan's summary for the
//! report.

use super::*;

/// Splits a body template into literal text, variables and `${id}`.
pub fn split_template(text: &str, vars: &[(String, Vec<String>)]) -> Result<Vec<Part>, String> {
    let mut parts = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("${") {
        if i > 0 {
            parts.push(Part::Lit(rest[..i].to_string()));
        }
        let after = &rest[i + 2..];
        let end = after
            .find('}')
            .ok_or_else(|| "the body has an unclosed ${".to_string())?;
        let name = &after[..end];
        if name == "id" {
            parts.push(Part::Id);
        } else {
            let ix = vars
                .iter()
                .position(|(n, _)| n == name)
                .ok_or_else(|| format!("the body uses ${{{name}}}, but vars has no {name:?}"))?;
            parts.push(Part::Var(ix));
        }
        rest = &after[end + 1..];
    }
    if !rest.is_empty() {
        parts.push(Part::Lit(rest.to_string()));
    }
    Ok(parts)
}

/// What the journal keeps about the plan: shapes and names, never a secret's value.
pub fn summary(p: &SoakPlan) -> serde_json::Value {
    let kinds: Vec<serde_json::Value> = p
        .kinds
        .iter()
        .map(|k| {
            serde_json::json!({
                "name": k.name,
                "method": k.method.as_str(),
                "url": k.uri.as_ref().map(|u| u.to_string()).unwrap_or_else(|| "stdio".into()),
                "mcp": k.tool,
                "weight": k.weight,
                "headers": k.shown_headers,
                "variants": k.vars.iter().map(|(n, v)| (n.clone(), v.len())).collect::<BTreeMap<_, _>>(),
            })
        })
        .collect();
    let range = |r: &DurRange| [r.min.as_secs_f64(), r.max.as_secs_f64()];
    serde_json::json!({
        "transport": p.transport,
        "base_url": p.base.as_ref().map(|b| b.to_string()),
        "health": p.health.describe(),
        "kinds": kinds,
        "drivers": p.drivers.iter().map(|d| serde_json::json!({
            "count": d.count,
            "kinds": d.kinds.iter().map(|(i, w)| serde_json::json!([p.kinds[*i].name, w])).collect::<Vec<_>>(),
            "cycle": d.cycle,
            "burst": {"requests": [d.burst.0.min, d.burst.0.max], "gap_s": range(&d.burst.1)},
            "steady": {"requests": [d.steady.0.min, d.steady.0.max], "gap_s": range(&d.steady.1)},
            "idle_s": range(&d.idle),
        })).collect::<Vec<_>>(),
        "readers": p.readers.iter().map(|r| serde_json::json!({
            "count": r.count,
            "kinds": r.kinds.iter().map(|i| p.kinds[*i].name.clone()).collect::<Vec<_>>(),
            "gap_s": range(&r.gap),
        })).collect::<Vec<_>>(),
        "background": p.background.iter().map(|b| serde_json::json!({
            "count": b.count,
            "kinds": b.kinds.iter().map(|i| p.kinds[*i].name.clone()).collect::<Vec<_>>(),
            "every_s": b.every.as_secs_f64(),
        })).collect::<Vec<_>>(),
        "checks": p.checks.iter().map(|c| c.name.clone()).collect::<Vec<_>>(),
        "gauges": p.gauges.iter().map(|g| serde_json::json!({"name": g.name, "drain": g.drain})).collect::<Vec<_>>(),
        "rss_limit_bytes": p.invariants.rss_limit,
        "timeout_s": p.limits.whole.as_secs_f64(),
        "secrets": p.secret_values.len(),
    })
}
