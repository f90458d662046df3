//! The soak plan: a TOML file that declares the target, the request kinds (method, path, headers,
//! body templates with variants, weights), the worker groups (drivers cycling through burst, steady
//! and idle phases; readers polling GET endpoints; background workers at a bounded rate), the
//! invariants, checks and gauges, and secrets by reference only.
//!
//! A kind is a plain HTTP request, or an MCP tool call (`mcp = "TOOL"`, its body the arguments).
//! MCP kinds reach the server over streamable HTTP at the kind's `path` or `url` (`[target]
//! transport = "http"`, the default), or over the stdin/stdout of the server witness starts
//! (`transport = "stdio"`: no base URL, no paths, no plain HTTP kinds). Health is the target's
//! `health` URL when the plan names one; MCP `ping` over stdio, or for a plan of MCP kinds only;
//! for a plan that mixes both, `/health`, or `ping` when `/health` answers 404 while the server
//! starts (it has no such endpoint).
//!
//! Parsing is two steps. [`parse`] turns the text into [`PlanFile`] and reports any mistake with the
//! line, the column, the key and how to fix it. [`resolve`] turns that into a [`SoakPlan`] the engine
//! runs: URLs joined and parsed, templates split once, secrets read from the environment or a file.
//! A secret's value lives only in the request's header map (marked sensitive) and in the journal's

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use hyper::header::{HeaderName, HeaderValue};
use hyper::{HeaderMap, Method, Uri};
use serde::de::Error as _;
use serde::{Deserialize, Deserializer};
use toml::Spanned;

use crate::load::client::Limits;
use crate::load::outcome::Rejection;

mod file;
mod model;
mod parse;
mod template;
mod validate;
mod values;

pub use file::*;
pub use model::*;
pub use parse::*;
pub use template::*;
pub use validate::*;
pub use values::*;

#[cfg(test)]
mod tests;
