package lesson

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var allowedTools = map[string]bool{"": true, "object.create": true, "object.delete": true, "object.select": true}

// FuzzParsePack: whatever the body, parsing and planning never panic, a
// refusal is 400 or 422, and what passes calls only the lesson tools with
// arguments in range.
func FuzzParsePack(f *testing.F) {
	for _, seed := range []string{
		`{"lesson":[{"command":"SPEAK","params":{"text":"Hello"}},{"command":"ADD_CUBE","params":{"size":1.0,"location":[0,0,0]}}],"metadata":{"id":"lesson-123","issued_at":1690000000}}`,
		`{"lesson":[{"command":"RUN_OPERATOR","params":{"operator":"mesh.primitive_uv_sphere_add","params":{"radius":2}}}],"metadata":{"id":"a"}}`,
		`{"lesson":[{"command":"DELETE_OBJECT","params":{"name":"Cube"}},{"command":"WAIT","params":{"ms":10}}],"metadata":{"id":"b"},"signature":null}`,
		`{"lesson":[{"command":"UI_HIGHLIGHT","params":{"selector":"#x","duration_ms":1e309}}],"metadata":{"id":"c"}}`,
		`{"lesson":[],"metadata":{"id":"d"}}`, `[]`, `{"lesson":[{"command":"X_CUSTOM.a"}]}`, `{`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		pack, md, err := ParsePack(body)
		if err != nil {
			if err.Status != http.StatusBadRequest {
				t.Fatalf("ParsePack refused with %d", err.Status)
			}
			return
		}
		if !idPattern.MatchString(md.ID) || len(pack.Lesson) == 0 {
			t.Fatalf("ParsePack passed %+v %+v", pack, md)
		}
		actions, perr := Plan(pack.Lesson, len(body)%2 == 0)
		if perr != nil {
			if perr.Status != http.StatusUnprocessableEntity {
				t.Fatalf("Plan refused with %d", perr.Status)
			}
			return
		}
		for _, a := range actions {
			if !allowedTools[a.Tool] && !strings.HasPrefix(a.Tool, "macro.") || (a.Tool == "") == (a.Frontend == nil) {
				t.Fatalf("step %d: tool %q frontend %v", a.Index, a.Tool, a.Frontend)
			}
			if s, ok := a.Args["size"].(float64); ok && (s <= 0 || s > maxSize || math.IsNaN(s)) {
				t.Fatalf("size %v passed", s)
			}
			if loc, ok := a.Args["location"].([]any); ok {
				for _, v := range loc {
					if math.Abs(v.(float64)) > maxCoordinate {
						t.Fatalf("location %v passed", loc)
					}
				}
			}
			if _, err := json.Marshal(a.Args); err != nil {
				t.Fatalf("args do not encode: %v", err)
			}
		}
	})
}

func TestSignVerify(t *testing.T) {
	pub, priv, _ := ed25519.GenerateKey(nil)
	other, _, _ := ed25519.GenerateKey(nil)
	pack, _, err := ParsePack([]byte(`{"lesson":[{"command":"ADD_CUBE","params":{"size":1}}],"metadata":{"id":"s1","b":2,"a":1}}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := Sign(pack, priv); err != nil {
		t.Fatal(err)
	}
	if err := Verify(pack, []ed25519.PublicKey{other, pub}); err != nil {
		t.Fatalf("a signed pack: %v", err)
	}
	if err := Verify(pack, []ed25519.PublicKey{other}); err == nil {
		t.Fatal("verified against the wrong key")
	}
	// The signature covers the canonical form: key order and spacing do
	// not matter, content does.
	b, _ := json.Marshal(pack)
	re, _, _ := ParsePack([]byte(`{"signature":` + string(mustJSON(*pack.Signature)) + `,"metadata":{"a":1, "b":2,"id":"s1"},"lesson":[{"params":{"size":1.0},"command":"ADD_CUBE"}]}`))
	if err := Verify(re, []ed25519.PublicKey{pub}); err != nil {
		t.Fatalf("the same pack, reordered: %v (%s)", err, b)
	}
	re.Lesson[0].Params = json.RawMessage(`{"size":2}`)
	if err := Verify(re, []ed25519.PublicKey{pub}); err == nil {
		t.Fatal("a changed pack verified")
	}
}

func mustJSON(v any) []byte { b, _ := json.Marshal(v); return b }

// TestSchemaInDocs: docs/lesson-pack.schema.json is the schema the server
// validates against.
func TestSchemaInDocs(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "docs", "lesson-pack.schema.json"))
	if err != nil || !bytes.Equal(doc, PackSchema) {
		t.Fatalf("docs/lesson-pack.schema.json differs from lesson/schema/lesson-pack.schema.json (%v): copy it", err)
	}
}

// TestSchemaErrorNamesNoPath: a schema refusal names the schema by its $id,
// never by a file of the server's machine.
func TestSchemaErrorNamesNoPath(t *testing.T) {
	wd, _ := os.Getwd()
	_, _, err := ParsePack([]byte(`{"lesson":[{"command":"SPEAK","params":{"text":"x"}}],"metadata":{"id":"bad id/.."}}`))
	if err == nil || err.Status != http.StatusBadRequest || err.Code != "SCHEMA_INVALID" {
		t.Fatalf("a bad metadata.id: %v", err)
	}
	if strings.Contains(err.Message, "file:") || strings.Contains(err.Message, wd) || !strings.Contains(err.Message, packSchemaURL) {
		t.Fatalf("the refusal names a local path: %s", err.Message)
	}
}

// TestNameLimitInBytes: an object name's limit is 63 bytes, and the
// refusal says so (40 two-byte characters are 80 bytes).
func TestNameLimitInBytes(t *testing.T) {
	for _, cmd := range []string{"DELETE_OBJECT", "ADD_CUBE"} {
		_, err := Plan([]Step{{Command: cmd, Params: mustJSON(map[string]any{"name": strings.Repeat("é", 40)})}}, false)
		if err == nil || err.Status != http.StatusUnprocessableEntity || !strings.Contains(err.Message, "63 bytes") || strings.Contains(err.Message, "characters") {
			t.Errorf("%s with an 80-byte name: %v", cmd, err)
		}
		if _, err := Plan([]Step{{Command: cmd, Params: mustJSON(map[string]any{"name": strings.Repeat("é", 31)})}}, false); err != nil {
			t.Errorf("%s with a 62-byte name: %v", cmd, err)
		}
	}
}
