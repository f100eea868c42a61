package plan

import "container/heap"

// readyHeap holds the indices of ready operations, smallest operation_id on
// top.
type readyHeap struct {
	idx []int
	ops []Operation
}

func (h *readyHeap) Len() int           { return len(h.idx) }
func (h *readyHeap) Less(a, b int) bool { return h.ops[h.idx[a]].ID < h.ops[h.idx[b]].ID }
func (h *readyHeap) Swap(a, b int)      { h.idx[a], h.idx[b] = h.idx[b], h.idx[a] }
func (h *readyHeap) Push(x any)         { h.idx = append(h.idx, x.(int)) }
func (h *readyHeap) Pop() any {
	last := h.idx[len(h.idx)-1]
	h.idx = h.idx[:len(h.idx)-1]
	return last
}

// schedule runs Kahn's algorithm with a min-heap on operation_id, or returns
// a GRAPH_CYCLE refusal if some operations can never become ready.
func (g *graph) schedule(ops []Operation) ([]int, error) {
	n := len(ops)
	indegree := make([]int, n)
	copy(indegree, g.indegree)
	h := &readyHeap{ops: ops}
	for i, d := range indegree {
		if d == 0 {
			h.idx = append(h.idx, i)
		}
	}
	heap.Init(h)
	order := make([]int, 0, n)
	for h.Len() > 0 {
		i := heap.Pop(h).(int)
		order = append(order, i)
		for _, k := range g.next[g.start[i]:g.start[i+1]] {
			indegree[k]--
			if indegree[k] == 0 {
				heap.Push(h, k)
			}
		}
	}
	if len(order) == n {
		return order, nil
	}
	return nil, g.cycleError(ops, indegree, n-len(order))
}
