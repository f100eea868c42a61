package plan

import (
	"fmt"
	"unicode/utf8"
)

// maxFileNameBytes is the longest file name Linux file systems take.
const maxFileNameBytes = 255

// FileNameProblem says why name is not a plain file name of a session's
// sandbox, or returns "" if it is one: not empty, not "." or "..", valid
// UTF-8 of at most 255 bytes, without "/", "\", NUL or other control
// characters (U+0000–U+001F, U+007F). These are the bridge's rules
// (agentd/internal/blender/bridge/sandbox.py, is_plain_name), so the
// control plane refuses such names before anything runs.
func FileNameProblem(name string) string {
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
		}
	}
	return ""
}
