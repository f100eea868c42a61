package structwire

import (
	"encoding/json"
	"math"
	"math/rand"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// viaStruct is what Map replaces: proto.Unmarshal into a Struct, then AsMap.
func viaStruct(b []byte) (map[string]any, error) {
	var s structpb.Struct
	if err := proto.Unmarshal(b, &s); err != nil {
		return nil, err
	}
	return s.AsMap(), nil
}

// agrees fails when Map decodes b (ok) to anything but what proto.Unmarshal
// and AsMap give.
func agrees(t *testing.T, b []byte) bool {
	t.Helper()
	got, ok := Map(b)
	if !ok {
		return false
	}
	want, err := viaStruct(b)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("Map(%x) = %#v, want %#v (%v)", b, got, want, err)
	}
	return true
}

// TestMapAgrees: random Structs, as encoders write them (deterministic or
// not), decode the fast way to what proto.Unmarshal and AsMap give; with
// bytes corrupted, Map either agrees or leaves the decoding to proto.
func TestMapAgrees(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	fast, corrupt, fellBack := 0, 0, 0
	for i := 0; i < 3000; i++ {
		var b strings.Builder
		randObject(rng, &b, 0)
		var m map[string]any
		if err := json.Unmarshal([]byte(b.String()), &m); err != nil {
			t.Fatal(err)
		}
		s, err := structpb.NewStruct(m)
		if err != nil {
			continue // invalid UTF-8: no Struct to encode
		}
		wire, err := proto.MarshalOptions{Deterministic: i%2 == 0}.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if !agrees(t, wire) {
			t.Fatalf("%s: encoded as encoders do, yet left to proto", b.String())
		}
		fast++
		for j := 0; j < 4 && len(wire) > 0; j++ {
			bad := append([]byte(nil), wire...)
			switch rng.Intn(3) {
			case 0:
				bad[rng.Intn(len(bad))] ^= byte(1 << rng.Intn(8))
			case 1:
				bad = bad[:rng.Intn(len(bad))]
			default:
				k := rng.Intn(len(bad))
				bad = append(bad[:k:k], append([]byte{byte(rng.Intn(256))}, bad[k:]...)...)
			}
			corrupt++
			if !agrees(t, bad) {
				fellBack++
			}
		}
	}
	if fellBack == 0 || fellBack == corrupt {
		t.Fatalf("%d of %d corrupted Structs left to proto: the corruptions test nothing", fellBack, corrupt)
	}
	t.Logf("%d Structs decoded the fast way; %d of %d corrupted ones left to proto", fast, fellBack, corrupt)
}

// TestMapLeavesToProto: what encoders do not write goes the slow way.
func TestMapLeavesToProto(t *testing.T) {
	entry := func(key string, value []byte) []byte {
		e := protowire.AppendTag(nil, entryKey, protowire.BytesType)
		e = protowire.AppendString(e, key)
		e = protowire.AppendTag(e, entryValue, protowire.BytesType)
		e = protowire.AppendBytes(e, value)
		return protowire.AppendBytes(protowire.AppendTag(nil, structFields, protowire.BytesType), e)
	}
	str := func(s string) []byte {
		return protowire.AppendString(protowire.AppendTag(nil, valueString, protowire.BytesType), s)
	}
	twoKinds := append(str("a"), protowire.AppendVarint(protowire.AppendTag(nil, valueBool, protowire.VarintType), 1)...)
	nested := str("x")
	for range maxMapDepth {
		nested = protowire.AppendBytes(protowire.AppendTag(nil, valueStruct, protowire.BytesType), entry("k", nested))
	}
	num := func(f float64) []byte {
		return protowire.AppendFixed64(protowire.AppendTag(nil, valueNumber, protowire.Fixed64Type), math.Float64bits(f))
	}
	for name, b := range map[string][]byte{
		"NaN (AsMap: \"NaN\")":        entry("k", num(math.NaN())),
		"+Inf (AsMap: \"Infinity\")":  entry("k", num(math.Inf(1))),
		"-Inf (AsMap: \"-Infinity\")": entry("k", num(math.Inf(-1))),
		"a value of two kinds":        entry("k", twoKinds),
		"a value of no kind":          entry("k", nil),
		"a key not UTF-8":             entry("\xff", str("x")),
		"a string not UTF-8":          entry("k", str("\xff")),
		"a true that is 2":            entry("k", protowire.AppendVarint(protowire.AppendTag(nil, valueBool, protowire.VarintType), 2)),
		"an unknown field":            protowire.AppendVarint(protowire.AppendTag(nil, 9, protowire.VarintType), 1),
		"nested beyond maxMapDepth":   entry("k", nested),
		"an entry without its value":  protowire.AppendBytes(protowire.AppendTag(nil, structFields, protowire.BytesType), protowire.AppendString(protowire.AppendTag(nil, entryKey, protowire.BytesType), "k")),
	} {
		if _, ok := Map(b); ok {
			t.Errorf("%s: decoded the fast way", name)
		}
	}
	// At the limit still decodes, as proto does.
	atLimit := str("x")
	for range maxMapDepth - 1 {
		atLimit = protowire.AppendBytes(protowire.AppendTag(nil, valueStruct, protowire.BytesType), entry("k", atLimit))
	}
	if !agrees(t, entry("k", atLimit)) {
		t.Errorf("args %d deep left to proto", maxMapDepth)
	}
}

func BenchmarkMap(b *testing.B) {
	s, _ := structpb.NewStruct(map[string]any{"type": "cube", "name": "C0_001", "location": []any{3.0, 6.0, 0.0}})
	wire, _ := proto.Marshal(s)
	b.Run("Map", func(b *testing.B) {
		for b.Loop() {
			Map(wire)
		}
	})
	b.Run("Unmarshal+AsMap", func(b *testing.B) {
		for b.Loop() {
			viaStruct(wire)
		}
	})
}
