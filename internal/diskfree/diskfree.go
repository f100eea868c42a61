// Package diskfree says how much disk is free to a daemon under a
// directory, for the floors both daemons keep for their databases and the
// disk agentd offers sessions.
package diskfree

import "syscall"

// MaxMiB is the most disk a setting may name, in MiB (2^40): its bytes fit
// an int64. Settings beyond it are refused, where they would wrap and turn
// their check off.
const MaxMiB = 1 << 40

// Bytes is the disk free to an unprivileged process under dir.
func Bytes(dir string) (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * st.Bsize, nil
}
