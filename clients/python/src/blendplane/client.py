"""The thin layer over the generated stubs."""

from __future__ import annotations

import hashlib
import os
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Optional

import grpc
from google.protobuf import struct_pb2
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from blendplane.controlplane.v1 import controlplane_pb2 as pb
from blendplane.controlplane.v1 import controlplane_pb2_grpc as pb_grpc

_CHUNK = 512 << 10  # under the smallest message limit a control plane takes (1 MiB)
_SAFETY = {
    "read_only": pb.SAFETY_LEVEL_READ_ONLY,
    "safe_write": pb.SAFETY_LEVEL_SAFE_WRITE,
    "destructive": pb.SAFETY_LEVEL_DESTRUCTIVE,
}
_TERMINAL = {pb.Plan.STATE_SUCCEEDED, pb.Plan.STATE_FAILED, pb.Plan.STATE_CANCELLED, pb.Plan.STATE_VALIDATED}


@dataclass
class BlendplaneError(Exception):
    """A call the control plane refused or failed, with its structured details.

    code is the gRPC status code (grpc.StatusCode), reason the ErrorInfo
    reason (e.g. "GRAPH_CYCLE", "SESSION_CLOSED"), field_violations the
    BadRequest's (field, description) pairs, repair_plan the suggested
    repair (a pb.RepairPlan, or None).
    """

    code: grpc.StatusCode
    message: str
    reason: str = ""
    metadata: dict = field(default_factory=dict)
    field_violations: list = field(default_factory=list)
    repair_plan: Optional[pb.RepairPlan] = None

    def __str__(self) -> str:
        # The control plane's messages start with their reason: said once.
        message = self.message[len(self.reason) + 2:] if self.reason and self.message.startswith(self.reason + ": ") else self.message
        return f"{self.code.name} {self.reason}: {message}"

    @classmethod
    def from_rpc(cls, err: grpc.RpcError) -> "BlendplaneError":
        out = cls(code=err.code(), message=err.details() or "")
        status = rpc_status.from_call(err)
        if status is None:
            return out
        for detail in status.details:
            if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                info = error_details_pb2.ErrorInfo()
                detail.Unpack(info)
                out.reason, out.metadata = info.reason, dict(info.metadata)
            elif detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
                bad = error_details_pb2.BadRequest()
                detail.Unpack(bad)
                out.field_violations += [(v.field, v.description) for v in bad.field_violations]
            elif detail.Is(pb.RepairPlan.DESCRIPTOR):
                out.repair_plan = pb.RepairPlan()
                detail.Unpack(out.repair_plan)
        return out


def connect(address: str, *, token: Optional[str] = None, token_file: Optional[str] = None,
            ca_file: Optional[str] = None) -> "Client":
    """Connects to a control plane: TLS with its CA when ca_file is given
    (beyond loopback it must be), the bearer token (or the file holding it)
    on every call."""
    if token_file:
        with open(token_file) as f:
            token = f.read().strip()
    if ca_file:
        with open(ca_file, "rb") as f:
            channel = grpc.secure_channel(address, grpc.ssl_channel_credentials(root_certificates=f.read()))
    else:
        channel = grpc.insecure_channel(address)
    return Client(channel, token)


class Client:
    """A connection to the control plane, as one principal (its token)."""

    def __init__(self, channel: grpc.Channel, token: Optional[str] = None):
        self._channel = channel
        self._metadata = (("authorization", "Bearer " + token),) if token else ()
        self.stub = pb_grpc.ControlPlaneServiceStub(channel)

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._channel.close()

    def _call(self, method, request, timeout: Optional[float] = 60):
        try:
            return method(request, metadata=self._metadata, timeout=timeout)
        except grpc.RpcError as err:
            raise BlendplaneError.from_rpc(err) from None

    def _all(self, method, request, field: str) -> list:
        """Every item of a paged list (AIP-158): request's pages, one by one."""
        out = []
        while True:
            resp = self._call(method, request)
            out += getattr(resp, field)
            if not resp.next_page_token:
                return out
            request.page_token = resp.next_page_token

    # Sessions.

    def negotiate(self, *, client_name: str = "blendplane-python", client_version: str = "0.1.0",
                  feature_flags: Iterable[str] = (), blender_version_range: str = "",
                  agent_selector: Optional[dict] = None) -> pb.SessionContract:
        """Opens a session; its contract says what it may do (session_id, tools, limits)."""
        req = pb.NegotiateRequest(contract_version="1.0.0", blender_version_range=blender_version_range,
                                  host_profile=pb.HostProfile(client_name=client_name, client_version=client_version,
                                                              feature_flags=list(feature_flags)),
                                  agent_selector=agent_selector or {})
        return self._call(self.stub.Negotiate, req, timeout=300).contract

    def session(self, session_id: str) -> pb.Session:
        return self._call(self.stub.GetSession, pb.GetSessionRequest(session_id=session_id)).session

    def close_session(self, session_id: str) -> pb.Session:
        return self._call(self.stub.CloseSession, pb.CloseSessionRequest(session_id=session_id)).session

    # Plans.

    def submit(self, session_id: str, operations: list[dict], *, request_id: Optional[str] = None,
               atomic: bool = False, validate_only: bool = False) -> pb.Plan:
        """Submits a plan: operations as dicts with operation_id, tool_name,
        args, depends_on and safety_level ("read_only", "safe_write" (the
        default) or "destructive"). A refused plan raises BlendplaneError
        with the refusal's field violations and repair plan; nothing ran."""
        req = pb.SubmitPlanRequest(session_id=session_id, request_id=request_id or "py-" + uuid.uuid4().hex[:16],
                                   atomic=atomic, validate_only=validate_only,
                                   operations=[_operation(i, o) for i, o in enumerate(operations)])
        return self._call(self.stub.SubmitPlan, req).plan

    def plan(self, request_id: str) -> pb.Plan:
        return self._call(self.stub.GetPlan, pb.GetPlanRequest(request_id=request_id)).plan

    def plans(self, session_id: str) -> list:
        """The session's plans, newest first (without their schedules)."""
        return self._all(self.stub.ListPlans, pb.ListPlansRequest(session_id=session_id), "plans")

    def receipts(self, request_id: str, *, start: int = 1, events: bool = False,
                 retry_for: float = 60) -> Iterator[Any]:
        """Yields the plan's receipts from sequence start on until the plan
        ends (with events=True also its progress and approval events). A
        stream that breaks (a control-plane restart, a network blip) is
        opened again from the sequence after the last receipt yielded, for
        up to retry_for seconds."""
        next_seq, deadline = start, None
        while True:
            stream = self.stub.StreamReceipts(pb.StreamReceiptsRequest(request_id=request_id, start_sequence=next_seq),
                                              metadata=self._metadata)
            try:
                for ev in stream:
                    deadline = None
                    if ev.HasField("receipt"):
                        next_seq = ev.receipt.sequence + 1
                        yield ev.receipt
                    elif events:
                        yield ev
                return
            except grpc.RpcError as err:
                if err.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.INTERNAL):
                    raise BlendplaneError.from_rpc(err) from None
                deadline = deadline or time.monotonic() + retry_for
                if time.monotonic() > deadline:
                    raise BlendplaneError.from_rpc(err) from None
                time.sleep(0.2)

    def wait(self, request_id: str) -> tuple[pb.Plan, list]:
        """Follows a plan to its end: its final state and every receipt."""
        receipts = list(self.receipts(request_id))
        return self.plan(request_id), receipts

    def run(self, session_id: str, operations: list[dict], **kw) -> tuple[pb.Plan, list]:
        """Submits a plan and waits for it."""
        plan = self.submit(session_id, operations, **kw)
        if plan.state in _TERMINAL:
            return plan, []
        return self.wait(plan.request_id)

    def cancel(self, request_id: str) -> pb.Plan:
        return self._call(self.stub.CancelPlan, pb.CancelPlanRequest(request_id=request_id), timeout=300).plan

    # Artifacts.

    def upload(self, session_id: str, path: str, name: Optional[str] = None) -> pb.Artifact:
        """Stores a file in the session (scene.import reads it by name), in chunks."""
        name = name or os.path.basename(path)

        def parts():
            yield pb.UploadArtifactRequest(header=pb.ArtifactUpload(session_id=session_id, name=name,
                                                                    size_bytes=os.path.getsize(path)))
            with open(path, "rb") as f:
                while chunk := f.read(_CHUNK):
                    yield pb.UploadArtifactRequest(chunk=chunk)

        return self._call(self.stub.UploadArtifact, parts(), timeout=None).artifact

    def download(self, session_id: str, name: str, dest: str, *, sha256: str = "") -> pb.Artifact:
        """Saves an artifact (a render, an export, an upload) to dest, in
        chunks. dest is replaced only by the whole content, checked against
        the artifact's SHA-256: a failed download leaves it as it was."""
        artifact = None
        digest = hashlib.sha256()
        fd, tmp = tempfile.mkstemp(prefix=".download-", dir=os.path.dirname(os.path.abspath(dest)))
        try:
            with os.fdopen(fd, "wb") as f:
                stream = self.stub.DownloadArtifact(pb.DownloadArtifactRequest(session_id=session_id, name=name, sha256=sha256),
                                                    metadata=self._metadata)
                for part in stream:
                    if part.HasField("artifact"):
                        artifact = part.artifact
                    else:
                        f.write(part.chunk)
                        digest.update(part.chunk)
            if artifact is None or digest.hexdigest() != artifact.sha256:
                raise BlendplaneError(code=grpc.StatusCode.DATA_LOSS, reason="CHECKSUM_MISMATCH",
                                      message="downloaded %s: sha256 %s, the artifact says %s" % (
                                          name, digest.hexdigest(), artifact.sha256 if artifact else "nothing"))
            os.replace(tmp, dest)
        except grpc.RpcError as err:
            raise BlendplaneError.from_rpc(err) from None
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)
        return artifact

    def artifacts(self, session_id: str, request_id: str = "") -> list:
        return self._all(self.stub.ListArtifacts, pb.ListArtifactsRequest(session_id=session_id, request_id=request_id),
                         "artifacts")

    # Approvals.

    def approvals(self, state: str = "pending") -> list:
        st = getattr(pb.Approval, "STATE_" + state.upper())
        return self._all(self.stub.ListApprovals, pb.ListApprovalsRequest(state=st), "approvals")

    def approve(self, approval_id: str) -> pb.Approval:
        return self._resolve(approval_id, pb.DECISION_APPROVE_ONCE)

    def reject(self, approval_id: str) -> pb.Approval:
        return self._resolve(approval_id, pb.DECISION_REJECT)

    def _resolve(self, approval_id: str, decision) -> pb.Approval:
        return self._call(self.stub.ResolveApproval, pb.ResolveApprovalRequest(approval_id=approval_id, decision=decision)).approval


_FIELDS = ("operation_id", "tool_name", "args", "depends_on", "safety_level", "verify")


def _operation(i: int, o: dict) -> pb.Operation:
    """operations[i] as a message. A key it does not have (a misspelt
    "depends_on") or an unknown safety level is refused here as the control
    plane refuses it, SCHEMA_INVALID: dropped, it would run another plan."""
    def refuse(key: str, why: str):
        field = f"operations[{i}].{key}" if key else f"operations[{i}]"
        raise BlendplaneError(code=grpc.StatusCode.INVALID_ARGUMENT, reason="SCHEMA_INVALID",
                              message=f"SCHEMA_INVALID: {field}: {why}", field_violations=[(field, why)])
    if not isinstance(o, dict):
        refuse("", f"an operation is a dict with {', '.join(_FIELDS)}, not {type(o).__name__}")
    for key in o:
        if key not in _FIELDS:
            refuse(str(key), f"unknown field; an operation has {', '.join(_FIELDS)}")
    for key in ("operation_id", "tool_name"):
        if key not in o:
            refuse(key, "missing")
    level = o.get("safety_level", "safe_write")
    if level not in _SAFETY:
        refuse("safety_level", f"{level!r} is not one of {', '.join(_SAFETY)}")
    args = struct_pb2.Struct()
    args.update(o.get("args", {}))
    return pb.Operation(operation_id=o["operation_id"], tool_name=o["tool_name"], args=args,
                        depends_on=list(o.get("depends_on", [])),
                        safety_level=_SAFETY[level], verify=bool(o.get("verify", False)))
