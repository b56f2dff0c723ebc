"""The official MCP TypeScript SDK (`@modelcontextprotocol/sdk`, Node 22) as a client of the
gateway's MCP endpoints, beside the two Python SDK lines: the session handshake, tool calls, and a
server's sampling, elicitation, roots and log messages answered by the SDK's handlers, through
`/mcp/{server}` and `/mcp`. Reuses the MCP stack of test_mcp_sdk.py."""

from __future__ import annotations

from node_sdk import run_node
from test_mcp_sdk import MASTER, mcp_stack  # noqa: F401 (the fixture)


def test_the_typescript_sdk_through_one_server(mcp_stack):  # noqa: F811
    out = run_node("mcp_client.mjs", f"{mcp_stack['url']}/mcp/files", MASTER)
    assert out["server"] == "switchyard-mock-mcp", out
    assert out["sessionId"], out
    assert out["tools"] == 13 + 95, out
    assert out["echo"] == "from ts"
    assert out["sample"] == "sample: ts answer to ts?"
    assert out["elicit"] == 'elicit: accept {"name":"Grace"}'
    assert out["roots"] == "roots: file:///ts"
    assert out["log"] == "logged" and "mock" in out["logs"], out


def test_the_typescript_sdk_through_the_aggregated_endpoint(mcp_stack):  # noqa: F811
    out = run_node("mcp_client.mjs", f"{mcp_stack['url']}/mcp", MASTER, "search__")
    assert out["server"] == "switchyard", out
    assert out["echo"] == "from ts"
    assert out["sample"] == "sample: ts answer to ts?"
    assert out["log"] == "logged" and "search/mock" in out["logs"], out
