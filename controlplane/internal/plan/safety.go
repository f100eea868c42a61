package plan

import (
	"fmt"
	"strconv"
)

// SafetyLevel is how much an operation may change a scene. Levels are
// ordered: a level covers every lower one.
type SafetyLevel int

const (
	SafetyUnspecified SafetyLevel = 0
	SafetyReadOnly    SafetyLevel = 1
	SafetySafeWrite   SafetyLevel = 2
	SafetyDestructive SafetyLevel = 3
)

// String returns the seed's name for the level ("read_only", "safe_write",
// "destructive").
func (s SafetyLevel) String() string {
	switch s {
	case SafetyUnspecified:
		return "unspecified"
	case SafetyReadOnly:
		return "read_only"
	case SafetySafeWrite:
		return "safe_write"
	case SafetyDestructive:
		return "destructive"
	}
	return "SafetyLevel(" + strconv.Itoa(int(s)) + ")"
}

// Valid reports whether s is one of the three specified levels.
func (s SafetyLevel) Valid() bool {
	return s >= SafetyReadOnly && s <= SafetyDestructive
}

// ParseSafetyLevel parses the seed's names ("read_only", "safe_write",
// "destructive").
func ParseSafetyLevel(s string) (SafetyLevel, error) {
	switch s {
	case "read_only":
		return SafetyReadOnly, nil
	case "safe_write":
		return SafetySafeWrite, nil
	case "destructive":
		return SafetyDestructive, nil
	}
	return SafetyUnspecified, fmt.Errorf("plan: unknown safety level %q (want read_only, safe_write or destructive)", s)
}
