// Package wireid is the rule for the ids the API carries (session, request,
// operation and call ids): the protos' pattern, checked without a regular
// expression by both daemons' hand-written validation.
package wireid

// Pattern is the ids' pattern, as the protos' buf.validate rules state it.
const Pattern = `^[a-zA-Z0-9_.:-]{1,128}$`

// SessionPattern is agent.proto's rule for a session id, which names the
// session's directory on its agent: Pattern without a dot first ("." and
// ".." would name the directory of all sessions and the agent's own).
const SessionPattern = `^[a-zA-Z0-9_:-][a-zA-Z0-9_.:-]{0,127}$`

// MaxLength is the longest id Pattern allows, in characters (all of them
// ASCII, so also in bytes).
const MaxLength = 128

// Valid reports whether id matches Pattern: 1 to 128 characters, each an
// ASCII letter, digit, '_', '.', ':' or '-'.
func Valid(id string) bool {
	if len(id) == 0 || len(id) > MaxLength {
		return false
	}
	for k := 0; k < len(id); k++ {
		switch c := id[k]; {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9',
			c == '_', c == '.', c == ':', c == '-':
		default:
			return false
		}
	}
	return true
}

// ValidSession reports whether id matches SessionPattern.
func ValidSession(id string) bool { return Valid(id) && id[0] != '.' }
