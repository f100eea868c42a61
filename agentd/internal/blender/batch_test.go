package blender

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

func cubeCalls(names ...string) []Call {
	calls := make([]Call, len(names))
	for i, n := range names {
		calls[i] = Call{Tool: "object.create", Args: map[string]any{"type": "cube", "name": n}}
	}
	return calls
}

func runBatch(t *testing.T, p *Process, calls []Call) []BatchResult {
	t.Helper()
	var got []BatchResult
	n := p.ExecuteBatch(callCtx(t), calls, func(i int, r BatchResult) bool {
		if i != len(got) {
			t.Fatalf("result %d out of order (want %d)", i, len(got))
		}
		got = append(got, r)
		return true
	})
	if n != len(got) {
		t.Fatalf("ExecuteBatch returned %d, each saw %d", n, len(got))
	}
	return got
}

// TestExecuteBatch: pipelined calls give the same results, hashes and undo
// records as the same calls one by one, in order, with progress.
func TestExecuteBatch(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		names := make([]string, 3*batchWindow)
		for i := range names {
			names[i] = fmt.Sprintf("B%03d", i)
		}
		seq := startTestProcess(t, rt)
		var want []Outcome
		for _, c := range cubeCalls(names...) {
			out, err := seq.Execute(callCtx(t), c)
			if err != nil {
				t.Fatal(err)
			}
			want = append(want, out)
		}

		p := startTestProcess(t, rt)
		calls := cubeCalls(names...)
		var progress []map[string]any
		calls[5].injectProgress = 2
		calls[5].OnProgress = func(m map[string]any) { progress = append(progress, m) }
		got := runBatch(t, p, calls)
		if len(got) != len(names) {
			t.Fatalf("%d results, want %d", len(got), len(names))
		}
		for i, r := range got {
			if r.Err != nil {
				t.Fatalf("call %d: %v", i, r.Err)
			}
			if !reflect.DeepEqual(r.Outcome, want[i]) {
				t.Errorf("call %d: batch %+v, sequential %+v", i, r.Outcome, want[i])
			}
			if r.Start.IsZero() || r.Duration <= 0 {
				t.Errorf("call %d: start %v duration %v", i, r.Start, r.Duration)
			}
		}
		if len(progress) != 2 {
			t.Errorf("progress = %v", progress)
		}
		assertIncrementalMatchesFull(t, p)
		mustExecute(t, p, "object.create", map[string]any{"type": "cube", "name": "After"})
	})
}

// TestExecuteBatchFailureStops: after a failed call no later call of the
// batch runs, whether the failure is a refusal or a rollback of partial
// work, and the process stays usable.
func TestExecuteBatchFailureStops(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		p := startTestProcess(t, rt)
		for _, tc := range []struct {
			name, pre string
			bad       Call
			code      string
		}{
			{"refused", "F", Call{Tool: "object.delete", Args: map[string]any{"name": "Nope"}}, CodeNotFound},
			{"rolled back", "R", Call{Tool: "object.create", Args: map[string]any{"type": "cube", "name": "Half"},
				injectFailure: "object.create:linked"}, CodeInternalError},
		} {
			t.Run(tc.name, func(t *testing.T) {
				pre := tc.pre
				calls := cubeCalls(pre+"A", pre+"B")
				calls = append(calls, tc.bad)
				calls = append(calls, cubeCalls(pre+"C", pre+"D")...)
				got := runBatch(t, p, calls)
				if len(got) != 3 {
					t.Fatalf("%d results, want 3", len(got))
				}
				var te *ToolError
				if !errors.As(got[2].Err, &te) || te.Code != tc.code {
					t.Fatalf("failed call: %v, want %s", got[2].Err, tc.code)
				}
				after := got[1].Outcome.SceneHashAfter
				if got[2].Outcome.SceneHashBefore != after || got[2].Outcome.SceneHashAfter != after {
					t.Errorf("failed call reports %s/%s, want %s", got[2].Outcome.SceneHashBefore, got[2].Outcome.SceneHashAfter, after)
				}
				h, err := p.SceneHash(callCtx(t))
				if err != nil || h != after {
					t.Fatalf("scene hash %s, %v; want %s (later calls must not run)", h, err, after)
				}
				s := assertIncrementalMatchesFull(t, p)
				objs := s.State["objects"].(map[string]any)
				for _, n := range []string{pre + "C", pre + "D", "Half"} {
					if objs[n] != nil {
						t.Errorf("%s exists after the batch failed before it", n)
					}
				}
				// The next batch runs normally (the failure marker is per batch).
				if got := runBatch(t, p, cubeCalls(pre+"C", pre+"D")); len(got) != 2 || got[1].Err != nil {
					t.Fatalf("next batch: %+v", got)
				}
			})
		}
	})
}

// TestExecuteBatchStops: a caller that stops early with calls in flight, a
// call over its budget and a cancelled context all leave Blender killed.
func TestExecuteBatchStops(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		t.Run("caller stops", func(t *testing.T) {
			p := startTestProcess(t, rt)
			n := p.ExecuteBatch(callCtx(t), cubeCalls("S1", "S2", "S3", "S4"), func(i int, r BatchResult) bool {
				return i < 1
			})
			if n != 2 {
				t.Fatalf("each saw %d results, want 2", n)
			}
			if _, err := p.SceneHash(callCtx(t)); !errors.Is(err, ErrProcessExited) {
				t.Fatalf("after an early stop: %v, want ErrProcessExited", err)
			}
		})
		t.Run("caller stops at the end", func(t *testing.T) {
			p := startTestProcess(t, rt)
			p.ExecuteBatch(callCtx(t), cubeCalls("E1", "E2"), func(i int, r BatchResult) bool { return i == 0 })
			if _, err := p.SceneHash(callCtx(t)); err != nil {
				t.Fatalf("stopping after the last call must keep the process: %v", err)
			}
		})
		t.Run("budget", func(t *testing.T) {
			p := startTestProcess(t, rt)
			calls := cubeCalls("T1")
			calls = append(calls, Call{Tool: "python.exec", Args: map[string]any{"code": "import time\ntime.sleep(5)"}, Budget: 300 * time.Millisecond})
			calls = append(calls, cubeCalls("T2")...)
			start := time.Now()
			got := runBatch(t, p, calls)
			if len(got) != 2 || got[0].Err != nil || !got[1].TimedOut || !errors.Is(got[1].Err, context.DeadlineExceeded) {
				t.Fatalf("results %+v", got)
			}
			if el := time.Since(start); el > 4*time.Second {
				t.Errorf("budget of 300ms took %v", el)
			}
			if _, err := p.SceneHash(callCtx(t)); !errors.Is(err, ErrProcessExited) {
				t.Fatalf("after a timeout: %v, want ErrProcessExited", err)
			}
		})
		t.Run("result Go cannot decode", func(t *testing.T) {
			// A number beyond float64 in python.exec's result fails that
			// call, as Execute does; Blender is not killed for it.
			p := startTestProcess(t, rt)
			calls := cubeCalls("R1")
			calls = append(calls, Call{Tool: "python.exec", Args: map[string]any{"code": "result = 10**400"}})
			got := runBatch(t, p, calls)
			if len(got) != 2 || got[0].Err != nil || got[1].Err == nil || errors.Is(got[1].Err, ErrProcessExited) ||
				!strings.Contains(got[1].Err.Error(), "decode result") {
				t.Fatalf("results %+v", got)
			}
			if _, err := p.SceneHash(callCtx(t)); err != nil {
				t.Fatalf("after a result Go could not decode: %v, want Blender still running", err)
			}
		})
		t.Run("cancel", func(t *testing.T) {
			p := startTestProcess(t, rt)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			calls := []Call{{Tool: "python.exec", Args: map[string]any{"code": "import time\ntime.sleep(5)"},
				OnProgress: nil}}
			calls = append(calls, cubeCalls("X1")...)
			time.AfterFunc(200*time.Millisecond, cancel)
			var got []BatchResult
			p.ExecuteBatch(ctx, calls, func(i int, r BatchResult) bool { got = append(got, r); return true })
			if len(got) != 1 || !errors.Is(got[0].Err, context.Canceled) {
				t.Fatalf("results %+v", got)
			}
			if _, err := p.SceneHash(callCtx(t)); !errors.Is(err, ErrProcessExited) {
				t.Fatalf("after a cancel: %v, want ErrProcessExited", err)
			}
		})
	})
}
