// Package plan owns the control plane's plan checker and scheduler.
//
// A plan is a DAG of tool operations. [Check] decides, before anything runs,
// whether a whole plan may execute against one agent's tool [Registry], and
// if so returns its deterministic schedule. A refusal is an [*Error] naming
// the first failing stage, every violation of that stage, and a minimal
// repair plan in the shape of the seed's failure contract:
//
//  1. OPERATION_ID_DUPLICATE  an operation_id appears twice
//  2. DEPENDENCY_MISSING      depends_on names an id that is not in the plan
//  3. GRAPH_CYCLE             the dependency graph has a cycle (a → a included)
//  4. TOOL_UNKNOWN            tool_name is not in the registry
//  5. SCHEMA_INVALID          args are not plain JSON or fail the tool's schema
//  6. POLICY_BLOCKED          the declared safety level is below the tool's
//
// An operation that depends on itself is a cycle of one, not a missing
// dependency. A tool's schema is JSON Schema plus [MaxBytesKeyword]
// ("x-max-bytes"), which the agent's tools use for Blender's 63-byte names,
// and [SpanKeyword] ("x-span"), for their frame ranges.
// A schema that uses only the keywords the agent's tools use is compiled a
// second time into a quick check that passes valid args without the JSON
// Schema validator (a tenth of its cost); whatever it does not pass, the
// validator checks and names.
//
// The schedule is Kahn's algorithm with a min-heap on operation_id: among the
// operations whose dependencies are done, the lexically smallest id (byte
// order) runs first. The order depends only on the graph, never on the order
// in which operations were submitted.
//
// The package also defines the plan's hashes: [CanonicalJSON] (RFC 8785
// style), [IdempotencyKey] for one operation, and [Digest] for a whole plan.
//
// Everything here is pure and deterministic, and nothing recurses: plans are
// untrusted input, and a 100,000-operation chain must neither overflow a
// stack nor take noticeable time. (The JSON Schema validator walks args
// recursively; args deeper than [MaxArgsDepth] are refused before it runs.)
// The wire shape (id pattern, unique depends_on, safety level set) is checked
// earlier by protovalidate in the gRPC layer, but Check never relies on it.
// The id pattern is also [ValidOperationID], for ids the control plane
// makes up itself (macro steps).
package plan
