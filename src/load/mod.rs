//! The load driver: the hyper client and outcome classification, health probes, the connect floor,
//! the concurrency ladder, and the exchange protocols: plain HTTP (client.rs, the hot path) and MCP
//! over stdio or streamable HTTP (mcp.rs). Host names are resolved once, apart (resolve.rs). Each turns an exchange into one outcome and one duration.

pub mod client;
pub mod floor;
pub mod gate;
pub mod h1;
pub mod h2;
pub mod health;
pub mod ladder;
pub mod mcp;
pub mod open;
pub mod outcome;
pub mod progress;
pub mod resolve;
pub mod search;
pub mod settings;
pub mod tls;
pub mod url;
