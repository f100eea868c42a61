import datetime

from buf.validate import validate_pb2 as _validate_pb2
from google.api import annotations_pb2 as _annotations_pb2
from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SafetyLevel(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SAFETY_LEVEL_UNSPECIFIED: _ClassVar[SafetyLevel]
    SAFETY_LEVEL_READ_ONLY: _ClassVar[SafetyLevel]
    SAFETY_LEVEL_SAFE_WRITE: _ClassVar[SafetyLevel]
    SAFETY_LEVEL_DESTRUCTIVE: _ClassVar[SafetyLevel]

class Decision(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DECISION_UNSPECIFIED: _ClassVar[Decision]
    DECISION_REJECT: _ClassVar[Decision]
    DECISION_APPROVE_ONCE: _ClassVar[Decision]
    DECISION_APPROVE_AND_ALWAYS_ALLOW: _ClassVar[Decision]
SAFETY_LEVEL_UNSPECIFIED: SafetyLevel
SAFETY_LEVEL_READ_ONLY: SafetyLevel
SAFETY_LEVEL_SAFE_WRITE: SafetyLevel
SAFETY_LEVEL_DESTRUCTIVE: SafetyLevel
DECISION_UNSPECIFIED: Decision
DECISION_REJECT: Decision
DECISION_APPROVE_ONCE: Decision
DECISION_APPROVE_AND_ALWAYS_ALLOW: Decision

class NegotiateRequest(_message.Message):
    __slots__ = ("contract_version", "host_profile", "blender_version_range", "tool_registry_ref", "macro_registry_ref", "constraints", "limits", "audit", "agent_selector")
    class AgentSelectorEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CONTRACT_VERSION_FIELD_NUMBER: _ClassVar[int]
    HOST_PROFILE_FIELD_NUMBER: _ClassVar[int]
    BLENDER_VERSION_RANGE_FIELD_NUMBER: _ClassVar[int]
    TOOL_REGISTRY_REF_FIELD_NUMBER: _ClassVar[int]
    MACRO_REGISTRY_REF_FIELD_NUMBER: _ClassVar[int]
    CONSTRAINTS_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    AUDIT_FIELD_NUMBER: _ClassVar[int]
    AGENT_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    contract_version: str
    host_profile: HostProfile
    blender_version_range: str
    tool_registry_ref: ToolRegistryRef
    macro_registry_ref: MacroRegistryRef
    constraints: Constraints
    limits: Limits
    audit: AuditPolicy
    agent_selector: _containers.ScalarMap[str, str]
    def __init__(self, contract_version: _Optional[str] = ..., host_profile: _Optional[_Union[HostProfile, _Mapping]] = ..., blender_version_range: _Optional[str] = ..., tool_registry_ref: _Optional[_Union[ToolRegistryRef, _Mapping]] = ..., macro_registry_ref: _Optional[_Union[MacroRegistryRef, _Mapping]] = ..., constraints: _Optional[_Union[Constraints, _Mapping]] = ..., limits: _Optional[_Union[Limits, _Mapping]] = ..., audit: _Optional[_Union[AuditPolicy, _Mapping]] = ..., agent_selector: _Optional[_Mapping[str, str]] = ...) -> None: ...

class NegotiateResponse(_message.Message):
    __slots__ = ("contract",)
    CONTRACT_FIELD_NUMBER: _ClassVar[int]
    contract: SessionContract
    def __init__(self, contract: _Optional[_Union[SessionContract, _Mapping]] = ...) -> None: ...

class HostProfile(_message.Message):
    __slots__ = ("client_name", "client_version", "capabilities", "feature_flags", "supported_tool_versions")
    CLIENT_NAME_FIELD_NUMBER: _ClassVar[int]
    CLIENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    FEATURE_FLAGS_FIELD_NUMBER: _ClassVar[int]
    SUPPORTED_TOOL_VERSIONS_FIELD_NUMBER: _ClassVar[int]
    client_name: str
    client_version: str
    capabilities: _containers.RepeatedScalarFieldContainer[str]
    feature_flags: _containers.RepeatedScalarFieldContainer[str]
    supported_tool_versions: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, client_name: _Optional[str] = ..., client_version: _Optional[str] = ..., capabilities: _Optional[_Iterable[str]] = ..., feature_flags: _Optional[_Iterable[str]] = ..., supported_tool_versions: _Optional[_Iterable[str]] = ...) -> None: ...

class BlenderProfile(_message.Message):
    __slots__ = ("version", "build_hash", "platform", "runtime", "python_version", "features")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    BUILD_HASH_FIELD_NUMBER: _ClassVar[int]
    PLATFORM_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_FIELD_NUMBER: _ClassVar[int]
    PYTHON_VERSION_FIELD_NUMBER: _ClassVar[int]
    FEATURES_FIELD_NUMBER: _ClassVar[int]
    version: str
    build_hash: str
    platform: str
    runtime: str
    python_version: str
    features: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, version: _Optional[str] = ..., build_hash: _Optional[str] = ..., platform: _Optional[str] = ..., runtime: _Optional[str] = ..., python_version: _Optional[str] = ..., features: _Optional[_Iterable[str]] = ...) -> None: ...

class ToolRegistryRef(_message.Message):
    __slots__ = ("version", "fingerprint")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    version: str
    fingerprint: str
    def __init__(self, version: _Optional[str] = ..., fingerprint: _Optional[str] = ...) -> None: ...

class MacroRegistryRef(_message.Message):
    __slots__ = ("version", "fingerprint")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    version: str
    fingerprint: str
    def __init__(self, version: _Optional[str] = ..., fingerprint: _Optional[str] = ...) -> None: ...

class Constraints(_message.Message):
    __slots__ = ("max_memory_mib", "tool_time_budget_ms", "temp_storage_mib", "safety_rails")
    MAX_MEMORY_MIB_FIELD_NUMBER: _ClassVar[int]
    TOOL_TIME_BUDGET_MS_FIELD_NUMBER: _ClassVar[int]
    TEMP_STORAGE_MIB_FIELD_NUMBER: _ClassVar[int]
    SAFETY_RAILS_FIELD_NUMBER: _ClassVar[int]
    max_memory_mib: int
    tool_time_budget_ms: int
    temp_storage_mib: int
    safety_rails: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, max_memory_mib: _Optional[int] = ..., tool_time_budget_ms: _Optional[int] = ..., temp_storage_mib: _Optional[int] = ..., safety_rails: _Optional[_Iterable[str]] = ...) -> None: ...

class Capabilities(_message.Message):
    __slots__ = ("tools", "macros", "version_negotiation", "audit_log", "feature_flags")
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    MACROS_FIELD_NUMBER: _ClassVar[int]
    VERSION_NEGOTIATION_FIELD_NUMBER: _ClassVar[int]
    AUDIT_LOG_FIELD_NUMBER: _ClassVar[int]
    FEATURE_FLAGS_FIELD_NUMBER: _ClassVar[int]
    tools: _containers.RepeatedScalarFieldContainer[str]
    macros: bool
    version_negotiation: bool
    audit_log: bool
    feature_flags: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, tools: _Optional[_Iterable[str]] = ..., macros: _Optional[bool] = ..., version_negotiation: _Optional[bool] = ..., audit_log: _Optional[bool] = ..., feature_flags: _Optional[_Iterable[str]] = ...) -> None: ...

class AuditPolicy(_message.Message):
    __slots__ = ("verbosity", "redact", "sinks")
    VERBOSITY_FIELD_NUMBER: _ClassVar[int]
    REDACT_FIELD_NUMBER: _ClassVar[int]
    SINKS_FIELD_NUMBER: _ClassVar[int]
    verbosity: str
    redact: _containers.RepeatedScalarFieldContainer[str]
    sinks: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, verbosity: _Optional[str] = ..., redact: _Optional[_Iterable[str]] = ..., sinks: _Optional[_Iterable[str]] = ...) -> None: ...

class SessionContract(_message.Message):
    __slots__ = ("session_id", "contract_version", "host_profile", "blender_profile", "tool_registry_ref", "agent_id", "baseline_scene_hash", "limits", "ui_optional", "create_time", "capabilities", "constraints", "macro_registry_ref", "audit", "fingerprints", "agent_selector")
    class FingerprintsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class AgentSelectorEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    CONTRACT_VERSION_FIELD_NUMBER: _ClassVar[int]
    HOST_PROFILE_FIELD_NUMBER: _ClassVar[int]
    BLENDER_PROFILE_FIELD_NUMBER: _ClassVar[int]
    TOOL_REGISTRY_REF_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    BASELINE_SCENE_HASH_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    UI_OPTIONAL_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    CONSTRAINTS_FIELD_NUMBER: _ClassVar[int]
    MACRO_REGISTRY_REF_FIELD_NUMBER: _ClassVar[int]
    AUDIT_FIELD_NUMBER: _ClassVar[int]
    FINGERPRINTS_FIELD_NUMBER: _ClassVar[int]
    AGENT_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    contract_version: str
    host_profile: HostProfile
    blender_profile: BlenderProfile
    tool_registry_ref: ToolRegistryRef
    agent_id: str
    baseline_scene_hash: str
    limits: Limits
    ui_optional: bool
    create_time: _timestamp_pb2.Timestamp
    capabilities: Capabilities
    constraints: Constraints
    macro_registry_ref: MacroRegistryRef
    audit: AuditPolicy
    fingerprints: _containers.ScalarMap[str, str]
    agent_selector: _containers.ScalarMap[str, str]
    def __init__(self, session_id: _Optional[str] = ..., contract_version: _Optional[str] = ..., host_profile: _Optional[_Union[HostProfile, _Mapping]] = ..., blender_profile: _Optional[_Union[BlenderProfile, _Mapping]] = ..., tool_registry_ref: _Optional[_Union[ToolRegistryRef, _Mapping]] = ..., agent_id: _Optional[str] = ..., baseline_scene_hash: _Optional[str] = ..., limits: _Optional[_Union[Limits, _Mapping]] = ..., ui_optional: _Optional[bool] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., capabilities: _Optional[_Union[Capabilities, _Mapping]] = ..., constraints: _Optional[_Union[Constraints, _Mapping]] = ..., macro_registry_ref: _Optional[_Union[MacroRegistryRef, _Mapping]] = ..., audit: _Optional[_Union[AuditPolicy, _Mapping]] = ..., fingerprints: _Optional[_Mapping[str, str]] = ..., agent_selector: _Optional[_Mapping[str, str]] = ...) -> None: ...

class Limits(_message.Message):
    __slots__ = ("max_operations_per_plan", "max_payload_bytes", "tool_surface_cap", "max_concurrent_calls", "max_artifact_bytes")
    MAX_OPERATIONS_PER_PLAN_FIELD_NUMBER: _ClassVar[int]
    MAX_PAYLOAD_BYTES_FIELD_NUMBER: _ClassVar[int]
    TOOL_SURFACE_CAP_FIELD_NUMBER: _ClassVar[int]
    MAX_CONCURRENT_CALLS_FIELD_NUMBER: _ClassVar[int]
    MAX_ARTIFACT_BYTES_FIELD_NUMBER: _ClassVar[int]
    max_operations_per_plan: int
    max_payload_bytes: int
    tool_surface_cap: int
    max_concurrent_calls: int
    max_artifact_bytes: int
    def __init__(self, max_operations_per_plan: _Optional[int] = ..., max_payload_bytes: _Optional[int] = ..., tool_surface_cap: _Optional[int] = ..., max_concurrent_calls: _Optional[int] = ..., max_artifact_bytes: _Optional[int] = ...) -> None: ...

class Operation(_message.Message):
    __slots__ = ("operation_id", "tool_name", "args", "depends_on", "safety_level", "verify", "mcp_call_id")
    OPERATION_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    ARGS_FIELD_NUMBER: _ClassVar[int]
    DEPENDS_ON_FIELD_NUMBER: _ClassVar[int]
    SAFETY_LEVEL_FIELD_NUMBER: _ClassVar[int]
    VERIFY_FIELD_NUMBER: _ClassVar[int]
    MCP_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    operation_id: str
    tool_name: str
    args: _struct_pb2.Struct
    depends_on: _containers.RepeatedScalarFieldContainer[str]
    safety_level: SafetyLevel
    verify: bool
    mcp_call_id: str
    def __init__(self, operation_id: _Optional[str] = ..., tool_name: _Optional[str] = ..., args: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., depends_on: _Optional[_Iterable[str]] = ..., safety_level: _Optional[_Union[SafetyLevel, str]] = ..., verify: _Optional[bool] = ..., mcp_call_id: _Optional[str] = ...) -> None: ...

class SubmitPlanRequest(_message.Message):
    __slots__ = ("session_id", "request_id", "operations", "validate_only", "atomic", "preview_render")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    OPERATIONS_FIELD_NUMBER: _ClassVar[int]
    VALIDATE_ONLY_FIELD_NUMBER: _ClassVar[int]
    ATOMIC_FIELD_NUMBER: _ClassVar[int]
    PREVIEW_RENDER_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    request_id: str
    operations: _containers.RepeatedCompositeFieldContainer[Operation]
    validate_only: bool
    atomic: bool
    preview_render: bool
    def __init__(self, session_id: _Optional[str] = ..., request_id: _Optional[str] = ..., operations: _Optional[_Iterable[_Union[Operation, _Mapping]]] = ..., validate_only: _Optional[bool] = ..., atomic: _Optional[bool] = ..., preview_render: _Optional[bool] = ...) -> None: ...

class SubmitPlanResponse(_message.Message):
    __slots__ = ("plan",)
    PLAN_FIELD_NUMBER: _ClassVar[int]
    plan: Plan
    def __init__(self, plan: _Optional[_Union[Plan, _Mapping]] = ...) -> None: ...

class Plan(_message.Message):
    __slots__ = ("request_id", "session_id", "state", "schedule", "atomic", "registry_fingerprint", "receipt_count", "failure", "create_time", "update_time", "approval_id", "owner")
    class State(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        STATE_UNSPECIFIED: _ClassVar[Plan.State]
        STATE_VALIDATED: _ClassVar[Plan.State]
        STATE_PENDING: _ClassVar[Plan.State]
        STATE_RUNNING: _ClassVar[Plan.State]
        STATE_SUCCEEDED: _ClassVar[Plan.State]
        STATE_FAILED: _ClassVar[Plan.State]
        STATE_CANCELLED: _ClassVar[Plan.State]
        STATE_AWAITING_APPROVAL: _ClassVar[Plan.State]
    STATE_UNSPECIFIED: Plan.State
    STATE_VALIDATED: Plan.State
    STATE_PENDING: Plan.State
    STATE_RUNNING: Plan.State
    STATE_SUCCEEDED: Plan.State
    STATE_FAILED: Plan.State
    STATE_CANCELLED: Plan.State
    STATE_AWAITING_APPROVAL: Plan.State
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    ATOMIC_FIELD_NUMBER: _ClassVar[int]
    REGISTRY_FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    RECEIPT_COUNT_FIELD_NUMBER: _ClassVar[int]
    FAILURE_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    APPROVAL_ID_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    session_id: str
    state: Plan.State
    schedule: _containers.RepeatedScalarFieldContainer[str]
    atomic: bool
    registry_fingerprint: str
    receipt_count: int
    failure: Failure
    create_time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    approval_id: str
    owner: str
    def __init__(self, request_id: _Optional[str] = ..., session_id: _Optional[str] = ..., state: _Optional[_Union[Plan.State, str]] = ..., schedule: _Optional[_Iterable[str]] = ..., atomic: _Optional[bool] = ..., registry_fingerprint: _Optional[str] = ..., receipt_count: _Optional[int] = ..., failure: _Optional[_Union[Failure, _Mapping]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., approval_id: _Optional[str] = ..., owner: _Optional[str] = ...) -> None: ...

class StreamReceiptsRequest(_message.Message):
    __slots__ = ("request_id", "start_sequence", "owner")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    START_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    start_sequence: int
    owner: str
    def __init__(self, request_id: _Optional[str] = ..., start_sequence: _Optional[int] = ..., owner: _Optional[str] = ...) -> None: ...

class StreamReceiptsResponse(_message.Message):
    __slots__ = ("receipt", "progress", "awaiting_approval")
    RECEIPT_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    AWAITING_APPROVAL_FIELD_NUMBER: _ClassVar[int]
    receipt: Receipt
    progress: Progress
    awaiting_approval: Approval
    def __init__(self, receipt: _Optional[_Union[Receipt, _Mapping]] = ..., progress: _Optional[_Union[Progress, _Mapping]] = ..., awaiting_approval: _Optional[_Union[Approval, _Mapping]] = ...) -> None: ...

class Progress(_message.Message):
    __slots__ = ("operation_id", "done", "total", "detail")
    OPERATION_ID_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    operation_id: str
    done: int
    total: int
    detail: _struct_pb2.Struct
    def __init__(self, operation_id: _Optional[str] = ..., done: _Optional[int] = ..., total: _Optional[int] = ..., detail: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class Receipt(_message.Message):
    __slots__ = ("sequence", "request_id", "operation_id", "tool_name", "status", "result", "error", "mcp_call_id", "blender_mutation_id", "scene_hash_before", "scene_hash_after", "safety_level", "idempotency_key", "complete_time", "duration_micros", "determinism_class", "verified", "tolerance", "artifacts", "session_epoch", "agent_sent_time")
    class Status(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        STATUS_UNSPECIFIED: _ClassVar[Receipt.Status]
        STATUS_SUCCEEDED: _ClassVar[Receipt.Status]
        STATUS_FAILED: _ClassVar[Receipt.Status]
        STATUS_ROLLED_BACK: _ClassVar[Receipt.Status]
        STATUS_SKIPPED_IDEMPOTENT: _ClassVar[Receipt.Status]
        STATUS_NOT_RUN: _ClassVar[Receipt.Status]
    STATUS_UNSPECIFIED: Receipt.Status
    STATUS_SUCCEEDED: Receipt.Status
    STATUS_FAILED: Receipt.Status
    STATUS_ROLLED_BACK: Receipt.Status
    STATUS_SKIPPED_IDEMPOTENT: Receipt.Status
    STATUS_NOT_RUN: Receipt.Status
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    OPERATION_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    MCP_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    BLENDER_MUTATION_ID_FIELD_NUMBER: _ClassVar[int]
    SCENE_HASH_BEFORE_FIELD_NUMBER: _ClassVar[int]
    SCENE_HASH_AFTER_FIELD_NUMBER: _ClassVar[int]
    SAFETY_LEVEL_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    COMPLETE_TIME_FIELD_NUMBER: _ClassVar[int]
    DURATION_MICROS_FIELD_NUMBER: _ClassVar[int]
    DETERMINISM_CLASS_FIELD_NUMBER: _ClassVar[int]
    VERIFIED_FIELD_NUMBER: _ClassVar[int]
    TOLERANCE_FIELD_NUMBER: _ClassVar[int]
    ARTIFACTS_FIELD_NUMBER: _ClassVar[int]
    SESSION_EPOCH_FIELD_NUMBER: _ClassVar[int]
    AGENT_SENT_TIME_FIELD_NUMBER: _ClassVar[int]
    sequence: int
    request_id: str
    operation_id: str
    tool_name: str
    status: Receipt.Status
    result: _struct_pb2.Struct
    error: Failure
    mcp_call_id: str
    blender_mutation_id: str
    scene_hash_before: str
    scene_hash_after: str
    safety_level: SafetyLevel
    idempotency_key: str
    complete_time: _timestamp_pb2.Timestamp
    duration_micros: int
    determinism_class: str
    verified: bool
    tolerance: str
    artifacts: _containers.RepeatedCompositeFieldContainer[Artifact]
    session_epoch: int
    agent_sent_time: _timestamp_pb2.Timestamp
    def __init__(self, sequence: _Optional[int] = ..., request_id: _Optional[str] = ..., operation_id: _Optional[str] = ..., tool_name: _Optional[str] = ..., status: _Optional[_Union[Receipt.Status, str]] = ..., result: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., error: _Optional[_Union[Failure, _Mapping]] = ..., mcp_call_id: _Optional[str] = ..., blender_mutation_id: _Optional[str] = ..., scene_hash_before: _Optional[str] = ..., scene_hash_after: _Optional[str] = ..., safety_level: _Optional[_Union[SafetyLevel, str]] = ..., idempotency_key: _Optional[str] = ..., complete_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., duration_micros: _Optional[int] = ..., determinism_class: _Optional[str] = ..., verified: _Optional[bool] = ..., tolerance: _Optional[str] = ..., artifacts: _Optional[_Iterable[_Union[Artifact, _Mapping]]] = ..., session_epoch: _Optional[int] = ..., agent_sent_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class Failure(_message.Message):
    __slots__ = ("error_code", "recoverable", "retry_hint", "minimal_repair_plan", "message", "last_consistent_checkpoint")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    RECOVERABLE_FIELD_NUMBER: _ClassVar[int]
    RETRY_HINT_FIELD_NUMBER: _ClassVar[int]
    MINIMAL_REPAIR_PLAN_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    LAST_CONSISTENT_CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    error_code: str
    recoverable: bool
    retry_hint: str
    minimal_repair_plan: _containers.RepeatedCompositeFieldContainer[RepairStep]
    message: str
    last_consistent_checkpoint: Checkpoint
    def __init__(self, error_code: _Optional[str] = ..., recoverable: _Optional[bool] = ..., retry_hint: _Optional[str] = ..., minimal_repair_plan: _Optional[_Iterable[_Union[RepairStep, _Mapping]]] = ..., message: _Optional[str] = ..., last_consistent_checkpoint: _Optional[_Union[Checkpoint, _Mapping]] = ...) -> None: ...

class Checkpoint(_message.Message):
    __slots__ = ("path", "journal_index", "scene_hash")
    PATH_FIELD_NUMBER: _ClassVar[int]
    JOURNAL_INDEX_FIELD_NUMBER: _ClassVar[int]
    SCENE_HASH_FIELD_NUMBER: _ClassVar[int]
    path: str
    journal_index: int
    scene_hash: str
    def __init__(self, path: _Optional[str] = ..., journal_index: _Optional[int] = ..., scene_hash: _Optional[str] = ...) -> None: ...

class RepairStep(_message.Message):
    __slots__ = ("operation_id", "action")
    class Action(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        ACTION_UNSPECIFIED: _ClassVar[RepairStep.Action]
        ACTION_RETRY: _ClassVar[RepairStep.Action]
        ACTION_REPLACE_ARGS: _ClassVar[RepairStep.Action]
        ACTION_DROP: _ClassVar[RepairStep.Action]
        ACTION_INSERT_PRECONDITION: _ClassVar[RepairStep.Action]
    ACTION_UNSPECIFIED: RepairStep.Action
    ACTION_RETRY: RepairStep.Action
    ACTION_REPLACE_ARGS: RepairStep.Action
    ACTION_DROP: RepairStep.Action
    ACTION_INSERT_PRECONDITION: RepairStep.Action
    OPERATION_ID_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    operation_id: str
    action: RepairStep.Action
    def __init__(self, operation_id: _Optional[str] = ..., action: _Optional[_Union[RepairStep.Action, str]] = ...) -> None: ...

class RepairPlan(_message.Message):
    __slots__ = ("steps",)
    STEPS_FIELD_NUMBER: _ClassVar[int]
    steps: _containers.RepeatedCompositeFieldContainer[RepairStep]
    def __init__(self, steps: _Optional[_Iterable[_Union[RepairStep, _Mapping]]] = ...) -> None: ...

class GetPlanRequest(_message.Message):
    __slots__ = ("request_id", "owner")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    owner: str
    def __init__(self, request_id: _Optional[str] = ..., owner: _Optional[str] = ...) -> None: ...

class GetPlanResponse(_message.Message):
    __slots__ = ("plan",)
    PLAN_FIELD_NUMBER: _ClassVar[int]
    plan: Plan
    def __init__(self, plan: _Optional[_Union[Plan, _Mapping]] = ...) -> None: ...

class CancelPlanRequest(_message.Message):
    __slots__ = ("request_id", "owner")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    owner: str
    def __init__(self, request_id: _Optional[str] = ..., owner: _Optional[str] = ...) -> None: ...

class CancelPlanResponse(_message.Message):
    __slots__ = ("plan",)
    PLAN_FIELD_NUMBER: _ClassVar[int]
    plan: Plan
    def __init__(self, plan: _Optional[_Union[Plan, _Mapping]] = ...) -> None: ...

class ListToolsRequest(_message.Message):
    __slots__ = ("session_id", "runtime_id")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    runtime_id: str
    def __init__(self, session_id: _Optional[str] = ..., runtime_id: _Optional[str] = ...) -> None: ...

class ListToolsResponse(_message.Message):
    __slots__ = ("registry_ref", "tools")
    REGISTRY_REF_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    registry_ref: ToolRegistryRef
    tools: _containers.RepeatedCompositeFieldContainer[ToolDefinition]
    def __init__(self, registry_ref: _Optional[_Union[ToolRegistryRef, _Mapping]] = ..., tools: _Optional[_Iterable[_Union[ToolDefinition, _Mapping]]] = ...) -> None: ...

class ListMacrosRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListMacrosResponse(_message.Message):
    __slots__ = ("registry_ref", "macros")
    REGISTRY_REF_FIELD_NUMBER: _ClassVar[int]
    MACROS_FIELD_NUMBER: _ClassVar[int]
    registry_ref: MacroRegistryRef
    macros: _containers.RepeatedCompositeFieldContainer[MacroDefinition]
    def __init__(self, registry_ref: _Optional[_Union[MacroRegistryRef, _Mapping]] = ..., macros: _Optional[_Iterable[_Union[MacroDefinition, _Mapping]]] = ...) -> None: ...

class MacroDefinition(_message.Message):
    __slots__ = ("name", "version", "description", "input_schema", "example_args", "tools", "fingerprint")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    INPUT_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    EXAMPLE_ARGS_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    name: str
    version: str
    description: str
    input_schema: _struct_pb2.Struct
    example_args: _struct_pb2.Struct
    tools: _containers.RepeatedScalarFieldContainer[str]
    fingerprint: str
    def __init__(self, name: _Optional[str] = ..., version: _Optional[str] = ..., description: _Optional[str] = ..., input_schema: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., example_args: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., tools: _Optional[_Iterable[str]] = ..., fingerprint: _Optional[str] = ...) -> None: ...

class ListAuditRecordsRequest(_message.Message):
    __slots__ = ("request_id", "page_size", "page_token", "owner", "operation_id", "blender_mutation_id")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    OPERATION_ID_FIELD_NUMBER: _ClassVar[int]
    BLENDER_MUTATION_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    page_size: int
    page_token: str
    owner: str
    operation_id: str
    blender_mutation_id: str
    def __init__(self, request_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., owner: _Optional[str] = ..., operation_id: _Optional[str] = ..., blender_mutation_id: _Optional[str] = ...) -> None: ...

class ListAuditRecordsResponse(_message.Message):
    __slots__ = ("audit_records", "next_page_token")
    AUDIT_RECORDS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    audit_records: _containers.RepeatedCompositeFieldContainer[AuditRecord]
    next_page_token: str
    def __init__(self, audit_records: _Optional[_Iterable[_Union[AuditRecord, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class AuditRecord(_message.Message):
    __slots__ = ("timestamp", "request_id", "operation_id", "mcp_call_id", "blender_mutation_id", "tool_name", "safety_level", "status", "scene_hash_before", "scene_hash_after", "session_id", "sequence", "error_code", "principal", "policy_decision", "approval_id", "approved_by", "input_hash", "event", "subject", "policy_rule")
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    OPERATION_ID_FIELD_NUMBER: _ClassVar[int]
    MCP_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    BLENDER_MUTATION_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    SAFETY_LEVEL_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    SCENE_HASH_BEFORE_FIELD_NUMBER: _ClassVar[int]
    SCENE_HASH_AFTER_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    POLICY_DECISION_FIELD_NUMBER: _ClassVar[int]
    APPROVAL_ID_FIELD_NUMBER: _ClassVar[int]
    APPROVED_BY_FIELD_NUMBER: _ClassVar[int]
    INPUT_HASH_FIELD_NUMBER: _ClassVar[int]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    POLICY_RULE_FIELD_NUMBER: _ClassVar[int]
    timestamp: _timestamp_pb2.Timestamp
    request_id: str
    operation_id: str
    mcp_call_id: str
    blender_mutation_id: str
    tool_name: str
    safety_level: SafetyLevel
    status: Receipt.Status
    scene_hash_before: str
    scene_hash_after: str
    session_id: str
    sequence: int
    error_code: str
    principal: str
    policy_decision: str
    approval_id: str
    approved_by: str
    input_hash: str
    event: str
    subject: str
    policy_rule: str
    def __init__(self, timestamp: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., request_id: _Optional[str] = ..., operation_id: _Optional[str] = ..., mcp_call_id: _Optional[str] = ..., blender_mutation_id: _Optional[str] = ..., tool_name: _Optional[str] = ..., safety_level: _Optional[_Union[SafetyLevel, str]] = ..., status: _Optional[_Union[Receipt.Status, str]] = ..., scene_hash_before: _Optional[str] = ..., scene_hash_after: _Optional[str] = ..., session_id: _Optional[str] = ..., sequence: _Optional[int] = ..., error_code: _Optional[str] = ..., principal: _Optional[str] = ..., policy_decision: _Optional[str] = ..., approval_id: _Optional[str] = ..., approved_by: _Optional[str] = ..., input_hash: _Optional[str] = ..., event: _Optional[str] = ..., subject: _Optional[str] = ..., policy_rule: _Optional[str] = ...) -> None: ...

class ListAgentsRequest(_message.Message):
    __slots__ = ("page_size", "page_token")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListAgentsResponse(_message.Message):
    __slots__ = ("agents", "next_page_token")
    AGENTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    agents: _containers.RepeatedCompositeFieldContainer[Agent]
    next_page_token: str
    def __init__(self, agents: _Optional[_Iterable[_Union[Agent, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class Agent(_message.Message):
    __slots__ = ("agent_id", "address", "hostname", "state", "runtimes", "session_count", "last_seen_time", "resources", "max_sessions", "live_session_count", "busy_session_count", "session_ids", "labels")
    class State(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        STATE_UNSPECIFIED: _ClassVar[Agent.State]
        STATE_READY: _ClassVar[Agent.State]
        STATE_UNREACHABLE: _ClassVar[Agent.State]
        STATE_LOST: _ClassVar[Agent.State]
    STATE_UNSPECIFIED: Agent.State
    STATE_READY: Agent.State
    STATE_UNREACHABLE: Agent.State
    STATE_LOST: Agent.State
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    HOSTNAME_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    RUNTIMES_FIELD_NUMBER: _ClassVar[int]
    SESSION_COUNT_FIELD_NUMBER: _ClassVar[int]
    LAST_SEEN_TIME_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    MAX_SESSIONS_FIELD_NUMBER: _ClassVar[int]
    LIVE_SESSION_COUNT_FIELD_NUMBER: _ClassVar[int]
    BUSY_SESSION_COUNT_FIELD_NUMBER: _ClassVar[int]
    SESSION_IDS_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    address: str
    hostname: str
    state: Agent.State
    runtimes: _containers.RepeatedCompositeFieldContainer[Runtime]
    session_count: int
    last_seen_time: _timestamp_pb2.Timestamp
    resources: Resources
    max_sessions: int
    live_session_count: int
    busy_session_count: int
    session_ids: _containers.RepeatedScalarFieldContainer[str]
    labels: _containers.ScalarMap[str, str]
    def __init__(self, agent_id: _Optional[str] = ..., address: _Optional[str] = ..., hostname: _Optional[str] = ..., state: _Optional[_Union[Agent.State, str]] = ..., runtimes: _Optional[_Iterable[_Union[Runtime, _Mapping]]] = ..., session_count: _Optional[int] = ..., last_seen_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., resources: _Optional[_Union[Resources, _Mapping]] = ..., max_sessions: _Optional[int] = ..., live_session_count: _Optional[int] = ..., busy_session_count: _Optional[int] = ..., session_ids: _Optional[_Iterable[str]] = ..., labels: _Optional[_Mapping[str, str]] = ...) -> None: ...

class Runtime(_message.Message):
    __slots__ = ("runtime_id", "blender_profile", "registry", "baseline_scene_hash")
    RUNTIME_ID_FIELD_NUMBER: _ClassVar[int]
    BLENDER_PROFILE_FIELD_NUMBER: _ClassVar[int]
    REGISTRY_FIELD_NUMBER: _ClassVar[int]
    BASELINE_SCENE_HASH_FIELD_NUMBER: _ClassVar[int]
    runtime_id: str
    blender_profile: BlenderProfile
    registry: ToolRegistry
    baseline_scene_hash: str
    def __init__(self, runtime_id: _Optional[str] = ..., blender_profile: _Optional[_Union[BlenderProfile, _Mapping]] = ..., registry: _Optional[_Union[ToolRegistry, _Mapping]] = ..., baseline_scene_hash: _Optional[str] = ...) -> None: ...

class ToolRegistry(_message.Message):
    __slots__ = ("version", "fingerprint", "tools")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    version: str
    fingerprint: str
    tools: _containers.RepeatedCompositeFieldContainer[ToolDefinition]
    def __init__(self, version: _Optional[str] = ..., fingerprint: _Optional[str] = ..., tools: _Optional[_Iterable[_Union[ToolDefinition, _Mapping]]] = ...) -> None: ...

class ToolDefinition(_message.Message):
    __slots__ = ("name", "version", "description", "input_schema", "safety_level", "safety_mode", "idempotence_class", "blender_versions", "determinism_class", "rollback_method")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    INPUT_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    SAFETY_LEVEL_FIELD_NUMBER: _ClassVar[int]
    SAFETY_MODE_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCE_CLASS_FIELD_NUMBER: _ClassVar[int]
    BLENDER_VERSIONS_FIELD_NUMBER: _ClassVar[int]
    DETERMINISM_CLASS_FIELD_NUMBER: _ClassVar[int]
    ROLLBACK_METHOD_FIELD_NUMBER: _ClassVar[int]
    name: str
    version: str
    description: str
    input_schema: _struct_pb2.Struct
    safety_level: SafetyLevel
    safety_mode: str
    idempotence_class: str
    blender_versions: str
    determinism_class: str
    rollback_method: str
    def __init__(self, name: _Optional[str] = ..., version: _Optional[str] = ..., description: _Optional[str] = ..., input_schema: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., safety_level: _Optional[_Union[SafetyLevel, str]] = ..., safety_mode: _Optional[str] = ..., idempotence_class: _Optional[str] = ..., blender_versions: _Optional[str] = ..., determinism_class: _Optional[str] = ..., rollback_method: _Optional[str] = ...) -> None: ...

class Resources(_message.Message):
    __slots__ = ("memory_mib", "temp_storage_mib")
    MEMORY_MIB_FIELD_NUMBER: _ClassVar[int]
    TEMP_STORAGE_MIB_FIELD_NUMBER: _ClassVar[int]
    memory_mib: int
    temp_storage_mib: int
    def __init__(self, memory_mib: _Optional[int] = ..., temp_storage_mib: _Optional[int] = ...) -> None: ...

class RegisterAgentRequest(_message.Message):
    __slots__ = ("agent_id", "address", "hostname", "runtimes", "session_count", "resources", "max_sessions", "live_sessions", "busy_sessions", "certificate_request", "held_sessions", "labels", "registries_by_fingerprint")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    HOSTNAME_FIELD_NUMBER: _ClassVar[int]
    RUNTIMES_FIELD_NUMBER: _ClassVar[int]
    SESSION_COUNT_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    MAX_SESSIONS_FIELD_NUMBER: _ClassVar[int]
    LIVE_SESSIONS_FIELD_NUMBER: _ClassVar[int]
    BUSY_SESSIONS_FIELD_NUMBER: _ClassVar[int]
    CERTIFICATE_REQUEST_FIELD_NUMBER: _ClassVar[int]
    HELD_SESSIONS_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    REGISTRIES_BY_FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    address: str
    hostname: str
    runtimes: _containers.RepeatedCompositeFieldContainer[Runtime]
    session_count: int
    resources: Resources
    max_sessions: int
    live_sessions: _containers.RepeatedScalarFieldContainer[str]
    busy_sessions: int
    certificate_request: bytes
    held_sessions: _containers.RepeatedCompositeFieldContainer[HeldSession]
    labels: _containers.ScalarMap[str, str]
    registries_by_fingerprint: bool
    def __init__(self, agent_id: _Optional[str] = ..., address: _Optional[str] = ..., hostname: _Optional[str] = ..., runtimes: _Optional[_Iterable[_Union[Runtime, _Mapping]]] = ..., session_count: _Optional[int] = ..., resources: _Optional[_Union[Resources, _Mapping]] = ..., max_sessions: _Optional[int] = ..., live_sessions: _Optional[_Iterable[str]] = ..., busy_sessions: _Optional[int] = ..., certificate_request: _Optional[bytes] = ..., held_sessions: _Optional[_Iterable[_Union[HeldSession, _Mapping]]] = ..., labels: _Optional[_Mapping[str, str]] = ..., registries_by_fingerprint: _Optional[bool] = ...) -> None: ...

class HeldSession(_message.Message):
    __slots__ = ("session_id", "epoch", "checkpoint_scene_hash")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_SCENE_HASH_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    epoch: int
    checkpoint_scene_hash: str
    def __init__(self, session_id: _Optional[str] = ..., epoch: _Optional[int] = ..., checkpoint_scene_hash: _Optional[str] = ...) -> None: ...

class RegisterAgentResponse(_message.Message):
    __slots__ = ("heartbeat_interval_seconds", "session_idle_timeout_ms", "certificate", "ca_certificate", "moved_sessions", "registries_held")
    HEARTBEAT_INTERVAL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    SESSION_IDLE_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    CERTIFICATE_FIELD_NUMBER: _ClassVar[int]
    CA_CERTIFICATE_FIELD_NUMBER: _ClassVar[int]
    MOVED_SESSIONS_FIELD_NUMBER: _ClassVar[int]
    REGISTRIES_HELD_FIELD_NUMBER: _ClassVar[int]
    heartbeat_interval_seconds: int
    session_idle_timeout_ms: int
    certificate: bytes
    ca_certificate: bytes
    moved_sessions: _containers.RepeatedScalarFieldContainer[str]
    registries_held: bool
    def __init__(self, heartbeat_interval_seconds: _Optional[int] = ..., session_idle_timeout_ms: _Optional[int] = ..., certificate: _Optional[bytes] = ..., ca_certificate: _Optional[bytes] = ..., moved_sessions: _Optional[_Iterable[str]] = ..., registries_held: _Optional[bool] = ...) -> None: ...

class GetSessionRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class GetSessionResponse(_message.Message):
    __slots__ = ("session",)
    SESSION_FIELD_NUMBER: _ClassVar[int]
    session: Session
    def __init__(self, session: _Optional[_Union[Session, _Mapping]] = ...) -> None: ...

class ListSessionsRequest(_message.Message):
    __slots__ = ("page_size", "page_token", "state", "all_principals")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ALL_PRINCIPALS_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    state: Session.State
    all_principals: bool
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., state: _Optional[_Union[Session.State, str]] = ..., all_principals: _Optional[bool] = ...) -> None: ...

class ListSessionsResponse(_message.Message):
    __slots__ = ("sessions", "next_page_token")
    SESSIONS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    sessions: _containers.RepeatedCompositeFieldContainer[Session]
    next_page_token: str
    def __init__(self, sessions: _Optional[_Iterable[_Union[Session, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class CloseSessionRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class CloseSessionResponse(_message.Message):
    __slots__ = ("session",)
    SESSION_FIELD_NUMBER: _ClassVar[int]
    session: Session
    def __init__(self, session: _Optional[_Union[Session, _Mapping]] = ...) -> None: ...

class Session(_message.Message):
    __slots__ = ("session_id", "state", "contract", "agent_id", "runtime_id", "scene_hash", "plan_count", "active_plan_count", "create_time", "update_time", "close_time", "owner", "epoch")
    class State(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        STATE_UNSPECIFIED: _ClassVar[Session.State]
        STATE_OPEN: _ClassVar[Session.State]
        STATE_PARKED: _ClassVar[Session.State]
        STATE_CLOSED: _ClassVar[Session.State]
        STATE_BROKEN: _ClassVar[Session.State]
    STATE_UNSPECIFIED: Session.State
    STATE_OPEN: Session.State
    STATE_PARKED: Session.State
    STATE_CLOSED: Session.State
    STATE_BROKEN: Session.State
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    CONTRACT_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_ID_FIELD_NUMBER: _ClassVar[int]
    SCENE_HASH_FIELD_NUMBER: _ClassVar[int]
    PLAN_COUNT_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_PLAN_COUNT_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    CLOSE_TIME_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    state: Session.State
    contract: SessionContract
    agent_id: str
    runtime_id: str
    scene_hash: str
    plan_count: int
    active_plan_count: int
    create_time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    close_time: _timestamp_pb2.Timestamp
    owner: str
    epoch: int
    def __init__(self, session_id: _Optional[str] = ..., state: _Optional[_Union[Session.State, str]] = ..., contract: _Optional[_Union[SessionContract, _Mapping]] = ..., agent_id: _Optional[str] = ..., runtime_id: _Optional[str] = ..., scene_hash: _Optional[str] = ..., plan_count: _Optional[int] = ..., active_plan_count: _Optional[int] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., close_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., owner: _Optional[str] = ..., epoch: _Optional[int] = ...) -> None: ...

class Artifact(_message.Message):
    __slots__ = ("session_id", "name", "size_bytes", "sha256", "request_id", "operation_id", "receipt_sequence", "create_time", "left_on_agent")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    OPERATION_ID_FIELD_NUMBER: _ClassVar[int]
    RECEIPT_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    LEFT_ON_AGENT_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    name: str
    size_bytes: int
    sha256: str
    request_id: str
    operation_id: str
    receipt_sequence: int
    create_time: _timestamp_pb2.Timestamp
    left_on_agent: bool
    def __init__(self, session_id: _Optional[str] = ..., name: _Optional[str] = ..., size_bytes: _Optional[int] = ..., sha256: _Optional[str] = ..., request_id: _Optional[str] = ..., operation_id: _Optional[str] = ..., receipt_sequence: _Optional[int] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., left_on_agent: _Optional[bool] = ...) -> None: ...

class UploadArtifactRequest(_message.Message):
    __slots__ = ("header", "chunk")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    header: ArtifactUpload
    chunk: bytes
    def __init__(self, header: _Optional[_Union[ArtifactUpload, _Mapping]] = ..., chunk: _Optional[bytes] = ...) -> None: ...

class ArtifactUpload(_message.Message):
    __slots__ = ("session_id", "name", "size_bytes", "sha256")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    name: str
    size_bytes: int
    sha256: str
    def __init__(self, session_id: _Optional[str] = ..., name: _Optional[str] = ..., size_bytes: _Optional[int] = ..., sha256: _Optional[str] = ...) -> None: ...

class UploadArtifactResponse(_message.Message):
    __slots__ = ("artifact",)
    ARTIFACT_FIELD_NUMBER: _ClassVar[int]
    artifact: Artifact
    def __init__(self, artifact: _Optional[_Union[Artifact, _Mapping]] = ...) -> None: ...

class DownloadArtifactRequest(_message.Message):
    __slots__ = ("session_id", "name", "sha256")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    name: str
    sha256: str
    def __init__(self, session_id: _Optional[str] = ..., name: _Optional[str] = ..., sha256: _Optional[str] = ...) -> None: ...

class DownloadArtifactResponse(_message.Message):
    __slots__ = ("artifact", "chunk")
    ARTIFACT_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    artifact: Artifact
    chunk: bytes
    def __init__(self, artifact: _Optional[_Union[Artifact, _Mapping]] = ..., chunk: _Optional[bytes] = ...) -> None: ...

class ListArtifactsRequest(_message.Message):
    __slots__ = ("session_id", "request_id", "page_size", "page_token")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    request_id: str
    page_size: int
    page_token: str
    def __init__(self, session_id: _Optional[str] = ..., request_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListArtifactsResponse(_message.Message):
    __slots__ = ("artifacts", "next_page_token")
    ARTIFACTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    artifacts: _containers.RepeatedCompositeFieldContainer[Artifact]
    next_page_token: str
    def __init__(self, artifacts: _Optional[_Iterable[_Union[Artifact, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class Token(_message.Message):
    __slots__ = ("name", "scopes", "create_time", "expire_time", "revoke_time", "created_by", "revoked_by")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SCOPES_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    EXPIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    REVOKE_TIME_FIELD_NUMBER: _ClassVar[int]
    CREATED_BY_FIELD_NUMBER: _ClassVar[int]
    REVOKED_BY_FIELD_NUMBER: _ClassVar[int]
    name: str
    scopes: _containers.RepeatedScalarFieldContainer[str]
    create_time: _timestamp_pb2.Timestamp
    expire_time: _timestamp_pb2.Timestamp
    revoke_time: _timestamp_pb2.Timestamp
    created_by: str
    revoked_by: str
    def __init__(self, name: _Optional[str] = ..., scopes: _Optional[_Iterable[str]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., expire_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., revoke_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., created_by: _Optional[str] = ..., revoked_by: _Optional[str] = ...) -> None: ...

class CreateTokenRequest(_message.Message):
    __slots__ = ("name", "scopes", "ttl")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SCOPES_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    name: str
    scopes: _containers.RepeatedScalarFieldContainer[str]
    ttl: _duration_pb2.Duration
    def __init__(self, name: _Optional[str] = ..., scopes: _Optional[_Iterable[str]] = ..., ttl: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class CreateTokenResponse(_message.Message):
    __slots__ = ("token", "secret")
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    SECRET_FIELD_NUMBER: _ClassVar[int]
    token: Token
    secret: str
    def __init__(self, token: _Optional[_Union[Token, _Mapping]] = ..., secret: _Optional[str] = ...) -> None: ...

class ListTokensRequest(_message.Message):
    __slots__ = ("page_size", "page_token")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListTokensResponse(_message.Message):
    __slots__ = ("tokens", "next_page_token")
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    tokens: _containers.RepeatedCompositeFieldContainer[Token]
    next_page_token: str
    def __init__(self, tokens: _Optional[_Iterable[_Union[Token, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class RevokeTokenRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class RevokeTokenResponse(_message.Message):
    __slots__ = ("token",)
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    token: Token
    def __init__(self, token: _Optional[_Union[Token, _Mapping]] = ...) -> None: ...

class Approval(_message.Message):
    __slots__ = ("approval_id", "request_id", "session_id", "requested_by", "state", "decisions", "preview", "create_time", "decision", "resolved_by", "resolve_time")
    class State(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        STATE_UNSPECIFIED: _ClassVar[Approval.State]
        STATE_PENDING: _ClassVar[Approval.State]
        STATE_APPROVED: _ClassVar[Approval.State]
        STATE_REJECTED: _ClassVar[Approval.State]
        STATE_CANCELLED: _ClassVar[Approval.State]
    STATE_UNSPECIFIED: Approval.State
    STATE_PENDING: Approval.State
    STATE_APPROVED: Approval.State
    STATE_REJECTED: Approval.State
    STATE_CANCELLED: Approval.State
    APPROVAL_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    REQUESTED_BY_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    DECISIONS_FIELD_NUMBER: _ClassVar[int]
    PREVIEW_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    RESOLVED_BY_FIELD_NUMBER: _ClassVar[int]
    RESOLVE_TIME_FIELD_NUMBER: _ClassVar[int]
    approval_id: str
    request_id: str
    session_id: str
    requested_by: str
    state: Approval.State
    decisions: _containers.RepeatedCompositeFieldContainer[PolicyDecision]
    preview: Preview
    create_time: _timestamp_pb2.Timestamp
    decision: Decision
    resolved_by: str
    resolve_time: _timestamp_pb2.Timestamp
    def __init__(self, approval_id: _Optional[str] = ..., request_id: _Optional[str] = ..., session_id: _Optional[str] = ..., requested_by: _Optional[str] = ..., state: _Optional[_Union[Approval.State, str]] = ..., decisions: _Optional[_Iterable[_Union[PolicyDecision, _Mapping]]] = ..., preview: _Optional[_Union[Preview, _Mapping]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., decision: _Optional[_Union[Decision, str]] = ..., resolved_by: _Optional[str] = ..., resolve_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class PolicyDecision(_message.Message):
    __slots__ = ("operation_id", "tool_name", "mode", "reason", "rule", "target")
    class Mode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        MODE_UNSPECIFIED: _ClassVar[PolicyDecision.Mode]
        MODE_ALLOW: _ClassVar[PolicyDecision.Mode]
        MODE_REQUIRE_APPROVAL: _ClassVar[PolicyDecision.Mode]
        MODE_DENY: _ClassVar[PolicyDecision.Mode]
    MODE_UNSPECIFIED: PolicyDecision.Mode
    MODE_ALLOW: PolicyDecision.Mode
    MODE_REQUIRE_APPROVAL: PolicyDecision.Mode
    MODE_DENY: PolicyDecision.Mode
    OPERATION_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    RULE_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    operation_id: str
    tool_name: str
    mode: PolicyDecision.Mode
    reason: str
    rule: str
    target: str
    def __init__(self, operation_id: _Optional[str] = ..., tool_name: _Optional[str] = ..., mode: _Optional[_Union[PolicyDecision.Mode, str]] = ..., reason: _Optional[str] = ..., rule: _Optional[str] = ..., target: _Optional[str] = ...) -> None: ...

class Preview(_message.Message):
    __slots__ = ("state", "scene_hash_before", "scene_hash_after", "changes", "failure", "failed_operation_id", "render", "complete_time")
    class State(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        STATE_UNSPECIFIED: _ClassVar[Preview.State]
        STATE_PENDING: _ClassVar[Preview.State]
        STATE_READY: _ClassVar[Preview.State]
        STATE_FAILED: _ClassVar[Preview.State]
    STATE_UNSPECIFIED: Preview.State
    STATE_PENDING: Preview.State
    STATE_READY: Preview.State
    STATE_FAILED: Preview.State
    STATE_FIELD_NUMBER: _ClassVar[int]
    SCENE_HASH_BEFORE_FIELD_NUMBER: _ClassVar[int]
    SCENE_HASH_AFTER_FIELD_NUMBER: _ClassVar[int]
    CHANGES_FIELD_NUMBER: _ClassVar[int]
    FAILURE_FIELD_NUMBER: _ClassVar[int]
    FAILED_OPERATION_ID_FIELD_NUMBER: _ClassVar[int]
    RENDER_FIELD_NUMBER: _ClassVar[int]
    COMPLETE_TIME_FIELD_NUMBER: _ClassVar[int]
    state: Preview.State
    scene_hash_before: str
    scene_hash_after: str
    changes: _containers.RepeatedCompositeFieldContainer[DatablockChange]
    failure: Failure
    failed_operation_id: str
    render: Artifact
    complete_time: _timestamp_pb2.Timestamp
    def __init__(self, state: _Optional[_Union[Preview.State, str]] = ..., scene_hash_before: _Optional[str] = ..., scene_hash_after: _Optional[str] = ..., changes: _Optional[_Iterable[_Union[DatablockChange, _Mapping]]] = ..., failure: _Optional[_Union[Failure, _Mapping]] = ..., failed_operation_id: _Optional[str] = ..., render: _Optional[_Union[Artifact, _Mapping]] = ..., complete_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class DatablockChange(_message.Message):
    __slots__ = ("kind", "collection", "name", "fields")
    class Kind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        KIND_UNSPECIFIED: _ClassVar[DatablockChange.Kind]
        KIND_ADDED: _ClassVar[DatablockChange.Kind]
        KIND_REMOVED: _ClassVar[DatablockChange.Kind]
        KIND_CHANGED: _ClassVar[DatablockChange.Kind]
    KIND_UNSPECIFIED: DatablockChange.Kind
    KIND_ADDED: DatablockChange.Kind
    KIND_REMOVED: DatablockChange.Kind
    KIND_CHANGED: DatablockChange.Kind
    KIND_FIELD_NUMBER: _ClassVar[int]
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    FIELDS_FIELD_NUMBER: _ClassVar[int]
    kind: DatablockChange.Kind
    collection: str
    name: str
    fields: _containers.RepeatedCompositeFieldContainer[FieldChange]
    def __init__(self, kind: _Optional[_Union[DatablockChange.Kind, str]] = ..., collection: _Optional[str] = ..., name: _Optional[str] = ..., fields: _Optional[_Iterable[_Union[FieldChange, _Mapping]]] = ...) -> None: ...

class FieldChange(_message.Message):
    __slots__ = ("field", "before", "after")
    FIELD_FIELD_NUMBER: _ClassVar[int]
    BEFORE_FIELD_NUMBER: _ClassVar[int]
    AFTER_FIELD_NUMBER: _ClassVar[int]
    field: str
    before: _struct_pb2.Value
    after: _struct_pb2.Value
    def __init__(self, field: _Optional[str] = ..., before: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., after: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ...) -> None: ...

class PolicyRule(_message.Message):
    __slots__ = ("rule_id", "principal", "tool_name", "target", "created_by", "approval_id", "create_time")
    RULE_ID_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    CREATED_BY_FIELD_NUMBER: _ClassVar[int]
    APPROVAL_ID_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    rule_id: str
    principal: str
    tool_name: str
    target: str
    created_by: str
    approval_id: str
    create_time: _timestamp_pb2.Timestamp
    def __init__(self, rule_id: _Optional[str] = ..., principal: _Optional[str] = ..., tool_name: _Optional[str] = ..., target: _Optional[str] = ..., created_by: _Optional[str] = ..., approval_id: _Optional[str] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ListApprovalsRequest(_message.Message):
    __slots__ = ("page_size", "page_token", "state", "request_id")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    state: Approval.State
    request_id: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., state: _Optional[_Union[Approval.State, str]] = ..., request_id: _Optional[str] = ...) -> None: ...

class ListApprovalsResponse(_message.Message):
    __slots__ = ("approvals", "next_page_token")
    APPROVALS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    approvals: _containers.RepeatedCompositeFieldContainer[Approval]
    next_page_token: str
    def __init__(self, approvals: _Optional[_Iterable[_Union[Approval, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ResolveApprovalRequest(_message.Message):
    __slots__ = ("approval_id", "decision")
    APPROVAL_ID_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    approval_id: str
    decision: Decision
    def __init__(self, approval_id: _Optional[str] = ..., decision: _Optional[_Union[Decision, str]] = ...) -> None: ...

class ResolveApprovalResponse(_message.Message):
    __slots__ = ("approval", "rules")
    APPROVAL_FIELD_NUMBER: _ClassVar[int]
    RULES_FIELD_NUMBER: _ClassVar[int]
    approval: Approval
    rules: _containers.RepeatedCompositeFieldContainer[PolicyRule]
    def __init__(self, approval: _Optional[_Union[Approval, _Mapping]] = ..., rules: _Optional[_Iterable[_Union[PolicyRule, _Mapping]]] = ...) -> None: ...

class ListPolicyRulesRequest(_message.Message):
    __slots__ = ("page_size", "page_token")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListPolicyRulesResponse(_message.Message):
    __slots__ = ("rules", "next_page_token")
    RULES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    rules: _containers.RepeatedCompositeFieldContainer[PolicyRule]
    next_page_token: str
    def __init__(self, rules: _Optional[_Iterable[_Union[PolicyRule, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class DeletePolicyRuleRequest(_message.Message):
    __slots__ = ("rule_id",)
    RULE_ID_FIELD_NUMBER: _ClassVar[int]
    rule_id: str
    def __init__(self, rule_id: _Optional[str] = ...) -> None: ...

class DeletePolicyRuleResponse(_message.Message):
    __slots__ = ("rule",)
    RULE_FIELD_NUMBER: _ClassVar[int]
    rule: PolicyRule
    def __init__(self, rule: _Optional[_Union[PolicyRule, _Mapping]] = ...) -> None: ...

class ListPlansRequest(_message.Message):
    __slots__ = ("session_id", "page_size", "page_token")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    page_size: int
    page_token: str
    def __init__(self, session_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListPlansResponse(_message.Message):
    __slots__ = ("plans", "next_page_token")
    PLANS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    plans: _containers.RepeatedCompositeFieldContainer[Plan]
    next_page_token: str
    def __init__(self, plans: _Optional[_Iterable[_Union[Plan, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class GetCallerRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetCallerResponse(_message.Message):
    __slots__ = ("principal", "scopes", "auth_disabled")
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    SCOPES_FIELD_NUMBER: _ClassVar[int]
    AUTH_DISABLED_FIELD_NUMBER: _ClassVar[int]
    principal: str
    scopes: _containers.RepeatedScalarFieldContainer[str]
    auth_disabled: bool
    def __init__(self, principal: _Optional[str] = ..., scopes: _Optional[_Iterable[str]] = ..., auth_disabled: _Optional[bool] = ...) -> None: ...
