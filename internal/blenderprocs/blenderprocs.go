// Package blenderprocs finds the Blender processes of an agentd data dir (or
// of one session) in /proc, as tests count them: what agentd runs, seen
// from outside.
package blenderprocs

import (
	"os"
	"path/filepath"
	"strings"
)

// Under lists the pids of the processes whose command line names dir and
// the bridge: the Blenders of one agentd data dir (their bridge package is
// written under it, in cache/ or their work dir). A process one of them forked (Blender runs helpers
// such as xdg-user-dir, and a fork has its parent's command line until it
// execs) is not another Blender; a zombie is already dead.
func Under(dir string) []string {
	entries, _ := os.ReadDir("/proc")
	parent := map[string]string{}
	var found []string
	for _, e := range entries {
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !strings.Contains(string(cmdline), dir) || !strings.Contains(string(cmdline), "bridge") {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue // gone
		}
		// stat: pid (comm) state ppid ...
		fields := strings.Fields(string(stat[strings.LastIndex(string(stat), ")")+1:]))
		if len(fields) < 2 || fields[0] == "Z" {
			continue
		}
		parent[e.Name()] = fields[1]
		found = append(found, e.Name())
	}
	var pids []string
	for _, pid := range found {
		if _, forked := parent[parent[pid]]; !forked {
			pids = append(pids, pid)
		}
	}
	return pids
}

// OfSession lists the Blender of one session, by the pid agentd keeps in
// the session's directory (sessions/<id>/blender.pid), if it runs: a
// Blender's command line names the bridge agentd shares between its
// Blenders (cache/), not the session's directory.
func OfSession(sessionDir string) []string {
	raw, err := os.ReadFile(filepath.Join(sessionDir, "blender.pid"))
	if err != nil {
		return nil
	}
	pid := strings.TrimSpace(string(raw))
	cmdline, err := os.ReadFile(filepath.Join("/proc", pid, "cmdline"))
	if err != nil || !strings.Contains(string(cmdline), "bridge") {
		return nil // gone (or its pid taken by another process)
	}
	stat, err := os.ReadFile(filepath.Join("/proc", pid, "stat"))
	if err != nil {
		return nil
	}
	if fields := strings.Fields(string(stat[strings.LastIndex(string(stat), ")")+1:])); len(fields) < 1 || fields[0] == "Z" {
		return nil
	}
	return []string{pid}
}
