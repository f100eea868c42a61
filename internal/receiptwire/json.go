package receiptwire

import (
	"encoding/json"

	"google.golang.org/protobuf/encoding/protowire"

	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
	"github.com/blendplane/blendplane/internal/structwire"
	"github.com/blendplane/blendplane/internal/wirefields"
)

// ResultJSON is r's result as JSON, written straight from its wire form:
// the bytes json.Marshal gives for r.GetResult().AsMap() (keys sorted,
// numbers and strings as encoding/json writes them), without building
// either. A receipt without a result gives {}, as AsMap of none does.
func ResultJSON(r *cpv1.Receipt) (json.RawMessage, error) {
	if res := r.GetResult(); res != nil { // decoded already
		return json.Marshal(res.AsMap())
	}
	_, fields, err := wirefields.Cut(r.ProtoReflect().GetUnknown(), resultField)
	if err != nil {
		return nil, err
	}
	if len(fields) == 0 {
		return json.RawMessage("{}"), nil
	}
	// The last occurrence wins; a Struct's occurrences would merge, which
	// nothing that encodes one produces.
	var raw []byte
	if err := wirefields.Each(fields, func(_ protowire.Number, _ protowire.Type, _, v []byte) error {
		raw = v
		return nil
	}); err != nil {
		return nil, err
	}
	return structwire.AppendJSON(make([]byte, 0, len(raw)+len(raw)/4), raw) // about as long as its wire form
}
