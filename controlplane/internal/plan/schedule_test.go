package plan

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"testing"
)

func TestScheduleOrder(t *testing.T) {
	tests := []struct {
		name string
		ops  []Operation
		want []string
	}{
		{
			name: "independent operations run in lexical order",
			ops:  []Operation{op("c"), op("a"), op("B"), op("b"), op("a.1"), op("a-1")},
			want: []string{"B", "a", "a-1", "a.1", "b", "c"}, // byte order: 'B' < 'a', '-' < '.'
		},
		{
			name: "diamond",
			ops:  []Operation{op("join", "right", "left"), op("right", "root"), op("left", "root"), op("root")},
			want: []string{"root", "left", "right", "join"},
		},
		{
			name: "a ready small id overtakes a larger one queued earlier",
			// Ready {a, z} → a; {b, z} → b; {z} → z; {y} → y: the
			// smallest ready id at every step, not a lexical sort.
			ops:  []Operation{op("z"), op("a"), op("b", "a"), op("y", "z")},
			want: []string{"a", "b", "z", "y"},
		},
		{
			name: "chain against lexical order",
			ops:  []Operation{op("a", "b"), op("b", "c"), op("c")},
			want: []string{"c", "b", "a"},
		},
	}
	reg := testRegistry(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			schedule, err := Check(tt.ops, reg)
			if err != nil {
				t.Fatal(err)
			}
			checkSchedule(t, tt.ops, schedule)
			if got := scheduleIDs(tt.ops, schedule); !slices.Equal(got, tt.want) {
				t.Fatalf("order = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestScheduleIndependentOfInputOrder shuffles random DAGs and expects the
// same order of operation ids every time.
func TestScheduleIndependentOfInputOrder(t *testing.T) {
	reg := testRegistry(t)
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 50 {
		n := 1 + rng.IntN(60)
		ids := make([]string, n)
		for i := range ids {
			ids[i] = string(rune('A'+rng.IntN(26))) + string(rune('a'+i%26)) + string(rune('0'+i/26))
		}
		ops := make([]Operation, n)
		for i := range ops {
			ops[i] = op(ids[i])
			// Edges only to earlier ids keep the graph acyclic.
			for j := range i {
				if rng.IntN(6) == 0 {
					ops[i].DependsOn = append(ops[i].DependsOn, ids[j])
				}
			}
		}
		schedule, err := Check(ops, reg)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		checkSchedule(t, ops, schedule)
		want := scheduleIDs(ops, schedule)
		for range 5 {
			shuffled := slices.Clone(ops)
			rng.Shuffle(len(shuffled), func(a, b int) { shuffled[a], shuffled[b] = shuffled[b], shuffled[a] })
			s, err := Check(shuffled, reg)
			if err != nil {
				t.Fatalf("round %d shuffled: %v", round, err)
			}
			if got := scheduleIDs(shuffled, s); !slices.Equal(got, want) {
				t.Fatalf("round %d: order %q after shuffling, want %q", round, got, want)
			}
		}
	}
}

// TestCycleReportIndependentOfInputOrder: the reported cycle is the same
// path whatever the input order.
func TestCycleReportIndependentOfInputOrder(t *testing.T) {
	ops := []Operation{op("d", "c"), op("c", "b", "e"), op("b", "a"), op("a", "d"), op("e", "c")}
	reg := testRegistry(t)
	var want string
	rng := rand.New(rand.NewPCG(3, 4))
	for range 20 {
		rng.Shuffle(len(ops), func(a, b int) { ops[a], ops[b] = ops[b], ops[a] })
		_, err := Check(ops, reg)
		pe := asPlanError(t, err)
		if pe.Reason != ReasonGraphCycle {
			t.Fatalf("got %s", pe.Reason)
		}
		if want == "" {
			want = pe.Message
		}
		if pe.Message != want {
			t.Fatalf("message %q, want %q", pe.Message, want)
		}
	}
	// From a, the smallest dependency on the cycle is always taken: a → d → c → b → a.
	if want != "dependency cycle a → d → c → b → a (each operation depends on the next); 5 operations can never run: remove one depends_on edge of the cycle" {
		t.Fatalf("message %q", want)
	}
}

func TestCheckChain100k(t *testing.T) {
	ops := chain(100_000)
	schedule, err := Check(ops, testRegistry(t))
	if err != nil {
		t.Fatal(err)
	}
	for p, i := range schedule {
		if i != p {
			t.Fatalf("schedule[%d] = %d", p, i)
		}
	}

	// The same chain closed into one big cycle is reported without recursion.
	ops[0].DependsOn = []string{ops[len(ops)-1].ID}
	_, err = Check(ops, testRegistry(t))
	pe := asPlanError(t, err)
	if pe.Reason != ReasonGraphCycle || len(pe.Violations) != len(ops) {
		t.Fatalf("got %s with %d violations", pe.Reason, len(pe.Violations))
	}
	// op-000000 → op-099999 → … → op-000001 → op-000000: op-000001 closes it.
	if want := []RepairStep{{"op-000001", ActionDrop}}; !slices.Equal(pe.Repair, want) {
		t.Fatalf("repair %v, want %v", pe.Repair, want)
	}
	if want := "dependency cycle op-000000 → op-099999 → "; !strings.HasPrefix(pe.Message, want) ||
		!strings.Contains(pe.Message, "… (99968 more) … → op-000016 → ") ||
		!strings.Contains(pe.Message, "op-000001 → op-000000 (") || len(pe.Message) > 1000 {
		t.Fatalf("message %q", pe.Message)
	}
}

func BenchmarkCheckChain100k(b *testing.B) {
	ops := chain(100_000)
	reg := testRegistry(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Check(ops, reg); err != nil {
			b.Fatal(err)
		}
	}
}

// TestCheckArgsSharesInOrder: a plan large enough to be checked in parallel
// shares is refused exactly as one checked in one piece: every bad
// operation, in plan order, one repair each.
func TestCheckArgsSharesInOrder(t *testing.T) {
	ops := chain(5*MinOperationShare + 7)
	bad := []int{0, MinOperationShare - 1, MinOperationShare, 3*MinOperationShare + 5, len(ops) - 1}
	for _, i := range bad {
		ops[i].Args = map[string]any{"name": 7.0}
	}
	pe := asPlanError(t, checkArgs(ops, testRegistry(t)))
	if pe.Reason != ReasonSchemaInvalid || len(pe.Repair) != len(bad) {
		t.Fatalf("refusal %v", pe)
	}
	for k, i := range bad {
		if pe.Repair[k].OperationID != ops[i].ID {
			t.Fatalf("repair %d: %v, want operation %d", k, pe.Repair[k], i)
		}
	}
	var at []int // the operation of each violation, in order
	for _, v := range pe.Violations {
		var i int
		if _, err := fmt.Sscanf(v.Field, "operations[%d]", &i); err != nil {
			t.Fatalf("field %q", v.Field)
		}
		if len(at) == 0 || at[len(at)-1] != i {
			at = append(at, i)
		}
	}
	if !slices.Equal(at, bad) {
		t.Fatalf("violations of operations %v, want %v", at, bad)
	}
	if want := fmt.Sprintf("in %d operations", len(bad)); !strings.Contains(pe.Message, want) {
		t.Fatalf("message %q", pe.Message)
	}
}

// TestCheckArgsWorkerPanicIsAnError: a panic in a worker of a parallel args
// check (a validator's bug; here a tool the check was promised to know, so
// it has no schema) is the check's error, not the daemon's end: no handler
// recovers the workers' goroutines.
func TestCheckArgsWorkerPanicIsAnError(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	ops := chain(2 * MinOperationShare)
	ops[len(ops)-1].Tool = "no.such.tool"
	err := checkArgs(ops, testRegistry(t))
	if err == nil || !strings.Contains(err.Error(), "checking a plan's args") {
		t.Fatalf("checkArgs: %v", err)
	}
}
