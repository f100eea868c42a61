package app

import (
	"errors"

	"github.com/blendplane/blendplane/controlplane/internal/plan"
)

// Sentinel errors of the use cases; the gRPC layer maps each to a code and
// an ErrorInfo reason in one table.
var (
	// ErrIdempotencyConflict: a request id was reused with other content.
	ErrIdempotencyConflict = errors.New("idempotency conflict")
	// ErrAgentUnavailable: the session's agent did not answer.
	ErrAgentUnavailable = errors.New("agent unavailable")
	// ErrCapacityExhausted: no agent can hold another session now.
	ErrCapacityExhausted = errors.New("capacity exhausted")
	// ErrQuotaExceeded: the principal holds as many sessions as it may, or
	// a file would take a session's files over its temp_storage_mib.
	ErrQuotaExceeded = errors.New("quota exceeded")
	// ErrBadPageToken: a page token this server did not issue for the query.
	ErrBadPageToken = errors.New("invalid page_token")
	// ErrRegistryInvalid: a runtime's tool registry does not compile.
	ErrRegistryInvalid = errors.New("tool registry invalid")
	// ErrChecksumMismatch: uploaded content differs from its declared size
	// or SHA-256.
	ErrChecksumMismatch = errors.New("checksum mismatch")
	// ErrArtifactConflict: the session's sandbox holds something that is not
	// a file (a directory) under an upload's name.
	ErrArtifactConflict = errors.New("artifact name taken by a directory")
	// ErrArtifactUnavailable: an artifact's content is not stored and its
	// agent no longer has it.
	ErrArtifactUnavailable = errors.New("artifact content unavailable")
)

// badField refuses a malformed request field like the wire rules do
// (INVALID_ARGUMENT / SCHEMA_INVALID naming the field).
func badField(field, desc string) error {
	return &plan.Error{Reason: plan.ReasonSchemaInvalid, Message: field + ": " + desc,
		Violations: []plan.Violation{{Field: field, Description: desc}}}
}

// badPageToken refuses a page token like any malformed request field.
func badPageToken(err error) error { return badField("page_token", err.Error()) }
