package blender

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"os"
	"reflect"
	"strings"
	"testing"
)

// bridgeAnswers are answers the bridge wrote to execute requests, on both
// Blenders (testdata/answers.jsonl: creates, renames, deletes, texts with
// escapes, read-only tools with a null undo, an export and a render with
// their files, refusals).
func bridgeAnswers(t testing.TB) [][]byte {
	raw, err := os.ReadFile("testdata/answers.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	var lines [][]byte
	for l := range bytes.Lines(raw) {
		lines = append(lines, l)
	}
	return lines
}

// agreesWithJSON fails unless decodeExecute gives what json.Unmarshal gives.
func agreesWithJSON(t *testing.T, line []byte) {
	t.Helper()
	var want response[executeResult]
	werr := json.Unmarshal(line, &want)
	got, err := decodeExecute(line)
	if (err != nil) != (werr != nil) {
		t.Fatalf("%q: error %v, json.Unmarshal's %v", line, err, werr)
	}
	if werr == nil && !reflect.DeepEqual(got, want) {
		t.Fatalf("%q:\n got %+v\nwant %+v", line, got, want)
	}
}

func TestDecodeExecuteTakesBridgeAnswers(t *testing.T) {
	for _, line := range bridgeAnswers(t) {
		agreesWithJSON(t, line)
		// Every success the bridge wrote takes the one pass; a failure
		// goes to json.Unmarshal.
		_, fast := fastExecute(line)
		if ok := bytes.Contains(line, []byte(`"ok":true`)); fast != ok {
			t.Errorf("%q: one pass %v", line, fast)
		}
	}
}

func TestDecodeExecuteOddLines(t *testing.T) {
	const hash = `"` + "5523aa30fc6cab10a2778f89116a8b6528b9c816665115b446606be497feb6b1" + `"`
	nested := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	// Lines the one pass takes: what it makes of them must be
	// json.Unmarshal's.
	for _, line := range []string{
		`{"id":1,"ok":true,"result":{"result":{},"undo":null,"files":[],"scene_hash_before":` + hash + `,"scene_hash_after":` + hash + `,"mutated":false,"records_changed":0}}`,
		` { "id" : 1 , "ok" : true , "result" : { "result" : { "a" : [ 1 , -2.5e-3 , "\u00e9\n" ] } , "undo" : { } } } ` + "\r\n",
		`{"id":1,"ok":true,"result":{}}`,
		`{"id":1,"ok":true}`,
		`{}`,
		`{"id":18446744073709551615,"ok":true,"result":{}}`,
		`{"id":1,"id":2,"ok":true,"result":{}}`,
		`{"id":1,"ok":true,"result":{"undo":1,"undo":2}}`,
		`{"id":1,"ok":true,"result":{"mutated":true,"records_changed":3},"result":{"records_changed":4}}`,
		`{"id":1,"ok":true,"result":{"files":[{"name":"a","size":1,"sha256":"b"}]},"result":{"files":[]}}`,
		`{"id":1,"ok":true,"result":{"files":[{"name":"a","size":1,"sha256":"b"},{"NAME":"c"}],"files":null}}`,
		`{"id":1,"ok":true,"result":{"files":null}}`,
		`{"id":1,"ok":true,"result":{"files":[{"name":"a","size":1},{"name":"c"}],"files":[{"name":"b"}]}}`,
		`{"id":1,"ok":true,"result":{"records_changed":-0}}`,
		`{"id":1,"ok":true,"result":{"records_changed":-7}}`,
		`{"id":1,"ok":true,"result":{"undo":{"a":"` + "\xff\xfe\x7f" + `","b":"\ud800"}}}`,
		`{"id":1,"ok":true,"result":{"undo":` + nested(maxSpanDepth+1) + `}}`, // the deepest it follows
	} {
		if _, fast := fastExecute([]byte(line)); !fast {
			t.Errorf("%q: not taken in one pass", line)
		}
		agreesWithJSON(t, []byte(line))
	}
	// Lines it leaves to json.Unmarshal, good or bad.
	for _, line := range []string{
		`{"id":1,"progress":{"frame":3,"frames":10}}`,
		`{"id":1,"ok":false,"error":{"code":"not_found","message":"no \"x\"","scene_hash":` + hash + `}}`,
		`{"id":null,"ok":true,"result":{}}`,
		`{"id":-1,"ok":true,"result":{}}`,
		`{"id":-0,"ok":true,"result":{}}`,
		`{"id":1.0,"ok":true,"result":{}}`,
		`{"id":1e2,"ok":true,"result":{}}`,
		`{"id":18446744073709551616,"ok":true,"result":{}}`,
		`{"id":01,"ok":true,"result":{}}`,
		`{"id":1,"ok":null,"result":{}}`,
		`{"id":1,"ok":1,"result":{}}`,
		`{"id":1,"ok":true,"result":null}`,
		`{"id":1,"ok":true,"result":[]}`,
		`{"ID":1,"ok":true,"result":{}}`,
		`{"id":1,"ok":true,"result":{"Mutated":true}}`,
		`{"id":1,"ok":true,"result":{"records_changed":1.5}}`,
		`{"id":1,"ok":true,"result":{"records_changed":99999999999999999999}}`,
		`{"id":1,"ok":true,"result":{"scene_hash_after":"a\u0062"}}`,
		`{"id":1,"ok":true,"result":{"scene_hash_after":"é"}}`,
		`{"id":1,"ok":true,"result":{"scene_hash_after":null}}`,
		`{"id":1,"ok":true,"result":{"files":["a","b\"c"]}}`,
		`{"id":1,"ok":true,"result":{"files":[{"size":"1"}]}}`,
		`{"id":1,"ok":true,"result":{"files":["a",]}}`,
		`{"id":1,"ok":true,"result":{"undo":{"a":"\x01"}}}`,
		`{"id":1,"ok":true,"result":{"undo":{"a":"\ud800\u12"}}}`,
		`{"id":1,"ok":true,"result":{"undo":{"a":"\q"}}}`,
		`{"id":1,"ok":true,"result":{"undo":{"a":1,}}}`,
		`{"id":1,"ok":true,"result":{"undo":{"a" 1}}}`,
		`{"id":1,"ok":true,"result":{"undo":{1:1}}}`,
		`{"id":1,"ok":true,"result":{"undo":[1 2]}}`,
		`{"id":1,"ok":true,"result":{"undo":-}}`,
		`{"id":1,"ok":true,"result":{"undo":1.}}`,
		`{"id":1,"ok":true,"result":{"undo":.5}}`,
		`{"id":1,"ok":true,"result":{"undo":1e}}`,
		`{"id":1,"ok":true,"result":{"undo":tru}}`,
		`{"id":1,"ok":true,"result":{"undo":` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `}}`,
		`{"id":1,"ok":true,"result":{}} x`,
		`{"id":1,"ok":true,"result":{}}{}`,
		`{"id":1,"ok":true,"result":{}`,
		``,
		`{"id":1,"ok":true,"result":{"undo":` + nested(maxSpanDepth+2) + `}}`, // past the pass's bound
		`{"id":1,"OK":true,"result":{}}`,
		`{"id":1,"ok":true,"Result":{}}`,
		`{"id":1,"ok":true,"result":{"Undo":{}}}`,
		`{"id":1,"ok":true,"result":{"scene_hash_BEFORE":"x"}}`,
		`{"id":1,"ok":true,"result":{"":1}}`,
		"{\"id\":1,\"ok\":true,\"result\":{}}\f",
		"\ufeff{\"id\":1,\"ok\":true,\"result\":{}}",
	} {
		if _, fast := fastExecute([]byte(line)); fast {
			t.Errorf("%q: taken in one pass", line)
		}
		agreesWithJSON(t, []byte(line))
	}
}

// TestDecodeExecuteMutated changes the bridge's answers a byte or a piece at
// a time: whatever json.Unmarshal makes of each, decodeExecute makes too.
func TestDecodeExecuteMutated(t *testing.T) {
	lines := bridgeAnswers(t)
	rng := rand.New(rand.NewPCG(15, 15))
	const alphabet = "{}[]:,\" \\/\n\tux0123456789.eE+-truefalsnIDOKRU\x00\x7f\xff"
	tokens := []string{`null`, `{}`, `[]`, `"a"`, `\u00e9`, `\ud800`, `-0`, `1e400`, `"Undo"`, `"undo":1,`, `"id":1,`, ` `}
	for n := range 30000 {
		line := bytes.TrimSuffix(lines[n%len(lines)], []byte("\n"))
		m := append([]byte(nil), line...)
		for range 1 + rng.IntN(3) {
			at := rng.IntN(len(m) + 1)
			switch rng.IntN(5) {
			case 0: // change a byte
				if at < len(m) {
					m[at] = alphabet[rng.IntN(len(alphabet))]
				}
			case 1: // drop one
				if at < len(m) {
					m = append(m[:at], m[at+1:]...)
				}
			case 2: // add one
				m = append(m[:at], append([]byte{alphabet[rng.IntN(len(alphabet))]}, m[at:]...)...)
			case 3: // add a token
				m = append(m[:at], append([]byte(tokens[rng.IntN(len(tokens))]), m[at:]...)...)
			case 4: // cut short
				m = m[:at]
			}
		}
		agreesWithJSON(t, m)
	}
}

func FuzzDecodeExecute(f *testing.F) {
	for _, line := range bridgeAnswers(f) {
		f.Add(line)
	}
	f.Fuzz(func(t *testing.T, line []byte) { agreesWithJSON(t, line) })
}

// BenchmarkDecodeExecute: a create's answer (424 bytes), json.Unmarshal
// against decodeExecute.
func BenchmarkDecodeExecute(b *testing.B) {
	var line []byte
	for _, l := range bridgeAnswers(b) {
		if bytes.Contains(l, []byte(`"tool":"object.create"`)) {
			line = l
			break
		}
	}
	b.Run("json.Unmarshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var r response[executeResult]
			if err := json.Unmarshal(line, &r); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decodeExecute", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := decodeExecute(line); err != nil {
				b.Fatal(err)
			}
		}
	})
}
