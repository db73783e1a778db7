"""A modern MCP server (the official Python SDK 2.x `MCPServer` over stdio, which answers both
`server/discover` and `initialize`): `echo` (allowed through assent) and `write` (held for a
human). CALL_LOG: a file each tool call is appended to (what the upstream actually saw)."""

import os

from mcp.server.mcpserver import MCPServer

server = MCPServer("modern")
LOG = os.environ.get("CALL_LOG")


def _log(line: str) -> None:
    if LOG:
        with open(LOG, "a") as f:
            f.write(line + "\n")


def echo(text: str) -> str:
    _log("echo " + text)
    return "echo: " + text


def write(text: str) -> str:
    _log("write " + text)
    return "wrote: " + text


server.add_tool(echo, name="echo", description="Echo the text back.")
server.add_tool(write, name="write", description="Write the text down.")

if __name__ == "__main__":
    server.run("stdio")
