package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

func (c *cli) submit(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("submit", flag.ContinueOnError)
	session := fs.String("session", "", "session to run in (default: negotiate one, closed when the plan ends)")
	requestID := fs.String("request-id", "", "override the plan file's request_id")
	validateOnly := fs.Bool("validate-only", false, "validate and schedule only; run nothing")
	atomic := fs.Bool("atomic", false, "roll back the whole plan if an operation fails or it is cancelled")
	previewRender := fs.Bool("preview-render", false, "if the plan needs approval, render the previewed scene for the approver")
	watch := fs.Bool("watch", false, "stream receipts with progress until the plan ends")
	out := fs.String("out", "", "save the plan's renders and exports into this directory when it ends")
	keep := fs.Bool("keep-session", false, "keep the negotiated session open after the plan ends")
	show := fs.Bool("show", false, "with --out: draw the saved PNG renders in the terminal")
	var sf sessionFlags
	sf.register(fs)
	path, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	req, err := readPlan(path)
	if err != nil {
		return err
	}
	renamable := *requestID == "" // an id from the file may be replaced if taken
	if *requestID != "" {
		req.RequestId = *requestID
	}
	req.ValidateOnly, req.Atomic, req.PreviewRender = *validateOnly, *atomic, *previewRender
	req.SessionId = *session
	if given := sf.set(); req.SessionId != "" && given != "" {
		return usageErr(fmt.Errorf("%s: only for a session blendctl negotiates; --session names one negotiated already", given))
	}
	if req.SessionId == "" {
		if *watch && !slices.Contains(sf.flags, "progress_events") {
			sf.flags = append(sf.flags, "progress_events") // what --watch shows besides receipts
		}
		contract, err := c.negotiate(ctx, sf)
		if err != nil {
			return err
		}
		req.SessionId = contract.GetSessionId()
		if !c.json {
			fmt.Fprintf(c.out, "session %s on agent %s (Blender %s, %s)\n", contract.GetSessionId(), contract.GetAgentId(),
				contract.GetBlenderProfile().GetVersion(), contract.GetBlenderProfile().GetRuntime())
		}
		if !*keep {
			defer func() {
				if !*keep {
					c.closeSession(req.SessionId)
				}
			}()
		}
	}
	p, err := c.submitPlan(ctx, req, renamable)
	if err != nil {
		return fmt.Errorf("submit %s: %w", path, err)
	}
	if c.json && !*watch {
		if err := c.printJSON(p); err != nil {
			return err
		}
	} else if !c.json {
		fmt.Fprintf(c.out, "plan %s %s: %s, schedule %s\n", p.GetRequestId(), stateName(p.GetState()),
			plural(len(p.GetSchedule()), "operation"), abbreviate(p.GetSchedule(), 8))
	}
	if p.GetState() == cpv1.Plan_STATE_VALIDATED {
		return nil
	}
	// The plan runs in a session this command owns (which it closes), or
	// its files are wanted: wait for its end.
	if !*watch && (*session != "" || *keep) && *out == "" {
		return nil
	}
	var end error
	if *watch {
		end = c.watch(ctx, p.GetRequestId(), 1, len(p.GetSchedule()))
	} else {
		end = c.wait(ctx, p.GetRequestId())
	}
	ended := end == nil || errors.Is(end, errPlanFailed)
	if ended && *out == "" && *session == "" && !*keep {
		*keep = c.keepForLeftFiles(ctx, req.GetSessionId(), p.GetRequestId())
	}
	if *out != "" && ended {
		saved, err := c.saveArtifacts(ctx, req.GetSessionId(), p.GetRequestId(), *out)
		if err != nil {
			return err
		}
		for _, path := range saved {
			if !*show || !strings.HasSuffix(path, ".png") {
				continue
			}
			if !isTerminal(c.out) {
				fmt.Fprintf(c.out, "(--show draws %s only on a terminal)\n", path)
				continue
			}
			if err := preview(c.out, path); err != nil {
				fmt.Fprintln(os.Stderr, "blendctl:", err)
			}
		}
	}
	return end
}

// keepForLeftFiles says whether the session a plan ran in must stay open
// for files only its agent has (the control plane did not keep them), which
// would go with it, and if so how to take them.
func (c *cli) keepForLeftFiles(ctx context.Context, session, requestID string) bool {
	list, err := c.listArtifacts(ctx, session, requestID)
	if err != nil {
		fmt.Fprintf(os.Stderr, "blendctl: listing the plan's files: %s\n", describeError(err))
		return false
	}
	var left []string
	for _, a := range list {
		if a.GetLeftOnAgent() && !slices.Contains(left, a.GetName()) {
			left = append(left, a.GetName())
		}
	}
	if len(left) == 0 {
		return false
	}
	fmt.Fprintf(os.Stderr, "blendctl: session %s stays open: only its agent has %s (the control plane did not keep %s: "+
		"over the artifact quota, or the agent did not answer), and closing the session would lose %s. "+
		"Download with blendctl download NAME --session %s, then close it with blendctl close %s\n",
		session, strings.Join(left, ", "), pronoun(len(left)), pronoun(len(left)), session, session)
	return true
}

func pronoun(n int) string {
	if n == 1 {
		return "it"
	}
	return "them"
}

// submitPlan submits a plan; if its request_id is taken by another plan and
// may be replaced, it is submitted again under a fresh one, saying so.
func (c *cli) submitPlan(ctx context.Context, req *cpv1.SubmitPlanRequest, renamable bool) (*cpv1.Plan, error) {
	for attempt := 0; ; attempt++ {
		sctx, cancel := context.WithTimeout(ctx, rpcTimeout)
		resp, err := c.cp.SubmitPlan(sctx, req)
		cancel()
		if err == nil {
			return resp.GetPlan(), nil
		}
		if !renamable || attempt > 2 || reason(err) != "IDEMPOTENCY_CONFLICT" {
			return nil, err
		}
		fresh := freshID(req.GetRequestId())
		fmt.Fprintf(os.Stderr, "blendctl: request_id %s is already taken by another plan; submitting as %s\n", req.GetRequestId(), fresh)
		req.RequestId = fresh
	}
}

// freshID derives a new request id from a taken one: base-<6 hex digits>,
// within the 128 characters a request id may have.
func freshID(id string) string {
	var b [3]byte
	rand.Read(b[:])
	suffix := "-" + hex.EncodeToString(b[:])
	if len(id)+len(suffix) > 128 {
		id = id[:128-len(suffix)]
	}
	return id + suffix
}

// reason is the ErrorInfo reason of a gRPC error, or "".
func reason(err error) string {
	st, _ := status.FromError(err)
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info.GetReason()
		}
	}
	return ""
}

// closeSession closes a session this command negotiated, even after an
// interrupt: closing cancels what still runs in it.
func (c *cli) closeSession(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
	defer cancel()
	if _, err := c.cp.CloseSession(ctx, &cpv1.CloseSessionRequest{SessionId: id}); err != nil {
		fmt.Fprintf(os.Stderr, "blendctl: closing session %s: %s\n", id, describeError(err))
		return
	}
	if !c.json {
		fmt.Fprintf(c.out, "session %s closed\n", id)
	}
}

func (c *cli) watchCmd(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("watch", flag.ContinueOnError)
	from := fs.Int64("from", 1, "first receipt sequence to show")
	fs.StringVar(&c.owner, "owner", "", ownerHelp)
	id, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	gctx, cancel := context.WithTimeout(ctx, rpcTimeout)
	defer cancel()
	resp, err := c.cp.GetPlan(gctx, &cpv1.GetPlanRequest{RequestId: id, Owner: c.owner})
	if err != nil {
		return err
	}
	return c.watch(ctx, id, *from, len(resp.GetPlan().GetSchedule()))
}

// watch streams receipts from a cursor; if the stream breaks it resumes from
// the last receipt seen, so nothing is shown twice or skipped.
func (c *cli) watch(ctx context.Context, requestID string, from int64, total int) error {
	progress := newProgress(c.out, total, c.json)
	return c.follow(ctx, requestID, from, func(resp *cpv1.StreamReceiptsResponse) error {
		if r := resp.GetReceipt(); r != nil {
			if c.json {
				return c.printJSON(r)
			}
			progress.receipt(r)
		} else if pg := resp.GetProgress(); pg != nil && !c.json {
			progress.step(pg)
		}
		return nil
	}, progress.done)
}

// wait follows a plan to its end without showing its receipts.
func (c *cli) wait(ctx context.Context, requestID string) error {
	progress := newProgress(c.out, 0, c.json)
	return c.follow(ctx, requestID, 1, func(*cpv1.StreamReceiptsResponse) error { return nil }, progress.done)
}

// follow reads a plan's receipt stream from a cursor to its end, resuming
// after a broken stream, then reports the plan as it ended.
func (c *cli) follow(ctx context.Context, requestID string, from int64, each func(*cpv1.StreamReceiptsResponse) error, done func(*cpv1.Plan)) error {
	cursor := from
	var down time.Time // since when the control plane has not answered; zero while it does
	for {
		stream, err := c.cp.StreamReceipts(ctx, &cpv1.StreamReceiptsRequest{RequestId: requestID, StartSequence: cursor, Owner: c.owner})
		for err == nil {
			var resp *cpv1.StreamReceiptsResponse
			if resp, err = stream.Recv(); errors.Is(err, io.EOF) {
				// The plan ended, or the control plane is stopping (its
				// streams end cleanly then): its state says which.
				var p *cpv1.Plan
				if p, err = c.planState(ctx, requestID); err == nil && terminal(p.GetState()) {
					return c.finish(p, done)
				}
				if err == nil {
					err = status.Error(codes.Unavailable, "the stream ended before the plan did")
				}
				break
			} else if err != nil {
				break
			}
			if !down.IsZero() {
				fmt.Fprintf(os.Stderr, "blendctl: the control plane answers again; resumed at receipt %d\n", cursor)
				down = time.Time{}
			}
			if r := resp.GetReceipt(); r != nil {
				cursor = r.GetSequence() + 1
			}
			if ap := resp.GetAwaitingApproval(); ap != nil {
				err = c.showWait(ap)
			} else {
				err = each(resp)
			}
			if err != nil {
				return err
			}
		}
		// A control plane restarting (or out of reach) ends the stream, or
		// refuses to open it, for as long as it is down: the plan goes on
		// without it, so the stream is opened again until it answers.
		if ctx.Err() != nil || !transient(err) {
			return err
		}
		if down.IsZero() {
			down = time.Now()
			fmt.Fprintf(os.Stderr, "blendctl: stream interrupted (%v); resuming at receipt %d once the control plane answers\n", describeError(err), cursor)
		} else if time.Since(down) > followOutage {
			return fmt.Errorf("the control plane has not answered for %s (the plan may still run: blendctl watch %s): %w", followOutage, requestID, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// followOutage is how long follow waits for a control plane that does not
// answer: a restart takes seconds.
const followOutage = 5 * time.Minute

// transient says whether a stream's error is its connection's (worth
// opening it again), not the control plane's answer.
func transient(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.Internal, codes.Unknown, codes.Aborted:
		return true
	}
	return false
}

// showWait says that a plan waits for approval, and what it would do
// (again when its preview lands); the stream goes on once it is resolved.
func (c *cli) showWait(ap *cpv1.Approval) error {
	if c.json {
		return c.printJSON(ap)
	}
	if !c.waits[ap.GetApprovalId()] {
		if c.waits == nil {
			c.waits = map[string]bool{}
		}
		c.waits[ap.GetApprovalId()] = true
		fmt.Fprintf(c.out, "waiting for approval %s (blendctl approve %s, or reject):\n", ap.GetApprovalId(), ap.GetApprovalId())
		for _, d := range ap.GetDecisions() {
			fmt.Fprintf(c.out, "  %s %s: %s\n", d.GetOperationId(), d.GetToolName(), d.GetReason())
		}
	}
	printPreview(c.out, ap.GetPreview())
	return nil
}

func (c *cli) planState(ctx context.Context, requestID string) (*cpv1.Plan, error) {
	ctx, cancel := context.WithTimeout(ctx, rpcTimeout)
	defer cancel()
	resp, err := c.cp.GetPlan(ctx, &cpv1.GetPlanRequest{RequestId: requestID, Owner: c.owner})
	return resp.GetPlan(), err
}

func terminal(st cpv1.Plan_State) bool {
	return st == cpv1.Plan_STATE_SUCCEEDED || st == cpv1.Plan_STATE_FAILED || st == cpv1.Plan_STATE_CANCELLED || st == cpv1.Plan_STATE_VALIDATED
}

func (c *cli) finish(p *cpv1.Plan, done func(*cpv1.Plan)) error {
	if !c.json {
		done(p)
	}
	if p.GetState() == cpv1.Plan_STATE_FAILED || p.GetState() == cpv1.Plan_STATE_CANCELLED {
		return errPlanFailed
	}
	return nil
}
