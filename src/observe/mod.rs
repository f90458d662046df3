//! What a real client sends through `wrap`, read as it passes: the stdio relay (MCP JSON-RPC over
//! the server's stdin and stdout) and the recording HTTP proxy. Each passes every byte unchanged and
//! in order, reads a copy of what passed without holding bytes back for the reader, and turns each
//! exchange into the same journal record the load driver writes (journal/observed.rs names it).

pub mod proxy;
pub mod record;
pub mod relay;

/// The id of the next observed exchange: one counter for the relay and the proxy, so the records of
/// one wrap run never share an id.
pub fn next_exchange_id() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}
