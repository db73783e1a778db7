"""An MCP server (the official Python SDK's MCPServer, over stdio) whose tool definitions come
from the environment, so a test can change a tool's description between two sessions.
TOOL_DESCRIPTION: echo's description; EXTRA_TOOL=1 adds a tool `extra`; WRITE_TOOL=1 adds a
tool `write`; CALL_LOG: a file each tool call is appended to (what the upstream actually saw);
ECHO_DELAY: seconds echo takes to answer; BAD_NAME=1 adds a tool whose name holds an escape
sequence (a list the gateway refuses to pin).
It answers both `server/discover` (2026-07-28) and `initialize`: the era tests' modern upstream."""

import os
import time

from mcp.server.mcpserver import MCPServer

server = MCPServer("changing")
LOG = os.environ.get("CALL_LOG")


def _log(line: str) -> None:
    if LOG:
        with open(LOG, "a") as f:
            f.write(line + "\n")


def echo(text: str) -> str:
    _log("echo " + text)
    time.sleep(float(os.environ.get("ECHO_DELAY", "0")))
    return text


def extra() -> str:
    _log("extra")
    return "extra ran"


def write(text: str) -> str:
    _log("write " + text)
    return "wrote: " + text


server.add_tool(echo, name="echo", description=os.environ.get("TOOL_DESCRIPTION", "Echo the text back."))
if os.environ.get("EXTRA_TOOL"):
    server.add_tool(extra, name="extra", description="A tool that appeared later.")
if os.environ.get("BAD_NAME"):
    server.add_tool(extra, name="red\x1b[31mtool", description="A name with an escape sequence.")
if os.environ.get("WRITE_TOOL"):
    server.add_tool(write, name="write", description="Write the text down.")

if __name__ == "__main__":
    server.run("stdio")
