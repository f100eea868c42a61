"""Call the REST API through a client generated from its OpenAPI document
(openapi-python-client, run by e2e/rest_test.go into a temporary package
named blendplane_rest_client): every answer must parse as the document
types it (an unset message came back null, which the document does not
allow and the client could not read: found by QA).

    python openapi_client.py GENERATED_DIR BASE_URL TOKEN SESSION_ID REQUEST_ID
"""

import json
import sys

sys.path.insert(0, sys.argv[1])

from blendplane_rest_client import AuthenticatedClient  # noqa: E402
from blendplane_rest_client.api.control_plane_service import (  # noqa: E402
    control_plane_service_get_plan,
    control_plane_service_get_session,
    control_plane_service_list_approvals,
    control_plane_service_list_tokens,
    control_plane_service_list_tools,
    control_plane_service_stream_receipts,
)

client = AuthenticatedClient(base_url=sys.argv[2], token=sys.argv[3], raise_on_unexpected_status=True)
session_id, request_id = sys.argv[4], sys.argv[5]


def call(route, **kw):
    resp = route.sync_detailed(client=client, **kw)
    assert resp.status_code == 200, (route.__name__, resp.status_code, resp.content[:500])
    assert resp.parsed is not None, (route.__name__, resp.content[:500])
    return resp.parsed


names = sorted(t.name for t in call(control_plane_service_list_tools).tools)
assert "object.create" in names, names
print("tools:", len(names))
plan = call(control_plane_service_get_plan, request_id=request_id).plan
assert plan.request_id == request_id and plan.state == "STATE_SUCCEEDED", plan
session = call(control_plane_service_get_session, session_id=session_id).session
assert session.session_id == session_id, session
tokens = call(control_plane_service_list_tokens).tokens
assert any(t.name == "admin" for t in tokens), tokens
call(control_plane_service_list_approvals)
# A stream: newline-delimited JSON, read as such (as one JSON document, the
# generated client failed on a stream of more than one message).
resp = control_plane_service_stream_receipts.sync_detailed(client=client, request_id=request_id)
assert resp.status_code == 200 and resp.headers["content-type"] == "application/x-ndjson", (resp.status_code, resp.headers)
events = [json.loads(line) for line in resp.content.splitlines() if line.strip()]
assert [e["result"]["receipt"]["status"] for e in events if "receipt" in e.get("result", {})] == ["STATUS_SUCCEEDED"], events
print("done")
