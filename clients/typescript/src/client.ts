// The TypeScript client of the Blendplane control plane: the generated
// messages and service (src/gen, protoc-gen-es, `make generate`) over
// @connectrpc/connect-node's gRPC transport, and a small layer: connect,
// negotiate, plans given as plain objects, receipts that resume a broken
// stream, wait, cancel, artifacts, approvals, and errors that carry the
// control plane's structured refusal. Runs on Node 22 as TypeScript (type
// stripping): no enums or namespaces here.

import { readFileSync, createReadStream, createWriteStream, renameSync, rmSync, statSync } from "node:fs";
import { basename, dirname, join, resolve } from "node:path";
import { createHash, randomBytes } from "node:crypto";
import { once } from "node:events";
import { create, fromBinary, type JsonObject } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient, type Client as Stub, type Interceptor } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import {
  Approval_State, ControlPlaneService, Decision, Plan_State, RepairPlanSchema, SafetyLevel,
  type Approval, type Artifact, type Plan, type Receipt, type RepairPlan, type SessionContract, type Session,
  type StreamReceiptsResponse,
} from "./gen/blendplane/controlplane/v1/controlplane_pb.js";

export * as pb from "./gen/blendplane/controlplane/v1/controlplane_pb.js";

/** One operation of a plan, as a plain object. */
export interface OperationInput {
  operation_id: string;
  tool_name: string;
  args?: JsonObject;
  depends_on?: string[];
  /** "read_only", "safe_write" (the default) or "destructive". */
  safety_level?: "read_only" | "safe_write" | "destructive";
  verify?: boolean;
}

/** A refusal of the client's own, as the control plane would make it. */
interface Refusal {
  reason: string;
  message: string;
  field: string;
  description: string;
}

/** A call the control plane refused or failed, with its structured details. */
export class BlendplaneError extends Error {
  readonly code: Code;
  readonly reason: string;
  readonly metadata: Record<string, string>;
  readonly fieldViolations: { field: string; description: string }[];
  readonly repairPlan?: RepairPlan;

  constructor(err: ConnectError | Refusal) {
    if (!(err instanceof ConnectError)) { // refused here, before anything was sent
      super(`${Code[Code.InvalidArgument]} ${err.reason}: ${err.message}`);
      this.name = "BlendplaneError";
      this.code = Code.InvalidArgument;
      this.reason = err.reason;
      this.metadata = {};
      this.fieldViolations = [{ field: err.field, description: err.description }];
      return;
    }
    const reason = reasonOf(err);
    // The control plane's messages start with their reason: said once.
    super(`${Code[err.code]} ${reason}: ${reason && err.rawMessage.startsWith(reason + ": ") ? err.rawMessage.slice(reason.length + 2) : err.rawMessage}`);
    this.name = "BlendplaneError";
    this.code = err.code;
    const info = detail(err, "google.rpc.ErrorInfo");
    this.reason = info ? str(fields(info), 1) : "";
    this.metadata = {};
    for (const entry of info ? fields(info).get(3) ?? [] : []) {
      const kv = fields(entry as Uint8Array);
      this.metadata[str(kv, 1)] = str(kv, 2);
    }
    this.fieldViolations = [];
    const bad = detail(err, "google.rpc.BadRequest");
    for (const v of bad ? fields(bad).get(1) ?? [] : []) {
      const f = fields(v as Uint8Array);
      this.fieldViolations.push({ field: str(f, 1), description: str(f, 2) });
    }
    this.repairPlan = err.findDetails(RepairPlanSchema)[0];
  }
}

/** Connects to a control plane: TLS with its CA when caFile is given
 * (beyond loopback it must be), the bearer token on every call. */
export function connect(address: string, opts: { token?: string; tokenFile?: string; caFile?: string } = {}): Client {
  const token = opts.tokenFile ? readFileSync(opts.tokenFile, "utf8").trim() : opts.token;
  const auth: Interceptor = (next) => (req) => {
    if (token) req.header.set("authorization", `Bearer ${token}`);
    return next(req);
  };
  const transport = createGrpcTransport({
    baseUrl: `${opts.caFile ? "https" : "http"}://${address}`,
    nodeOptions: opts.caFile ? { ca: readFileSync(opts.caFile) } : undefined,
    interceptors: [auth],
  });
  return new Client(createClient(ControlPlaneService, transport));
}

const safety = {
  read_only: SafetyLevel.READ_ONLY,
  safe_write: SafetyLevel.SAFE_WRITE,
  destructive: SafetyLevel.DESTRUCTIVE,
};
const operationFields = ["operation_id", "tool_name", "args", "depends_on", "safety_level", "verify"];

/** operations[i] as a message. A key it does not have (a misspelt
 * "depends_on", from JavaScript) or an unknown safety level is refused, as
 * the control plane refuses one: dropped, it would run another plan. */
function operation(o: OperationInput, i: number) {
  const refuse = (key: string, description: string) => {
    const field = `operations[${i}].${key}`;
    return new BlendplaneError({ reason: "SCHEMA_INVALID", message: `SCHEMA_INVALID: ${field}: ${description}`, field, description });
  };
  for (const key of Object.keys(o)) {
    if (!operationFields.includes(key)) throw refuse(key, `unknown field; an operation has ${operationFields.join(", ")}`);
  }
  const level = o.safety_level ?? "safe_write";
  if (!Object.hasOwn(safety, level)) throw refuse("safety_level", `${JSON.stringify(level)} is not one of ${Object.keys(safety).join(", ")}`);
  return {
    operationId: o.operation_id, toolName: o.tool_name, args: o.args ?? {}, dependsOn: o.depends_on ?? [],
    safetyLevel: safety[level], verify: o.verify ?? false,
  };
}
const terminal = new Set([Plan_State.SUCCEEDED, Plan_State.FAILED, Plan_State.CANCELLED, Plan_State.VALIDATED]);

export class Client {
  readonly stub: Stub<typeof ControlPlaneService>;

  constructor(stub: Stub<typeof ControlPlaneService>) {
    this.stub = stub;
  }

  /** Opens a session; its contract says what it may do. */
  async negotiate(opts: { clientName?: string; featureFlags?: string[]; blenderVersionRange?: string; agentSelector?: Record<string, string> } = {}): Promise<SessionContract> {
    const resp = await call(() => this.stub.negotiate({
      contractVersion: "1.0.0",
      blenderVersionRange: opts.blenderVersionRange ?? "",
      hostProfile: { clientName: opts.clientName ?? "blendplane-typescript", clientVersion: "0.1.0", featureFlags: opts.featureFlags ?? [] },
      agentSelector: opts.agentSelector ?? {},
    }));
    return resp.contract!;
  }

  async session(sessionId: string): Promise<Session> {
    return (await call(() => this.stub.getSession({ sessionId }))).session!;
  }

  async closeSession(sessionId: string): Promise<Session> {
    return (await call(() => this.stub.closeSession({ sessionId }))).session!;
  }

  /** Submits a plan. A refused one throws BlendplaneError; nothing ran. */
  async submit(sessionId: string, operations: OperationInput[], opts: { requestId?: string; atomic?: boolean; validateOnly?: boolean } = {}): Promise<Plan> {
    const ops = operations.map(operation); // refused before anything is sent
    const resp = await call(() => this.stub.submitPlan({
      sessionId,
      requestId: opts.requestId ?? `ts-${crypto.randomUUID().slice(0, 18)}`,
      atomic: opts.atomic ?? false,
      validateOnly: opts.validateOnly ?? false,
      operations: ops,
    }));
    return resp.plan!;
  }

  /** The session's plans, newest first (without their schedules). */
  async plans(sessionId: string): Promise<Plan[]> {
    return all((pageToken) => this.stub.listPlans({ sessionId, pageToken }), (resp) => resp.plans);
  }

  async plan(requestId: string): Promise<Plan> {
    return (await call(() => this.stub.getPlan({ requestId }))).plan!;
  }

  /** The plan's receipts from sequence start on, until it ends (with
   * events: its progress and approval events too). A stream that breaks
   * is opened again after the last receipt given, for up to retryForMs. */
  async *receipts(requestId: string, opts: { start?: number; events?: boolean; retryForMs?: number } = {}): AsyncGenerator<Receipt | StreamReceiptsResponse> {
    let next = BigInt(opts.start ?? 1);
    let deadline = 0;
    for (;;) {
      try {
        for await (const ev of this.stub.streamReceipts({ requestId, startSequence: next })) {
          deadline = 0;
          if (ev.event.case === "receipt") {
            next = ev.event.value.sequence + 1n;
            yield ev.event.value;
          } else if (opts.events) {
            yield ev;
          }
        }
        return;
      } catch (e) {
        const err = ConnectError.from(e);
        if (err.code !== Code.Unavailable && err.code !== Code.Internal) throw new BlendplaneError(err);
        deadline ||= Date.now() + (opts.retryForMs ?? 60_000);
        if (Date.now() > deadline) throw new BlendplaneError(err);
        await new Promise((r) => setTimeout(r, 200));
      }
    }
  }

  /** Follows a plan to its end: its final state and every receipt. */
  async wait(requestId: string): Promise<{ plan: Plan; receipts: Receipt[] }> {
    const receipts: Receipt[] = [];
    for await (const r of this.receipts(requestId)) receipts.push(r as Receipt);
    return { plan: await this.plan(requestId), receipts };
  }

  /** Submits a plan and waits for it. */
  async run(sessionId: string, operations: OperationInput[], opts: { requestId?: string; atomic?: boolean } = {}): Promise<{ plan: Plan; receipts: Receipt[] }> {
    const plan = await this.submit(sessionId, operations, opts);
    if (terminal.has(plan.state)) return { plan, receipts: [] };
    return this.wait(plan.requestId);
  }

  async cancel(requestId: string): Promise<Plan> {
    return (await call(() => this.stub.cancelPlan({ requestId }))).plan!;
  }

  /** Stores a file in the session (scene.import reads it by name), in chunks. */
  async upload(sessionId: string, path: string, name = basename(path)): Promise<Artifact> {
    async function* parts() {
      yield { part: { case: "header" as const, value: { sessionId, name, sizeBytes: BigInt(statSync(path).size) } } };
      for await (const chunk of createReadStream(path, { highWaterMark: 512 << 10 })) {
        yield { part: { case: "chunk" as const, value: new Uint8Array(chunk as Buffer) } };
      }
    }
    return (await call(() => this.stub.uploadArtifact(parts()))).artifact!;
  }

  /**
   * Saves an artifact (a render, an export, an upload) to dest, in chunks.
   * dest is replaced only by the whole content, checked against the
   * artifact's SHA-256: a failed download leaves it as it was.
   */
  async download(sessionId: string, name: string, dest: string): Promise<Artifact> {
    const tmp = join(dirname(resolve(dest)), `.download-${process.pid}-${randomBytes(6).toString("hex")}`);
    const out = createWriteStream(tmp, { mode: 0o600 });
    const digest = createHash("sha256");
    let artifact: Artifact | undefined;
    let done = false;
    try {
      try {
        for await (const part of this.stub.downloadArtifact({ sessionId, name })) {
          if (part.part.case === "artifact") artifact = part.part.value;
          else if (part.part.case === "chunk") {
            digest.update(part.part.value);
            if (!out.write(part.part.value)) await once(out, "drain");
          }
        }
      } catch (e) {
        throw new BlendplaneError(ConnectError.from(e));
      } finally {
        out.end();
        await once(out, "close");
      }
      const sum = digest.digest("hex");
      if (!artifact || sum !== artifact.sha256) {
        throw new BlendplaneError(new ConnectError(`downloaded ${name}: sha256 ${sum}, the artifact says ${artifact?.sha256 ?? "nothing"}`, Code.DataLoss));
      }
      renameSync(tmp, dest);
      done = true;
    } finally {
      if (!done) rmSync(tmp, { force: true });
    }
    return artifact;
  }

  async approvals(state: "pending" | "approved" | "rejected" | "cancelled" = "pending"): Promise<Approval[]> {
    const st = { pending: Approval_State.PENDING, approved: Approval_State.APPROVED, rejected: Approval_State.REJECTED, cancelled: Approval_State.CANCELLED }[state];
    return all((pageToken) => this.stub.listApprovals({ state: st, pageToken }), (resp) => resp.approvals);
  }

  async approve(approvalId: string): Promise<Approval> {
    return (await call(() => this.stub.resolveApproval({ approvalId, decision: Decision.APPROVE_ONCE }))).approval!;
  }

  async reject(approvalId: string): Promise<Approval> {
    return (await call(() => this.stub.resolveApproval({ approvalId, decision: Decision.REJECT }))).approval!;
  }
}

/** Every item of a paged list (AIP-158), asking for one page after another. */
async function all<R extends { nextPageToken: string }, T>(page: (pageToken: string) => Promise<R>, items: (resp: R) => T[]): Promise<T[]> {
  const out: T[] = [];
  let pageToken = "";
  do {
    const resp = await call(() => page(pageToken));
    out.push(...items(resp));
    pageToken = resp.nextPageToken;
  } while (pageToken);
  return out;
}

async function call<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (e) {
    throw new BlendplaneError(ConnectError.from(e));
  }
}

// The google.rpc details are read from their wire form (they are not part
// of the generated code): fields by number, length-delimited values only.

function detail(err: ConnectError, type: string): Uint8Array | undefined {
  for (const d of err.details) {
    if ("type" in d && d.type === type) return d.value;
  }
  return undefined;
}

function reasonOf(err: ConnectError): string {
  const info = detail(err, "google.rpc.ErrorInfo");
  return info ? str(fields(info), 1) : "";
}

function fields(buf: Uint8Array): Map<number, Uint8Array[]> {
  const out = new Map<number, Uint8Array[]>();
  let i = 0;
  const varint = () => {
    let v = 0, shift = 0, b = 0;
    do {
      b = buf[i++];
      v += (b & 0x7f) * 2 ** shift;
      shift += 7;
    } while (b & 0x80);
    return v;
  };
  while (i < buf.length) {
    const key = varint();
    const [field, wire] = [Math.floor(key / 8), key & 7];
    if (wire === 2) {
      const n = varint();
      out.set(field, [...(out.get(field) ?? []), buf.subarray(i, i + n)]);
      i += n;
    } else if (wire === 0) varint();
    else if (wire === 1) i += 8;
    else if (wire === 5) i += 4;
    else break;
  }
  return out;
}

function str(f: Map<number, Uint8Array[]>, n: number): string {
  const v = f.get(n)?.[0];
  return v ? new TextDecoder().decode(v) : "";
}

export { Code, Plan_State, fromBinary, create };
