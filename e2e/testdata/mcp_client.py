"""Drive Blendplane's MCP server with the official Python MCP SDK (PyPI mcp).

    python mcp_client.py stdio BLENDCTL ADDR TOKEN_FILE
    python mcp_client.py http URL TOKEN
    python mcp_client.py stdio-approvals BLENDCTL ADDR TOKEN_FILE
    python mcp_client.py http-approvals-2026 URL TOKEN

Each check prints one line; any failure raises (exit status 1). The Go test
(e2e/mcp_test.go) runs it against a live cluster and checks the control
plane's side afterwards.
"""

import asyncio
import base64
import hashlib

import anyio
import json
import re
import os
import sys
import tempfile

import mcp_types as types
from mcp import Client, ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError


def check(cond, what, detail=None):
    if not cond:
        raise AssertionError("%s: %s" % (what, json.dumps(detail, default=str)[:2000] if detail is not None else ""))
    print("ok:", what, flush=True)


async def exercise(session, upload=None):
    init = await session.initialize()
    check(init.server_info.name == "blendplane", "initialize (protocol %s)" % init.protocol_version, init.server_info)

    tools = {t.name: t for t in (await session.list_tools()).tools}
    for name in ("object.create", "object.delete", "scene.get_summary", "render.still", "plan.submit"):
        check(name in tools, "tool listed: " + name, sorted(tools))
    check("python.exec" not in tools, "python.exec not listed without the unsafe_ops flag", sorted(tools))
    create, delete, summary = tools["object.create"], tools["object.delete"], tools["scene.get_summary"]
    check("type" in create.input_schema.get("properties", {}), "object.create's input schema is the registry's", create.input_schema)
    check(create.output_schema is not None, "tools have an output schema")
    check(summary.annotations.read_only_hint is True, "scene.get_summary is read-only", summary.annotations)
    check(delete.annotations.destructive_hint is True, "object.delete is destructive", delete.annotations)
    check(create.annotations.destructive_hint is False and create.annotations.read_only_hint is False,
          "object.create is a safe write", create.annotations)

    lighting = tools.get("macro.three_point_lighting")
    check(lighting is not None and lighting.annotations.destructive_hint is False,
          "a macro is a tool, at its tools' level (light.create: a safe write)", lighting and lighting.annotations)

    res = await session.call_tool("object.create", {"type": "cube", "name": "McpCube", "location": [0, 0, 1]})
    sc = sc_create = res.structured_content
    check(not res.is_error and sc["status"] == "SUCCEEDED" and sc["scene_hash_after"] and sc["mcp_call_id"].startswith("mcp:"),
          "object.create: a receipt", sc)
    check(sc["result"]["name"] == "McpCube", "object.create's result", sc)

    res = await session.call_tool("object.set_transform", {"name": "Missing", "location": [1, 2, 3]})
    sc = res.structured_content
    check(res.is_error and sc["error_code"] == "NOT_FOUND" and sc["recoverable"] and sc["retry_hint"]
          and sc["minimal_repair_plan"], "a failing call returns the failure contract", sc)

    res = await session.call_tool("object.create", {"type": "nonsense", "name": "Bad"})
    sc = res.structured_content
    check(res.is_error and sc["error_code"] == "SCHEMA_INVALID" and sc["field_violations"], "bad args: SCHEMA_INVALID", sc)

    progress = []

    async def on_progress(done, total, message):
        progress.append((done, total, message))

    plan = {"operations": [
        {"operation_id": "a", "tool_name": "object.create", "args": {"type": "uv_sphere", "name": "Ball"}},
        {"operation_id": "b", "tool_name": "object.set_transform", "args": {"name": "Ball", "location": [2, 0, 1]}, "depends_on": ["a"]},
        {"operation_id": "c", "tool_name": "scene.get_summary", "args": {}, "depends_on": ["b"]},
        {"operation_id": "d", "tool_name": "macro.three_point_lighting", "args": {"target": "Ball"}, "depends_on": ["c"]},
    ]}
    res = await session.call_tool("plan.submit", plan, progress_callback=on_progress)
    sc = res.structured_content
    ids = [r["operation_id"] for r in sc["receipts"]]
    check(not res.is_error and ids[:3] == ["a", "b", "c"] and sorted(ids[3:]) == ["d:fill", "d:key", "d:rim"],
          "plan.submit: a receipt per operation and per macro step", sc)
    calls = {r["mcp_call_id"] for r in sc["receipts"]}
    check(len(calls) == 1 and calls.pop().startswith("mcp:"), "plan.submit: every receipt, macro steps too, carries the call's id", sc)
    check(len(progress) >= 6 and progress[-1][0] == 6 and progress[-1][1] == 6, "plan.submit: progress per receipt", progress)

    res = await session.call_tool("macro.three_point_lighting", {"target": "McpCube", "name_prefix": "Cube"})
    sc = res.structured_content
    check(not res.is_error and len(sc["receipts"]) == 3 and all(r["mcp_call_id"] == sc["receipts"][0]["mcp_call_id"]
          and r["mcp_call_id"].startswith("mcp:") for r in sc["receipts"]), "a macro call: its steps carry the call's id", sc)

    res = await session.call_tool("render.still", {"output": "mcp.png", "resolution": [64, 48], "samples": 1, "seed": 3})
    images = [c for c in res.content if c.type == "image"]
    links = [c for c in res.content if c.type == "resource_link"]
    check(not res.is_error and len(images) == 1 and images[0].mime_type == "image/png", "render.still returns the image", res.content)
    data = images[0].data if isinstance(images[0].data, bytes) else base64.b64decode(images[0].data)
    check(data[:4] == b"\x89PNG", "the image is a PNG")
    by_name = "blendplane://session/artifacts/mcp.png"
    check(len(links) == 1 and links[0].uri == by_name + "?sha256=" + res.structured_content["result"]["sha256"],
          "render.still links the version it wrote", links)
    art = await session.read_resource(links[0].uri)
    check(len(art.contents) == 1 and base64.b64decode(art.contents[0].blob) == data, "the artifact reads as a resource", art)

    # Two renders to one name in a plan: each receipt's image is its own.
    res = await session.call_tool("plan.submit", {"operations": [
        {"operation_id": "s1", "tool_name": "render.still", "args": {"output": "twice.png", "resolution": [64, 48], "samples": 1, "seed": 3}},
        {"operation_id": "s2", "tool_name": "render.still", "args": {"output": "twice.png", "resolution": [48, 36], "samples": 1, "seed": 3},
         "depends_on": ["s1"]},
    ]})
    shas = [r["result"]["sha256"] for r in res.structured_content["receipts"]]
    images = [c.data if isinstance(c.data, bytes) else base64.b64decode(c.data) for c in res.content if c.type == "image"]
    check(not res.is_error and len(set(shas)) == 2 and [hashlib.sha256(d).hexdigest() for d in images] == shas,
          "two renders to one name: each image is its receipt's version", shas)
    read = []
    for link in [c for c in res.content if c.type == "resource_link"]:
        read.append(hashlib.sha256(base64.b64decode((await session.read_resource(link.uri)).contents[0].blob)).hexdigest())
    newest = hashlib.sha256(base64.b64decode(
        (await session.read_resource("blendplane://session/artifacts/twice.png")).contents[0].blob)).hexdigest()
    check(read == shas and newest == shas[1], "two renders to one name: each link reads its receipt's version, the name the newest",
          (read, newest, shas))
    # A name with characters a URI template's {name} takes only encoded.
    res = await session.call_tool("render.still", {"output": "a+b&c=d@e$f:g.png", "resolution": [16, 16], "samples": 1, "seed": 3})
    link = [c for c in res.content if c.type == "resource_link"][0]
    got = hashlib.sha256(base64.b64decode((await session.read_resource(link.uri)).contents[0].blob)).hexdigest()
    check(not res.is_error and got == res.structured_content["result"]["sha256"], "a link to a name with + & = @ $ : reads", link.uri)

    listed = {str(r.uri): r for r in (await session.list_resources()).resources}
    check({"blendplane://session/summary", "blendplane://session/snapshot", "blendplane://session/registry",
           by_name} <= set(listed) and listed[by_name].mime_type == "image/png",
          "resources: the scene, the registry and the render the session made", sorted(listed))
    desc = listed[by_name].description or ""
    check(re.search(r"\(last by plan \S+, operation \S+\)", desc) is not None and listed[by_name].size is None,
          "the render's resource names the plan and operation that made it last, and no size (its newest may change)", desc)
    snapshot = json.loads((await session.read_resource("blendplane://session/snapshot")).contents[0].text)
    check(snapshot["scene_hash"] and "McpCube" in json.dumps(snapshot),
          "the snapshot resource: the canonical scene and its hash", json.dumps(snapshot)[:300])
    registry = json.loads((await session.read_resource("blendplane://session/registry")).contents[0].text)
    check(any(t["name"] == "object.create" for t in registry["tools"]), "the registry resource lists the tools", list(registry))
    for uri in ("blendplane://session/artifacts/nope.png", "blendplane://session/artifacts/..%2F..%2Fetc%2Fpasswd",
                "blendplane://session/artifacts/", by_name + "?sha256=" + "0" * 64, by_name + "?sha256=nope"):
        try:
            await session.read_resource(uri)
            raise AssertionError("read %s" % uri)
        except MCPError as e:
            check(e.code == -32602 and e.message == "Resource not found", "a resource that is not there: resource not found (%s)" % uri, e.error)
    if upload is not None:
        # An artifact over what a resource read carries: refused, not read.
        session_id = sc_create["mcp_call_id"].split(":")[1]
        await upload(session_id, "big.bin", 17 << 20)
        try:
            await session.read_resource("blendplane://session/artifacts/big.bin")
            raise AssertionError("read a 17 MiB artifact as a resource")
        except MCPError as e:
            check(e.code == -32603 and "blendctl download" in e.message, "a 17 MiB artifact is not read as a resource", e.error)

    summary = await session.read_resource("blendplane://session/summary")
    text = summary.contents[0].text
    check("McpCube" in text and "Ball" in text, "the summary resource shows the scene", text[:500])

    # A long render, cancelled once it reports its first frame: the server
    # turns the MCP cancel into CancelPlan (the Go test checks the plan).
    first_frame = anyio.Event()

    async def on_frame(done, total, message):
        if message and "/" in message:
            first_frame.set()

    async with anyio.create_task_group() as tg:
        async def long_render():
            await session.call_tool("render.animation", {"output_prefix": "long", "frame_start": 1, "frame_end": 200,
                                                         "resolution": [64, 48], "samples": 1}, progress_callback=on_frame)
            raise AssertionError("the long render finished: it was not cancelled")

        tg.start_soon(long_render)
        with anyio.fail_after(120):
            await first_frame.wait()
        tg.cancel_scope.cancel()
    check(True, "a long render cancelled after its first frame")
    res = await session.call_tool("scene.get_summary", {})
    check(not res.is_error, "the session works after a cancelled call", res.structured_content)

    prompts = {p.name for p in (await session.list_prompts()).prompts}
    check({"plan-a-scene", "repair-a-failure"} <= prompts, "prompts", sorted(prompts))
    got = await session.get_prompt("plan-a-scene", {"description": "a red cube on a floor"})
    check("a red cube on a floor" in got.messages[0].content.text, "a prompt with its argument", got.messages[0].content.text[:200])
    try:
        await session.get_prompt("plan-a-scene", {})
        raise AssertionError("a prompt without its required argument was made")
    except MCPError as e:
        check(e.code == -32602 and "description" in e.message, "a prompt without its required argument: invalid params", e.error)
    print("done", flush=True)


async def exercise_approval(session, asked):
    """On the default policy: object.delete waits for approval; the server
    asks through elicitation, showing the preview; approving runs it. On
    2026-07-28 the question comes as an input request in the call's result
    and the client retries the call with the answer (multi round-trip)."""
    res = await session.call_tool("object.create", {"type": "cube", "name": "Doomed"})
    check(not res.is_error, "object.create", res.structured_content)
    res = await session.call_tool("object.delete", {"name": "Doomed"})
    check(len(asked) == 1 and "- objects/Doomed" in asked[0], "the user was asked, with the preview's diff", asked)
    check(not res.is_error and res.structured_content["status"] == "SUCCEEDED", "approved through elicitation, the delete ran",
          res.structured_content)
    res = await session.call_tool("object.create", {"type": "cube", "name": "Kept"})
    res = await session.call_tool("object.delete", {"name": "Kept"})
    sc = res.structured_content
    check(len(asked) == 2 and res.is_error and sc["error_code"] == "APPROVAL_REJECTED", "rejected through elicitation: nothing ran", sc)
    print("done", flush=True)


async def exercise_waiting(session, approve, other_plan):
    """On the default policy, a client without elicitation: object.delete
    returns at once, saying it waits and for which approval; plan.wait
    returns the receipt once a person approves (approve runs blendctl). A
    cancelled plan.wait leaves the plan waiting; another session's plan
    (other_plan) cannot be waited for."""
    res = await session.call_tool("object.create", {"type": "cube", "name": "Waits"})
    check(not res.is_error, "object.create", res.structured_content)
    res = await session.call_tool("object.delete", {"name": "Waits"})
    sc = res.structured_content
    check(not res.is_error and sc["status"] == "AWAITING_APPROVAL" and sc["approval_id"] and sc["request_id"],
          "a client that cannot be asked: the call says it waits, with the approval id", sc)
    res = await session.call_tool("plan.wait", {"request_id": other_plan})
    check(res.is_error and res.structured_content["error_code"] == "SCHEMA_INVALID",
          "plan.wait: only this session's plans, not " + other_plan, res.structured_content)
    with anyio.move_on_after(1) as scope:  # the host gives up on the wait: its cancel
        await session.call_tool("plan.wait", {"request_id": sc["request_id"]})
    check(scope.cancelled_caught, "a plan.wait cancelled while the plan waits")
    waited = {}

    async def wait():
        waited["res"] = await session.call_tool("plan.wait", {"request_id": sc["request_id"]})

    async with anyio.create_task_group() as tg:
        tg.start_soon(wait)
        await anyio.sleep(0.5)
        await approve(sc["approval_id"])
    res = waited["res"]
    check(not res.is_error and res.structured_content["status"] == "SUCCEEDED" and res.structured_content["result"]["deleted"],
          "plan.wait: the delete ran once approved", res.structured_content)
    print("done", flush=True)


async def main():
    mode = sys.argv[1]
    if mode == "stdio-waiting":
        blendctl, addr, token_file, other_plan = sys.argv[2:6]

        async def approve(approval_id):
            await anyio.run_process([blendctl, "--addr", addr, "--token-file", token_file, "approve", approval_id])

        params = StdioServerParameters(command=blendctl, args=["--addr", addr, "--token-file", token_file, "mcp"])
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                await exercise_waiting(session, approve, other_plan)
        return
    if mode == "stdio-approvals":
        blendctl, addr, token_file = sys.argv[2:5]
        asked = []

        async def on_elicit(context, params):
            asked.append(params.message)
            return types.ElicitResult(action="accept", content={"decision": "approve" if len(asked) == 1 else "reject"})

        params = StdioServerParameters(command=blendctl, args=["--addr", addr, "--token-file", token_file, "mcp"])
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write, elicitation_callback=on_elicit) as session:
                await session.initialize()
                await exercise_approval(session, asked)
        return
    if mode == "http-approvals-2026":
        url, token = sys.argv[2:4]
        asked = []

        async def on_elicit(context, params):
            asked.append(params.message)
            return types.ElicitResult(action="accept", content={"decision": "approve" if len(asked) == 1 else "reject"})

        async with create_mcp_http_client(headers={"Authorization": "Bearer " + token}) as http:
            async with Client(streamable_http_client(url, http_client=http), mode="2026-07-28",
                              elicitation_callback=on_elicit) as client:
                check(client.protocol_version == "2026-07-28", "sessionless revision", client.protocol_version)
                await client.list_tools()
                await exercise_approval(client, asked)
        return
    if mode == "stdio":
        blendctl, addr, token_file = sys.argv[2:5]

        async def upload(session_id, name, size):
            path = os.path.join(tempfile.mkdtemp(), name)
            with open(path, "wb") as f:
                f.write(b"\0" * size)
            await anyio.run_process([blendctl, "--addr", addr, "--token-file", token_file, "upload", path, "--session", session_id])

        params = StdioServerParameters(command=blendctl, args=["--addr", addr, "--token-file", token_file, "mcp"])
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                await exercise(session, upload)
    elif mode == "http":
        url, token = sys.argv[2:4]
        async with create_mcp_http_client(headers={"Authorization": "Bearer " + token}) as http:
            async with streamable_http_client(url, http_client=http) as (read, write):
                async with ClientSession(read, write) as session:
                    await exercise(session)
    else:
        raise SystemExit("unknown mode " + mode)


if __name__ == "__main__":
    asyncio.run(main())
