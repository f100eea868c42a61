"""The Python client against a live control plane and agent (real Blender).

e2e/python_client_test.go starts them and runs this with BLENDPLANE_ADDR,
BLENDPLANE_TOKEN_FILE (an admin token) and BLENDPLANE_POLICY=default (so that
destructive operations wait for approval).
"""

import hashlib
import os

import grpc
import pytest

import blendplane
from blendplane.controlplane.v1 import controlplane_pb2 as pb


@pytest.fixture(scope="module")
def bp():
    with blendplane.connect(os.environ["BLENDPLANE_ADDR"], token_file=os.environ["BLENDPLANE_TOKEN_FILE"]) as client:
        yield client


@pytest.fixture(scope="module")
def session(bp):
    contract = bp.negotiate(feature_flags=["progress_events"])
    yield contract.session_id
    bp.close_session(contract.session_id)


def test_plan_runs_and_receipts_resume(bp, session):
    plan, receipts = bp.run(session, [
        {"operation_id": "box", "tool_name": "object.create", "args": {"type": "cube", "name": "PyBox"}},
        {"operation_id": "look", "tool_name": "scene.get_summary", "depends_on": ["box"], "safety_level": "read_only"},
    ], request_id="py-hello")
    assert plan.state == pb.Plan.STATE_SUCCEEDED
    assert [r.operation_id for r in receipts] == ["box", "look"]
    assert [r.status for r in receipts] == [pb.Receipt.STATUS_SUCCEEDED] * 2
    names = [o["name"] for o in receipts[1].result["objects"]]
    assert "PyBox" in names
    assert bp.session(session).scene_hash == receipts[-1].scene_hash_after
    # From a later sequence on, as a client resuming a broken stream does.
    assert [r.sequence for r in bp.receipts("py-hello", start=2)] == [2]
    assert [(p.request_id, p.owner) for p in bp.plans(session)][0] == ("py-hello", "admin")


def test_refusal_carries_the_failure_contract(bp, session):
    with pytest.raises(blendplane.BlendplaneError) as refused:
        bp.submit(session, [{"operation_id": "a", "tool_name": "object.create", "args": {"type": "cube"}, "depends_on": ["a"]}])
    err = refused.value
    assert err.code == grpc.StatusCode.INVALID_ARGUMENT
    assert err.reason == "GRAPH_CYCLE"
    assert str(err).startswith("INVALID_ARGUMENT GRAPH_CYCLE: ") and str(err).count("GRAPH_CYCLE") == 1, str(err)
    assert err.field_violations and err.field_violations[0][0].startswith("operations[0]")
    assert err.repair_plan is not None and err.repair_plan.steps

    # A misspelt key or level is refused before anything is sent, as the
    # control plane refuses one: dropped, the plan would run without it.
    for op, field in [({"operation_id": "a", "tool_name": "object.create", "args": {}, "dependson": ["b"]}, "operations[0].dependson"),
                      ({"operation_id": "a", "tool_name": "object.create", "safety_level": "safe-write"}, "operations[0].safety_level"),
                      ({"tool_name": "object.create"}, "operations[0].operation_id")]:
        with pytest.raises(blendplane.BlendplaneError) as typo:
            bp.submit(session, [op], request_id="py-typo")
        assert typo.value.reason == "SCHEMA_INVALID" and typo.value.field_violations[0][0] == field, typo.value
    with pytest.raises(blendplane.BlendplaneError) as never:
        bp.plan("py-typo")
    assert never.value.code == grpc.StatusCode.NOT_FOUND

    with pytest.raises(blendplane.BlendplaneError) as missing:
        bp.session("s-nope")
    assert missing.value.code == grpc.StatusCode.NOT_FOUND and missing.value.reason == "SESSION_NOT_FOUND"


def test_upload_import_render_download(bp, session, tmp_path):
    obj = tmp_path / "tri.obj"
    obj.write_text("o Tri\nv 0 0 0\nv 1 0 0\nv 0 1 0\nf 1 2 3\n")
    art = bp.upload(session, str(obj))
    assert art.name == "tri.obj" and art.sha256 == hashlib.sha256(obj.read_bytes()).hexdigest()
    plan, receipts = bp.run(session, [
        {"operation_id": "in", "tool_name": "scene.import", "args": {"format": "obj", "input": "tri.obj"}},
        {"operation_id": "shot", "tool_name": "render.still", "depends_on": ["in"],
         "args": {"output": "py.png", "resolution": [64, 48], "samples": 1}},
    ])
    assert plan.state == pb.Plan.STATE_SUCCEEDED, receipts
    made = receipts[1].artifacts[0]
    dest = tmp_path / "py.png"
    got = bp.download(session, "py.png", str(dest))
    assert got.sha256 == made.sha256 == hashlib.sha256(dest.read_bytes()).hexdigest()
    assert "py.png" in [a.name for a in bp.artifacts(session)]
    # A failed download leaves the file it would have replaced as it was.
    keep = tmp_path / "keep.txt"
    keep.write_text("precious")
    with pytest.raises(blendplane.BlendplaneError) as missing:
        bp.download(session, "nope.png", str(keep))
    assert missing.value.reason == "ARTIFACT_NOT_FOUND" and keep.read_text() == "precious"
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".download-")) == []


def test_cancel(bp, session):
    plan = bp.submit(session, [{"operation_id": "long", "tool_name": "render.animation",
                                "args": {"output_prefix": "long", "frame_start": 1, "frame_end": 400,
                                         "resolution": [64, 48], "samples": 4}}])
    for ev in bp.receipts(plan.request_id, events=True):
        if ev.HasField("progress"):
            break  # it runs
    assert bp.cancel(plan.request_id).state == pb.Plan.STATE_CANCELLED
    final, receipts = bp.wait(plan.request_id)
    assert final.state == pb.Plan.STATE_CANCELLED and receipts[-1].error.error_code == "CANCELLED"


def test_approval(bp, session):
    plan = bp.submit(session, [{"operation_id": "rm", "tool_name": "object.delete", "args": {"name": "PyBox"},
                                "safety_level": "destructive"}])
    assert plan.state == pb.Plan.STATE_AWAITING_APPROVAL
    waiting = [a for a in bp.approvals() if a.request_id == plan.request_id]
    assert len(waiting) == 1
    assert bp.approve(waiting[0].approval_id).state == pb.Approval.STATE_APPROVED
    final, receipts = bp.wait(plan.request_id)
    assert final.state == pb.Plan.STATE_SUCCEEDED and receipts[0].operation_id == "rm"
