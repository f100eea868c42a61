"""Call the REST API through a client generated from its OpenAPI document
(openapi-python-client, run by e2e/rest_test.go into a temporary package
named blendplane_rest_client).

    python openapi_client.py GENERATED_DIR BASE_URL TOKEN
"""

import sys

sys.path.insert(0, sys.argv[1])

from blendplane_rest_client import AuthenticatedClient  # noqa: E402
from blendplane_rest_client.api.control_plane_service import control_plane_service_list_tools  # noqa: E402

client = AuthenticatedClient(base_url=sys.argv[2], token=sys.argv[3])
resp = control_plane_service_list_tools.sync_detailed(client=client)
assert resp.status_code == 200, (resp.status_code, resp.content[:500])
tools = resp.parsed.tools
names = sorted(t.name for t in tools)
assert "object.create" in names, names
print("tools:", len(names))
print("done")
