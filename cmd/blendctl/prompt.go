package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	plannerv1 "github.com/blendplane/blendplane/gen/blendplane/planner/v1"
)

// prompt runs a prompt through the planner runtime, printing its events as
// they come: the model's text, the run's states, then the run.
func (c *cli) prompt(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("prompt", flag.ContinueOnError)
	thread := fs.String("thread", "", "continue this thread (default: a new one)")
	text, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if text == "" {
		return usageErr(errors.New(`usage: blendctl prompt "TEXT" [--thread ID]`))
	}
	stream, err := plannerv1.NewPlannerServiceClient(c.conn).StreamRun(ctx, &plannerv1.StreamRunRequest{Prompt: text, ThreadId: *thread})
	if err != nil {
		return err
	}
	inText := false // a delta line is open
	for {
		ev, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if c.json {
			if err := c.printJSON(ev); err != nil {
				return err
			}
		}
		switch e := ev.GetEvent().(type) {
		case *plannerv1.StreamRunResponse_Delta:
			if !c.json {
				fmt.Fprint(c.out, e.Delta)
				inText = true
			}
		case *plannerv1.StreamRunResponse_Status:
			if !c.json {
				if inText {
					fmt.Fprintln(c.out)
					inText = false
				}
				fmt.Fprintf(c.out, "[%s] run %s, thread %s\n", runState(e.Status.GetState()), e.Status.GetRunId(), e.Status.GetThreadId())
			}
		case *plannerv1.StreamRunResponse_Result:
			if !c.json {
				if inText {
					fmt.Fprintln(c.out)
				}
				printRun(c.out, e.Result)
			}
			if e.Result.GetState() == plannerv1.Run_STATE_FAILED {
				return errPlanFailed
			}
			return nil
		}
	}
}

func printRun(w io.Writer, run *plannerv1.Run) {
	fmt.Fprintf(w, "run %s: %s after %d model turns (%s)\n", run.GetRunId(), runState(run.GetState()), run.GetTurns(), run.GetModel())
	for _, a := range run.GetActions() {
		fmt.Fprintf(w, "  %s %-16s %-22s plan %s", a.GetActionId(), a.GetTool(), runState(a.GetState()), a.GetRequestId())
		if a.GetErrorCode() != "" {
			fmt.Fprintf(w, "  %s: %s", a.GetErrorCode(), a.GetErrorMessage())
		}
		fmt.Fprintln(w)
		if a.GetState() == plannerv1.Action_STATE_AWAITING_CONFIRMATION {
			fmt.Fprintf(w, "     waits for approval %s: blendctl approvals --request-id %s, then blendctl approve|reject %s (the run resumes)\n",
				a.GetApprovalId(), a.GetRequestId(), a.GetApprovalId())
		}
	}
	if e := run.GetError(); e != nil {
		fmt.Fprintf(w, "error (%s): %s\n", strings.TrimPrefix(e.GetType().String(), "TYPE_"), e.GetMessage())
	}
	if s := run.GetSummary(); s != "" {
		fmt.Fprintln(w, s)
	}
}

// runState is a run's or action's state as seed 002 spells it.
func runState(s fmt.Stringer) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "STATE_"))
}
