package blender

import (
	"encoding/json"
	"strconv"
)

// decodeExecute decodes a line the bridge wrote in answer to an execute
// request exactly as json.Unmarshal into a response[executeResult] does.
//
// A success as the bridge writes it (keys id, ok and result; the result's
// keys those of executeResult; each as spelt in the struct tags)
// is read in one pass that takes the result and undo records as spans of
// line (valid JSON, checked as they are passed): Outcome keeps the line
// alive through them, so line must not be reused. Any other line — a
// progress report, a failure, anything odd — goes to json.Unmarshal, which
// also says what is wrong with a bad one. json.Unmarshal scans a line twice
// (its validity, then a reflective decode that copies both records): 8.5 µs
// of agentd's CPU for a create's answer of 424 bytes (7.6–9.0 µs in
// BenchmarkDecodeExecute), a sixth of its CPU per operation of a durable
// batch (BenchmarkExecuteDurable's profile); this pass takes 1.0–1.8 µs.
func decodeExecute(line []byte) (response[executeResult], error) {
	if r, ok := fastExecute(line); ok {
		return r, nil
	}
	var r response[executeResult]
	err := json.Unmarshal(line, &r)
	return r, err
}

// maxSpanDepth bounds the nesting fastExecute follows inside the records
// (json.Unmarshal's own bound, 10,000, is far above what the bridge
// writes); deeper goes to json.Unmarshal.
const maxSpanDepth = 256

// fastExecute is decodeExecute's one pass; false: line is not one it takes.
// A key given twice is read twice, the last value staying, as in
// json.Unmarshal; keys spelt otherwise than in the tags (json.Unmarshal
// matches them case-insensitively) are not taken.
func fastExecute(line []byte) (response[executeResult], bool) {
	var r response[executeResult]
	res := &r.Result
	s := scanner{b: line}
	ok := s.object(func(key []byte) bool {
		var ok bool
		switch string(key) {
		case "id":
			var id uint64
			id, ok = s.uint()
			r.ID = &id
		case "ok":
			r.OK, ok = s.boolean()
		case "result":
			ok = s.object(func(key []byte) bool {
				var ok bool
				switch string(key) {
				case "result":
					res.Result, ok = s.span()
				case "undo":
					res.Undo, ok = s.span()
				case "files":
					// Only calls that write files have any: decoded apart.
					var span json.RawMessage
					span, ok = s.span()
					switch {
					case !ok:
					case string(span) == "[]":
						res.Files = []File{} // as encoding/json makes of []
					case string(span) == "null":
						res.Files = nil
					default:
						files := res.Files // a key given twice decodes into the first's, as in json.Unmarshal
						ok = json.Unmarshal(span, &files) == nil
						res.Files = files
					}
				case "scene_hash_before":
					res.SceneHashBefore, ok = s.plain()
				case "scene_hash_after":
					res.SceneHashAfter, ok = s.plain()
				case "mutated":
					res.Mutated, ok = s.boolean()
				case "records_changed":
					res.RecordsChanged, ok = s.int()
				}
				return ok
			})
		}
		return ok
	})
	s.space()
	return r, ok && s.i == len(s.b)
}

// scanner reads JSON for fastExecute; every method returns false on
// anything it does not take, and it then falls back. Whatever it takes,
// encoding/json takes the same way: its checks are encoding/json's or
// stricter.
type scanner struct {
	b []byte
	i int
}

func (s *scanner) space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// next skips space and reports whether the next byte is c, taking it.
func (s *scanner) next(c byte) bool {
	s.space()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// object reads an object whose keys are plain strings, handing each key to
// member with s at its value, which member must read.
func (s *scanner) object(member func(key []byte) bool) bool {
	return s.items('{', '}', func() bool {
		key, ok := s.plainBytes()
		if !ok || !s.next(':') {
			return false
		}
		s.space()
		return member(key)
	})
}

// items reads open, then items separated by commas, then close; item reads
// one, starting at its first byte.
func (s *scanner) items(open, close byte, item func() bool) bool {
	if !s.next(open) {
		return false
	}
	if s.next(close) {
		return true
	}
	for {
		s.space()
		if !item() {
			return false
		}
		if s.next(close) {
			return true
		}
		if !s.next(',') {
			return false
		}
	}
}

// plainBytes reads a string of printable ASCII without escapes, which
// decodes to its own bytes.
func (s *scanner) plainBytes() ([]byte, bool) {
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return nil, false
	}
	for j := s.i + 1; j < len(s.b); j++ {
		switch c := s.b[j]; {
		case c == '"':
			str := s.b[s.i+1 : j]
			s.i = j + 1
			return str, true
		case c == '\\' || c < ' ' || c > '~':
			return nil, false
		}
	}
	return nil, false
}

func (s *scanner) plain() (string, bool) {
	b, ok := s.plainBytes()
	return string(b), ok
}

func (s *scanner) boolean() (bool, bool) {
	switch {
	case s.literal("true"):
		return true, true
	case s.literal("false"):
		return false, true
	}
	return false, false
}

func (s *scanner) literal(l string) bool {
	if len(s.b)-s.i >= len(l) && string(s.b[s.i:s.i+len(l)]) == l {
		s.i += len(l)
		return true
	}
	return false
}

// uint reads a JSON integer without a sign that fits a uint64.
func (s *scanner) uint() (uint64, bool) {
	start := s.i
	if !s.number() {
		return 0, false
	}
	n, err := strconv.ParseUint(string(s.b[start:s.i]), 10, 64)
	return n, err == nil
}

// int reads a JSON integer that fits an int.
func (s *scanner) int() (int, bool) {
	start := s.i
	if !s.number() {
		return 0, false
	}
	n, err := strconv.ParseInt(string(s.b[start:s.i]), 10, strconv.IntSize)
	return int(n), err == nil
}

// span reads any JSON value and returns its bytes.
func (s *scanner) span() (json.RawMessage, bool) {
	start := s.i
	if !s.value(0) {
		return nil, false
	}
	return s.b[start:s.i:s.i], true
}

// value skips a JSON value, checking it as encoding/json's scanner does.
func (s *scanner) value(depth int) bool {
	if s.i >= len(s.b) || depth > maxSpanDepth {
		return false
	}
	switch c := s.b[s.i]; {
	case c == '{':
		return s.items('{', '}', func() bool {
			if !s.str() || !s.next(':') {
				return false
			}
			s.space()
			return s.value(depth + 1)
		})
	case c == '[':
		return s.items('[', ']', func() bool { return s.value(depth + 1) })
	case c == '"':
		return s.str()
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	default:
		return s.number()
	}
}

// str skips a string: no control characters, only JSON's escapes; other
// bytes, valid UTF-8 or not, as encoding/json's scanner takes them.
func (s *scanner) str() bool {
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return false
	}
	for s.i++; s.i < len(s.b); s.i++ {
		switch c := s.b[s.i]; {
		case c == '"':
			s.i++
			return true
		case c < ' ':
			return false
		case c == '\\':
			s.i++
			if s.i >= len(s.b) {
				return false
			}
			switch s.b[s.i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if len(s.b)-s.i <= 4 {
					return false
				}
				for _, h := range s.b[s.i+1 : s.i+5] {
					if !isHex(h) {
						return false
					}
				}
				s.i += 4
			default:
				return false
			}
		}
	}
	return false
}

func isHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }

// number skips a number as JSON's grammar has it.
func (s *scanner) number() bool {
	if s.i < len(s.b) && s.b[s.i] == '-' {
		s.i++
	}
	switch {
	case s.i < len(s.b) && s.b[s.i] == '0':
		s.i++
	case s.digits() == 0:
		return false
	}
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		if s.digits() == 0 {
			return false
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		if s.digits() == 0 {
			return false
		}
	}
	return true
}

func (s *scanner) digits() int {
	start := s.i
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		s.i++
	}
	return s.i - start
}
