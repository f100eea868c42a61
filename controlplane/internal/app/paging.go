package app

import (
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
)

const (
	defaultPageSize = 100
	maxPageSize     = 1000
)

// pageSize applies AIP-158's defaults: 0 means the default, more than the
// maximum means the maximum.
func pageSize(n int32) int {
	switch {
	case n <= 0:
		return defaultPageSize
	case n > maxPageSize:
		return maxPageSize
	}
	return int(n)
}

// Page tokens are opaque to clients and valid only for the query they were
// issued for: kind names the list, query its filters.
func encodePageToken(kind string, after uint64, query string) string {
	if after == 0 {
		return ""
	}
	return base64.RawURLEncoding.EncodeToString([]byte(fmt.Sprintf("v1:%s:%d:%s", kind, after, query)))
}

func decodePageToken(token, kind, query string) (uint64, error) {
	if token == "" {
		return 0, nil
	}
	raw, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil {
		return 0, fmt.Errorf("%w: not a token this server issued", ErrBadPageToken)
	}
	parts := strings.SplitN(string(raw), ":", 4)
	if len(parts) != 4 || parts[0] != "v1" || parts[1] != kind {
		return 0, fmt.Errorf("%w: not a token this server issued for this list", ErrBadPageToken)
	}
	if parts[3] != query {
		return 0, fmt.Errorf("%w: issued for another filter", ErrBadPageToken)
	}
	after, err := strconv.ParseUint(parts[2], 10, 64)
	if err != nil || after == 0 {
		return 0, fmt.Errorf("%w: not a token this server issued", ErrBadPageToken)
	}
	return after, nil
}

// Page tokens of lists ordered by name carry the last name returned.
func encodeNamePageToken(kind, name string) string {
	if name == "" {
		return ""
	}
	return base64.RawURLEncoding.EncodeToString([]byte("v1:" + kind + ":" + name))
}

func decodeNamePageToken(token, kind string) (string, error) {
	if token == "" {
		return "", nil
	}
	raw, err := base64.RawURLEncoding.DecodeString(token)
	name, ok := strings.CutPrefix(string(raw), "v1:"+kind+":")
	if err != nil || !ok || name == "" {
		return "", fmt.Errorf("%w: not a token this server issued for this list", ErrBadPageToken)
	}
	return name, nil
}
