package plan

import (
	"fmt"
	"slices"
	"strings"
)

// graph is a plan's dependency graph in compressed form: the dependents of
// operation i are next[start[i]:start[i+1]], and indegree[i] counts i's
// depends_on entries. Each depends_on entry is one edge, so a repeated entry
// (refused earlier on the wire) is counted and released consistently, and a
// self-dependency is an edge from i to i that is never released.
type graph struct {
	start    []int
	next     []int
	indegree []int
	deps     [][]int // deps[i][j] is the index of ops[i].DependsOn[j]; all share one array
}

// buildGraph resolves every depends_on entry, or returns a
// DEPENDENCY_MISSING refusal. The repair inserts each missing id as a
// precondition (once, however many operations wait for it). An operation
// that depends on itself is not missing anything: its entry is an edge like
// any other, a cycle of length one that schedule reports as GRAPH_CYCLE.
func buildGraph(ops []Operation, index map[string]int) (*graph, error) {
	n := len(ops)
	g := &graph{start: make([]int, n+1), indegree: make([]int, n), deps: make([][]int, n)}
	total := 0
	for _, op := range ops {
		total += len(op.DependsOn)
	}
	all := make([]int, total)
	var e *Error
	var repaired map[string]bool // each missing id once
	edges := 0
	for i, op := range ops {
		d := all[:len(op.DependsOn):len(op.DependsOn)]
		all = all[len(op.DependsOn):]
		for j, id := range op.DependsOn {
			if k, ok := index[id]; ok {
				d[j] = k
				g.start[k+1]++
				g.indegree[i]++
				edges++
				continue
			}
			if e == nil {
				e = &Error{Reason: ReasonDependencyMissing}
				repaired = make(map[string]bool)
			}
			e.Violations = append(e.Violations, Violation{
				Field:       fmt.Sprintf("operations[%d].depends_on[%d]", i, j),
				Description: fmt.Sprintf("operation %q depends on %q, which is not in the plan", op.ID, id),
			})
			if !repaired[id] {
				repaired[id] = true
				e.Repair = append(e.Repair, RepairStep{OperationID: id, Action: ActionInsertPrecondition})
			}
		}
		g.deps[i] = d
	}
	if e != nil {
		e.Message = fmt.Sprintf("depends_on names no operation of the plan in %s; "+
			"add the missing operations or remove the entries", plural(len(e.Violations), "entry", "entries"))
		return nil, e
	}
	for i := 1; i <= n; i++ {
		g.start[i] += g.start[i-1]
	}
	g.next = make([]int, edges)
	fill := make([]int, n)
	copy(fill, g.start[:n])
	for i := range ops {
		for _, k := range g.deps[i] {
			g.next[fill[k]] = i
			fill[k]++
		}
	}
	return g, nil
}

// cycleError finds one concrete cycle among the operations Kahn's algorithm
// left (indegree > 0) and reports it. Every left operation waits for at
// least one left operation (possibly itself), so walking depends_on edges
// that stay among them must revisit a node: an operation that depends on
// itself closes a cycle of one as soon as it is its own smallest left
// dependency. The walk from the smallest left id, always taking the smallest
// left dependency, makes the cycle independent of input order. The cycle is
// then rotated to start at its smallest id.
func (g *graph) cycleError(ops []Operation, indegree []int, stuck int) *Error {
	start := -1
	for i, d := range indegree {
		if d > 0 && (start < 0 || ops[i].ID < ops[start].ID) {
			start = i
		}
	}
	pos := make(map[int]int) // node → position on the walk
	var walk, edge []int     // walk[p] depends on walk[p+1] through DependsOn[edge[p]]
	for cur := start; ; {
		if p, seen := pos[cur]; seen {
			walk, edge = walk[p:], edge[p:]
			break
		}
		pos[cur] = len(walk)
		walk = append(walk, cur)
		nextNode, nextEdge := -1, -1
		for j, k := range g.deps[cur] {
			if indegree[k] > 0 && (nextNode < 0 || ops[k].ID < ops[nextNode].ID) {
				nextNode, nextEdge = k, j
			}
		}
		edge = append(edge, nextEdge)
		cur = nextNode
	}
	// Rotate so the cycle starts at its smallest id.
	m := 0
	for p := range walk {
		if ops[walk[p]].ID < ops[walk[m]].ID {
			m = p
		}
	}
	walk = slices.Concat(walk[m:], walk[:m])
	edge = slices.Concat(edge[m:], edge[:m])

	path := cyclePath(ops, walk)
	e := &Error{Reason: ReasonGraphCycle}
	for p, i := range walk {
		dep := walk[(p+1)%len(walk)]
		e.Violations = append(e.Violations, Violation{
			Field: fmt.Sprintf("operations[%d].depends_on[%d]", i, edge[p]),
			Description: fmt.Sprintf("operation %q depends on %q on a cycle of %s",
				ops[i].ID, ops[dep].ID, plural(len(walk), "operation", "operations")),
		})
	}
	closing := walk[len(walk)-1]
	e.Repair = []RepairStep{{OperationID: ops[closing].ID, Action: ActionDrop}}
	e.Message = fmt.Sprintf("dependency cycle %s (each operation depends on the next); "+
		"%s can never run: remove one depends_on edge of the cycle", path, plural(stuck, "operation", "operations"))
	return e
}

// maxCyclePath bounds the operations a GRAPH_CYCLE message spells out.
const maxCyclePath = 32

// cyclePath renders a cycle as "a → b → c → a", eliding the middle of long
// cycles so that the message stays short.
func cyclePath(ops []Operation, walk []int) string {
	var b strings.Builder
	for p, i := range walk {
		if len(walk) > maxCyclePath && p == maxCyclePath/2 {
			fmt.Fprintf(&b, "… (%d more) … → ", len(walk)-maxCyclePath)
		}
		if len(walk) > maxCyclePath && p >= maxCyclePath/2 && p < len(walk)-maxCyclePath/2 {
			continue
		}
		b.WriteString(ops[i].ID)
		b.WriteString(" → ")
	}
	b.WriteString(ops[walk[0]].ID)
	return b.String()
}
