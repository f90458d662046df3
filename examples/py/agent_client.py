"""An agent's side of `witness mcp serve`: the official MCP Python SDK's stdio client.

usage: agent_client.py CALLS_JSON -- SERVER…
Starts SERVER (e.g. `witness mcp serve`), lists its tools — checking every input and output schema
is a valid JSON Schema (jsonschema, draft 2020-12) — then makes each call of CALLS_JSON, a list of
{"tool": NAME, "args": {...}} or {"resource": URI} or {"resources": true} (a listing, every page),
in order. Each call's structured content is validated against the tool's output schema. Prints one
JSON line per step on stdout: {"tools": [...]} first, then for each call
{"tool", "is_error", "structured", "text", "progress": [messages], "valid": true|"why"}, or
{"resource", "mime", "size", "head"}, or {"resources": [uri…]}."""
import json
import os
import sys

import anyio
import jsonschema
from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client


async def main() -> None:
    calls = json.loads(sys.argv[1])
    cmd = sys.argv[3:] if sys.argv[2] == "--" else sys.argv[2:]
    params = StdioServerParameters(command=cmd[0], args=cmd[1:], env=dict(os.environ))
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            with anyio.fail_after(20):
                await session.initialize()
                listed = await session.list_tools()
            schemas = {}
            for t in listed.tools:
                jsonschema.Draft202012Validator.check_schema(t.input_schema)
                if t.output_schema is not None:
                    jsonschema.Draft202012Validator.check_schema(t.output_schema)
                schemas[t.name] = t.output_schema
            print(json.dumps({"tools": [t.name for t in listed.tools]}), flush=True)
            for c in calls:
                if "resources" in c:
                    uris, cursor = [], None
                    while True:
                        page = await session.list_resources(params=types.PaginatedRequestParams(cursor=cursor) if cursor else None)
                        uris += [str(r.uri) for r in page.resources]
                        cursor = page.next_cursor
                        if not cursor:
                            break
                    print(json.dumps({"resources": uris}), flush=True)
                    continue
                if "resource" in c:
                    r = await session.read_resource(c["resource"])
                    body = r.contents[0]
                    text = getattr(body, "text", "")
                    print(json.dumps({"resource": c["resource"], "mime": body.mime_type,
                                      "size": len(text), "head": text[:200]}), flush=True)
                    continue
                progress = []

                async def on_progress(p, total, message):
                    progress.append(message or f"{p}/{total}")

                with anyio.fail_after(120):
                    r = await session.call_tool(c["tool"], c.get("args", {}), progress_callback=on_progress)
                valid = True
                if not r.is_error and schemas.get(c["tool"]) is not None:
                    try:
                        jsonschema.validate(r.structured_content, schemas[c["tool"]])
                    except jsonschema.ValidationError as e:
                        valid = f"{e.message} at {list(e.absolute_path)}"
                text = "".join(getattr(b, "text", "") for b in r.content)
                print(json.dumps({"tool": c["tool"], "is_error": bool(r.is_error),
                                  "structured": r.structured_content, "text": text,
                                  "progress": progress, "valid": valid}), flush=True)


anyio.run(main)
