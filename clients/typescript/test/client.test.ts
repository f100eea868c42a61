// The TypeScript client against a live control plane and agent (real
// Blender): e2e/typescript_client_test.go starts them and runs this with
// node --test, BLENDPLANE_ADDR and BLENDPLANE_TOKEN_FILE (an admin token),
// on the default policy (destructive operations wait for approval).

import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { mkdtempSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { BlendplaneError, Code, connect, pb, type Client } from "../src/client.ts";

let bp: Client;
let session: string;
const dir = mkdtempSync(join(tmpdir(), "bp-ts-"));

before(async () => {
  bp = connect(process.env.BLENDPLANE_ADDR!, { tokenFile: process.env.BLENDPLANE_TOKEN_FILE });
  session = (await bp.negotiate({ featureFlags: ["progress_events"] })).sessionId;
});

after(async () => {
  await bp.closeSession(session);
});

test("a plan runs; receipts resume from a sequence", async () => {
  const { plan, receipts } = await bp.run(session, [
    { operation_id: "box", tool_name: "object.create", args: { type: "cube", name: "TsBox" } },
    { operation_id: "look", tool_name: "scene.get_summary", depends_on: ["box"], safety_level: "read_only" },
  ], { requestId: "ts-hello" });
  assert.equal(plan.state, pb.Plan_State.SUCCEEDED);
  assert.deepEqual(receipts.map((r) => r.operationId), ["box", "look"]);
  const objects = (receipts[1].result as { objects: { name: string }[] }).objects;
  assert.ok(objects.some((o) => o.name === "TsBox"));
  assert.equal((await bp.session(session)).sceneHash, receipts[1].sceneHashAfter);
  const later: bigint[] = [];
  for await (const r of bp.receipts("ts-hello", { start: 2 })) later.push((r as pb.Receipt).sequence);
  assert.deepEqual(later, [2n]);
  assert.equal((await bp.plans(session))[0].requestId, "ts-hello");
});

test("a refusal carries the failure contract", async () => {
  await assert.rejects(
    bp.submit(session, [{ operation_id: "a", tool_name: "object.create", args: { type: "cube" }, depends_on: ["a"] }]),
    (err: BlendplaneError) => {
      assert.ok(err instanceof BlendplaneError);
      assert.equal(err.code, Code.InvalidArgument);
      assert.equal(err.reason, "GRAPH_CYCLE");
      assert.ok(err.message.startsWith("InvalidArgument GRAPH_CYCLE: ") && err.message.split("GRAPH_CYCLE").length === 2, err.message);
      assert.ok(err.fieldViolations[0].field.startsWith("operations[0]"));
      assert.ok(err.repairPlan && err.repairPlan.steps.length > 0);
      return true;
    },
  );
  await assert.rejects(bp.session("s-nope"), (err: BlendplaneError) => err.code === Code.NotFound && err.reason === "SESSION_NOT_FOUND");
  // From JavaScript, a misspelt key or level is refused before anything is
  // sent, as the control plane refuses one: dropped, the plan would run
  // without it.
  for (const [op, field] of [
    [{ operation_id: "a", tool_name: "object.create", args: {}, dependson: ["b"] }, "operations[0].dependson"],
    [{ operation_id: "a", tool_name: "object.create", args: {}, safety_level: "safe-write" }, "operations[0].safety_level"],
  ] as const) {
    await assert.rejects(bp.submit(session, [op as never], { requestId: "ts-typo" }),
      (err: BlendplaneError) => err.reason === "SCHEMA_INVALID" && err.fieldViolations[0].field === field);
  }
  await assert.rejects(bp.plan("ts-typo"), (err: BlendplaneError) => err.code === Code.NotFound);
});

test("upload, import, render, download", async () => {
  const obj = join(dir, "tri.obj");
  writeFileSync(obj, "o Tri\nv 0 0 0\nv 1 0 0\nv 0 1 0\nf 1 2 3\n");
  const art = await bp.upload(session, obj);
  assert.equal(art.sha256, createHash("sha256").update(readFileSync(obj)).digest("hex"));
  const { plan, receipts } = await bp.run(session, [
    { operation_id: "in", tool_name: "scene.import", args: { format: "obj", input: "tri.obj" } },
    { operation_id: "shot", tool_name: "render.still", depends_on: ["in"], args: { output: "ts.png", resolution: [64, 48], samples: 1 } },
  ]);
  assert.equal(plan.state, pb.Plan_State.SUCCEEDED);
  const dest = join(dir, "ts.png");
  const got = await bp.download(session, "ts.png", dest);
  assert.equal(got.sha256, receipts[1].artifacts[0].sha256);
  assert.equal(createHash("sha256").update(readFileSync(dest)).digest("hex"), got.sha256);
  // A failed download leaves the file it would have replaced as it was.
  const keep = join(dir, "keep.txt");
  writeFileSync(keep, "precious");
  await assert.rejects(bp.download(session, "nope.png", keep), (err: BlendplaneError) => err.code === Code.NotFound);
  assert.equal(readFileSync(keep, "utf8"), "precious");
  assert.deepEqual(readdirSync(dir).filter((f) => f.startsWith(".download-")), []);
});

test("an approval", async () => {
  const plan = await bp.submit(session, [{ operation_id: "rm", tool_name: "object.delete", args: { name: "TsBox" }, safety_level: "destructive" }]);
  assert.equal(plan.state, pb.Plan_State.AWAITING_APPROVAL);
  const waiting = (await bp.approvals()).filter((a) => a.requestId === plan.requestId);
  assert.equal(waiting.length, 1);
  await bp.approve(waiting[0].approvalId);
  const done = await bp.wait(plan.requestId);
  assert.equal(done.plan.state, pb.Plan_State.SUCCEEDED);
});
