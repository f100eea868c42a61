package structwire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand"
	"strconv"
	"strings"
	"testing"
)

// same checks FromJSON against the way it replaces: encoding/json, structpb
// and a deterministic proto.Marshal.
func same(t testing.TB, obj []byte) {
	t.Helper()
	got, err := FromJSON(obj)
	want, werr := viaMaps(obj)
	if fmt.Sprint(err) != fmt.Sprint(werr) || !bytes.Equal(got, want) {
		t.Fatalf("FromJSON(%q) = %x, %v\nwant %x, %v", obj, got, err, want, werr)
	}
}

func TestCases(t *testing.T) {
	for _, obj := range []string{
		`{}`, ` { } `, `null`, `{"a":1}`, `{"b":2,"a":1,"c":3}`, `{"a":1,"a":2}`, `{"a":{"x":1},"a":[1]}`,
		`{"k":[],"o":{},"s":"","n":null,"t":true,"f":false,"z":0,"m":-0,"e":1.5e-7,"E":-2E+300,"d":0.1}`,
		`{"nested":{"list":[1,[2,[3,{"deep":"x"}]],{"b":1,"a":2}]}}`,
		"{\"ws\" :\n\t[ 1 ,\r 2 ] }",
		`{"esc":"q\"b\\s\/n\nr\rt\tb\bf\f","u":"\u00e9\u4e2d\ud83d\ude00","lone":"\ud800x","lone2":"\udc00\ud800","pair?":"\ud83d\u0041"}`,
		"{\"raw\":\"caf\xc3\xa9 \xff bad \xed\xa0\x80\"}",
		`{"\u0000":"nul key","":"empty key"}`,
		`{"big":1e400}`, `{"tiny":1e-400}`, `[1]`, `"s"`, `1`, `{"a":01}`, `{"a":1.}`, `{"a":.5}`, `{"a":+1}`, `{"a":1e}`,
		`{"a":1,}`, `{"a" 1}`, `{"a":tru}`, `{"a":nul}`, `{"a":"\x"}`, `{"a":"\u12"}`, "{\"a\":\"\x01\"}", `{"a":1}x`, `{"a":1} {}`,
		`{"a":"unterminated}`, `{`, ``, ` `, `nullx`,
		`{"a":` + strings.Repeat("[", 300) + strings.Repeat("]", 300) + `}`,
		`{"a":` + strings.Repeat(`{"b":`, 300) + `1` + strings.Repeat("}", 300) + `}`,
	} {
		same(t, []byte(obj))
	}
}

// TestLongNested checks lists and objects whose contents take two and three
// bytes of length (written in place, then widened), and a result larger than
// a pooled parser keeps, between small ones that reuse its buffers.
func TestLongNested(t *testing.T) {
	list := func(n int) string {
		items := make([]string, n)
		for i := range items {
			items[i] = strconv.Itoa(i)
		}
		return "[" + strings.Join(items, ",") + "]"
	}
	object := func(n int, value string) string {
		fields := make([]string, n)
		for i := range fields {
			fields[i] = fmt.Sprintf("%q:%s", fmt.Sprint("k", n-i), value)
		}
		return "{" + strings.Join(fields, ",") + "}"
	}
	for _, obj := range []string{
		`{"l":` + list(11) + `}`,   // 121 bytes of items: one byte of length
		`{"l":` + list(12) + `}`,   // 132: two
		`{"l":` + list(1500) + `}`, // 16,500: three
		`{"o":` + object(12, `"v"`) + `,"a":1}`,
		`{"o":` + object(2000, list(3)) + `,"p":[` + object(3, `1`) + `,` + object(200, `null`) + `]}`,
		`{"big":` + object(3000, list(5)) + `}`, // more than a pooled parser keeps
		`{"a":{"b":1},"c":{"d":[{"e":2},{"f":3}]}}`,
	} {
		same(t, []byte(obj))
		if _, ok := transcode([]byte(obj)); !ok { // same would pass on the fallback
			t.Errorf("%.60s…: not transcoded in one pass", obj)
		}
	}
}

// TestRandom checks random objects with every kind of value, escapes,
// repeated keys and the numbers Python and Go write.
func TestRandom(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for i := 0; i < 3000; i++ {
		var b strings.Builder
		randObject(rng, &b, 0)
		same(t, []byte(b.String()))
		wire, ok := transcode([]byte(b.String()))
		if !ok {
			t.Fatalf("%s: not transcoded in one pass", b.String())
		}
		// And back: what json.Marshal writes of the decoded object.
		var m map[string]any
		_ = json.Unmarshal([]byte(b.String()), &m)
		want, _ := json.Marshal(m)
		if back, err := AppendJSON(nil, wire); err != nil || string(back) != string(want) {
			t.Fatalf("%s: back to JSON %s %v, want %s", b.String(), back, err, want)
		}
	}
}

func randObject(rng *rand.Rand, b *strings.Builder, depth int) {
	b.WriteByte('{')
	n := rng.Intn(6)
	if depth > 3 {
		n = rng.Intn(2)
	}
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		randString(rng, b, []string{"a", "b", "name", "é", "a", "", "Z"})
		b.WriteByte(':')
		randValue(rng, b, depth+1)
	}
	b.WriteByte('}')
}

func randValue(rng *rand.Rand, b *strings.Builder, depth int) {
	switch k := rng.Intn(9); {
	case k == 0 && depth < 6:
		randObject(rng, b, depth)
	case k == 1 && depth < 6:
		b.WriteByte('[')
		for i, n := 0, rng.Intn(4); i < n; i++ {
			if i > 0 {
				b.WriteString(" , ")
			}
			randValue(rng, b, depth+1)
		}
		b.WriteByte(']')
	case k == 2:
		b.WriteString([]string{"true", "false", "null"}[rng.Intn(3)])
	case k == 3:
		b.WriteString(strconv.FormatFloat(rng.NormFloat64()*1e6, 'g', -1, 64))
	case k == 4:
		b.WriteString(strconv.Itoa(rng.Intn(2000) - 1000))
	case k == 5:
		f, _ := json.Marshal(rng.ExpFloat64() * 1e-300)
		b.Write(f)
	default:
		randString(rng, b, []string{"Cube", "x\"y", "tab\t", "\\u00e9", "\\ud83d\\ude00", "\\ud800", "é", "\xff", "\\n", "\\/", "MESH", ""})
	}
}

func randString(rng *rand.Rand, b *strings.Builder, parts []string) {
	b.WriteByte('"')
	for i, n := 0, rng.Intn(3); i < n; i++ {
		p := parts[rng.Intn(len(parts))]
		if p == "x\"y" {
			p = `x\"y`
		} else if p == "tab\t" {
			p = `tab\t`
		}
		b.WriteString(p)
	}
	b.WriteByte('"')
}

func FuzzFromJSON(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":[1,{"b":"\u00e9"}],"a":null}`, `{"x":1e400}`, `{"s":"\ud800\udc00"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, obj []byte) { same(t, obj) })
}

// setTransform is object.set_transform's result, as the bridge writes it.
var setTransform = []byte(`{"location":[0.0,37.0,1.0],"rotation_euler":[0.0,0.0,0.0],"scale":[1.0,1.0,1.0],"name":"P00037"}`)

func BenchmarkFromJSON(b *testing.B) {
	for _, via := range []struct {
		name string
		f    func([]byte) ([]byte, error)
	}{{"transcode", FromJSON}, {"maps", viaMaps}} {
		b.Run(via.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if _, err := via.f(setTransform); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
