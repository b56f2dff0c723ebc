"""A small MCP server on stdio (newline-delimited JSON-RPC, standard library only) for the console's
browser tests: two file tools, each call answered from a fixed table."""

from __future__ import annotations

import json
import sys

TOOLS = [
    {
        "name": "read_file",
        "description": "Read a text file from the project sandbox",
        "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    },
    {
        "name": "list_dir",
        "description": "List the entries of a directory",
        "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}},
    },
]


def answer(message: dict) -> dict | None:
    method, params = message.get("method"), message.get("params") or {}
    if "id" not in message:
        return None  # a notification
    if method == "initialize":
        result = {
            "protocolVersion": params.get("protocolVersion", "2025-06-18"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "files", "version": "1.0.0"},
        }
    elif method == "ping":
        result = {}
    elif method == "tools/list":
        result = {"tools": TOOLS}
    elif method == "tools/call":
        name, args = params.get("name"), params.get("arguments") or {}
        if name == "read_file":
            result = {"content": [{"type": "text", "text": f"contents of {args.get('path', '?')}"}]}
        elif name == "list_dir":
            result = {"content": [{"type": "text", "text": "README.md\nsrc/"}]}
        else:
            return {"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32602, "message": "unknown tool"}}
    else:
        return {"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32601, "message": "method not found"}}
    return {"jsonrpc": "2.0", "id": message["id"], "result": result}


for line in sys.stdin:
    if line.strip():
        reply = answer(json.loads(line))
        if reply is not None:
            sys.stdout.write(json.dumps(reply) + "\n")
            sys.stdout.flush()
