// Package filename holds the rules for the names of a session's sandbox
// files, which the control plane checks before anything runs and agentd
// again (the bridge's agentd/internal/blender/bridge/sandbox.py,
// is_plain_name, is the third copy, in Python).
package filename

import (
	"fmt"
	"unicode/utf8"
)

// maxFileNameBytes is the longest file name Linux file systems take.
const maxFileNameBytes = 255

// Problem says why name is not a plain file name of a session's
// sandbox, or returns "" if it is one: not empty, not "." or "..", valid
// UTF-8 of at most 255 bytes, without "/", "\", NUL or other control
// characters (U+0000–U+001F, U+007F), nor bidirectional controls
// (isBidiControl). These are the bridge's rules
// (agentd/internal/blender/bridge/sandbox.py, is_plain_name), so the
// control plane refuses such names before anything runs, and agentd too.
func Problem(name string) string {
	switch {
	case name == "":
		return "the name is empty"
	case name == "." || name == "..":
		return fmt.Sprintf("%q names a directory", name)
	case !utf8.ValidString(name):
		return "the name is not valid UTF-8"
	case len(name) > maxFileNameBytes:
		return fmt.Sprintf("the name is %d bytes, at most %d", len(name), maxFileNameBytes)
	}
	for _, r := range name {
		switch {
		case r == '/' || r == '\\':
			return "the name contains a path separator: give a plain file name"
		case r < 0x20 || r == 0x7f:
			return fmt.Sprintf("the name contains the control character %U", r)
		case IsBidiControl(r):
			return fmt.Sprintf("the name contains the bidirectional control %U, which makes a listed name read as another", r)
		}
	}
	return ""
}

// IsBidiControl tells the characters that reorder the text around them
// (U+061C, U+200E, U+200F, U+202A–U+202E, U+2066–U+2069): in a listed file
// name they make it read as another ("evil\u202egnp.exe" shows as
// "evilexe.png"). The bridge's sandbox.BIDI_CONTROLS.
func IsBidiControl(r rune) bool {
	return r == 0x061c || r == 0x200e || r == 0x200f || (r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069)
}
