//! The load driver: the hyper client and outcome classification, health probes, the connect floor,
//! the concurrency ladder, and the exchange protocols: plain HTTP (client.rs, the hot path) and MCP
//! over stdio or streamable HTTP (mcp.rs). Host names are resolved once, apart (resolve.rs). Each turns an exchange into one outcome and one duration.

/// hyper's `Write` for a wrapper that watches only what is read: every call goes through to its
/// `io` (the connection's counted and GOAWAY-reading wrappers share it).
macro_rules! write_through {
    ($ty:ident) => {
        impl<T: hyper::rt::Write + Unpin> hyper::rt::Write for $ty<T> {
            fn poll_write(
                mut self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                buf: &[u8],
            ) -> std::task::Poll<std::io::Result<usize>> {
                std::pin::Pin::new(&mut self.io).poll_write(cx, buf)
            }
            fn poll_flush(
                mut self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                std::pin::Pin::new(&mut self.io).poll_flush(cx)
            }
            fn poll_shutdown(
                mut self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                std::pin::Pin::new(&mut self.io).poll_shutdown(cx)
            }
            fn is_write_vectored(&self) -> bool {
                self.io.is_write_vectored()
            }
            fn poll_write_vectored(
                mut self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                bufs: &[std::io::IoSlice<'_>],
            ) -> std::task::Poll<std::io::Result<usize>> {
                std::pin::Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
            }
        }
    };
}
pub(crate) use write_through;

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
pub mod replay;
pub mod resolve;
pub mod search;
pub mod settings;
pub mod tls;
pub mod url;
