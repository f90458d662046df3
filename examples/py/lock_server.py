"""A stdio MCP server (the official SDK v2's MCPServer, once FastMCP) whose tool serialises on a lock:
`work(ms)` holds one asyncio lock for `ms` milliseconds, so calls that overlap queue behind each other
(the server answers each in turn); `echo(text)` answers at once and always the same. A negative `ms`
is a tool error. tests/record.rs records a session with it; replay plays it again faster."""
import asyncio

from mcp.server.mcpserver import MCPServer

mcp = MCPServer("lock-server")
lock = asyncio.Lock()


@mcp.tool()
async def work(ms: int) -> str:
    """Holds the server's one lock for `ms` milliseconds."""
    if ms < 0:
        raise ValueError(f"ms must be at least 0, not {ms}")
    async with lock:
        await asyncio.sleep(ms / 1000)
    return f"worked {ms} ms"


@mcp.tool()
def echo(text: str) -> str:
    """Returns the text it was given."""
    return text


if __name__ == "__main__":
    mcp.run()
