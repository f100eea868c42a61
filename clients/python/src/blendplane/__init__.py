"""Python client of the Blendplane control plane.

The generated messages and stubs are in blendplane.controlplane.v1
(controlplane_pb2, controlplane_pb2_grpc); this package adds a small layer:
connect, negotiate, submit plans given as dicts, follow receipts (resuming a
broken stream), wait, cancel, artifacts, approvals, and errors that carry
the control plane's structured refusal.
"""

from blendplane.client import BlendplaneError, Client, connect

__all__ = ["BlendplaneError", "Client", "connect"]
__version__ = "0.1.0"
