package app

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/blendplane/blendplane/controlplane/internal/store"
	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

// ErrRuntimeNotFound: no registered agent offers that runtime.
var ErrRuntimeNotFound = errors.New("runtime not found")

// Tools returns the tool registry of one of the caller's sessions, or of a
// runtime (runtimeID empty: the first ready one).
func (a *App) Tools(ctx context.Context, who Principal, sessionID, runtimeID string) (*cpv1.ToolRegistry, error) {
	if sessionID != "" {
		sess, err := a.session(who, sessionID)
		if err != nil {
			return nil, err
		}
		return a.store.Registry(sess.RegistryFingerprint())
	}
	for _, rt := range a.fleet.Runtimes() {
		if runtimeID == "" || rt.GetRuntimeId() == runtimeID {
			return rt.GetRegistry(), nil
		}
	}
	return nil, fmt.Errorf("%w: no ready agent has runtime %q", ErrRuntimeNotFound, runtimeID)
}

// Macros returns the macro registry.
func (a *App) Macros(ctx context.Context) (*cpv1.ListMacrosResponse, error) {
	resp := &cpv1.ListMacrosResponse{RegistryRef: a.macroRef()}
	for _, m := range a.macros.List() {
		schema, err := structpb.NewStruct(m.Schema)
		if err != nil {
			return nil, err
		}
		example, err := structpb.NewStruct(m.Example)
		if err != nil {
			return nil, err
		}
		resp.Macros = append(resp.Macros, &cpv1.MacroDefinition{
			Name: m.Name, Version: m.Version, Description: m.Description,
			InputSchema: schema, ExampleArgs: example, Tools: m.Tools, Fingerprint: m.Fingerprint(),
		})
	}
	return resp, nil
}

// AuditRecords pages through the caller's audit records (AIP-158), of one
// plan or of all of them. An admin may name another principal (owner), and
// without a request id or an owner sees everyone's.
func (a *App) AuditRecords(ctx context.Context, who Principal, q AuditQuery, size int32, token string) ([]*cpv1.AuditRecord, string, error) {
	owner, err := planOwner(who, q.Owner)
	if err != nil {
		return nil, "", err
	}
	f := store.AuditFilter{Owner: owner, RequestID: q.RequestID, OperationID: q.OperationID, MutationID: q.MutationID}
	if who.Admin() && owner == who.Name && q.RequestID == "" {
		f.Owner = "" // the whole log
	}
	query := strings.Join([]string{f.Owner, f.RequestID, f.OperationID, f.MutationID}, "/")
	after, err := decodePageToken(token, "audit", query)
	if err != nil {
		return nil, "", badPageToken(err)
	}
	records, next, err := a.store.AuditRecords(f, after, pageSize(size))
	if err != nil {
		return nil, "", err
	}
	return records, encodePageToken("audit", next, query), nil
}

// AuditQuery selects audit records: the caller's (Owner: an admin may name
// another principal), of one plan, operation id or Blender mutation id.
type AuditQuery struct {
	Owner, RequestID, OperationID, MutationID string
}
