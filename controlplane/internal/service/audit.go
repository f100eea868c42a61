package service

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/blendplane/blendplane/controlplane/internal/plan"
	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

const (
	defaultAuditPage = 100
	maxAuditPage     = 1000
)

// errBadPageToken: the token was not issued for this query.
var errBadPageToken = errors.New("invalid page_token")

// ListAuditRecords pages through the audit log (AIP-158): page tokens are
// opaque, and only valid with the request_id they were issued for.
func (s *Server) ListAuditRecords(ctx context.Context, req *cpv1.ListAuditRecordsRequest) (*cpv1.ListAuditRecordsResponse, error) {
	after, err := decodePageToken(req.GetPageToken(), req.GetRequestId())
	if err != nil {
		return nil, toStatus(&plan.Error{Reason: plan.ReasonSchemaInvalid, Message: err.Error(),
			Violations: []plan.Violation{{Field: "page_token", Description: err.Error()}}})
	}
	size := int(req.GetPageSize())
	switch {
	case size == 0:
		size = defaultAuditPage
	case size > maxAuditPage:
		size = maxAuditPage
	}
	records, next, err := s.store.AuditRecords(req.GetRequestId(), after, size)
	if err != nil {
		return nil, toStatus(err)
	}
	resp := &cpv1.ListAuditRecordsResponse{AuditRecords: records}
	if next > 0 {
		resp.NextPageToken = encodePageToken(next, req.GetRequestId())
	}
	return resp, nil
}

func encodePageToken(after uint64, requestID string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(fmt.Sprintf("v1:%d:%s", after, requestID)))
}

func decodePageToken(token, requestID string) (uint64, error) {
	if token == "" {
		return 0, nil
	}
	raw, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil {
		return 0, fmt.Errorf("%w: not a token this server issued", errBadPageToken)
	}
	parts := strings.SplitN(string(raw), ":", 3)
	if len(parts) != 3 || parts[0] != "v1" {
		return 0, fmt.Errorf("%w: not a token this server issued", errBadPageToken)
	}
	if parts[2] != requestID {
		return 0, fmt.Errorf("%w: issued for another request_id filter", errBadPageToken)
	}
	after, err := strconv.ParseUint(parts[1], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: not a token this server issued", errBadPageToken)
	}
	return after, nil
}
