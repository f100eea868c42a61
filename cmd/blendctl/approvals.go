package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

// approvals lists approvals (pending ones by default) with their previews.
func (c *cli) approvals(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("approvals", flag.ContinueOnError)
	state := fs.String("state", "pending", "pending, approved, rejected, cancelled or all")
	requestID := fs.String("request-id", "", "only the approval of this plan")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	st := cpv1.Approval_STATE_UNSPECIFIED
	if *state != "all" {
		v, ok := cpv1.Approval_State_value["STATE_"+strings.ToUpper(*state)]
		if !ok || v == 0 {
			return usageErr(fmt.Errorf("--state %q: want pending, approved, rejected, cancelled or all", *state))
		}
		st = cpv1.Approval_State(v)
	}
	list, err := allPages(ctx, func(ctx context.Context, token string) ([]*cpv1.Approval, string, error) {
		resp, err := c.cp.ListApprovals(ctx, &cpv1.ListApprovalsRequest{PageSize: 100, PageToken: token, State: st, RequestId: *requestID})
		return resp.GetApprovals(), resp.GetNextPageToken(), err
	})
	if err != nil {
		return err
	}
	return printList(c, list, printApprovals)
}

// resolve approves or rejects an approval.
func resolve(decision cpv1.Decision) func(c *cli, ctx context.Context, args []string) error {
	return func(c *cli, ctx context.Context, args []string) error {
		fs := flag.NewFlagSet("approve", flag.ContinueOnError)
		always := fs.Bool("always", false, "also allow the same principal, tool and target from now on")
		id, err := parseInterspersed(fs, args) // approve ID --always, as the usage shows it
		if err != nil {
			return fmt.Errorf("%w (usage: blendctl approve APPROVAL_ID [--always], blendctl reject APPROVAL_ID)", err)
		}
		d := decision
		if *always {
			if d == cpv1.Decision_DECISION_REJECT {
				return usageErr(errors.New("--always is for approve"))
			}
			d = cpv1.Decision_DECISION_APPROVE_AND_ALWAYS_ALLOW
		}
		return show(ctx, c, func(ctx context.Context) (*cpv1.ResolveApprovalResponse, error) {
			return c.cp.ResolveApproval(ctx, &cpv1.ResolveApprovalRequest{ApprovalId: id, Decision: d})
		}, func(out io.Writer, r *cpv1.ResolveApprovalResponse) {
			printApprovals(out, []*cpv1.Approval{r.GetApproval()})
			if len(r.GetRules()) > 0 {
				printRules(out, r.GetRules())
			}
		})
	}
}

// policy lists or deletes the rules persisted by approve --always.
func (c *cli) policy(ctx context.Context, args []string) error {
	switch {
	case len(args) == 1 && args[0] == "list":
		list, err := allPages(ctx, func(ctx context.Context, token string) ([]*cpv1.PolicyRule, string, error) {
			resp, err := c.cp.ListPolicyRules(ctx, &cpv1.ListPolicyRulesRequest{PageSize: 500, PageToken: token})
			return resp.GetRules(), resp.GetNextPageToken(), err
		})
		if err != nil {
			return err
		}
		return printList(c, list, printRules)
	case len(args) == 2 && args[0] == "delete":
		return show(ctx, c, func(ctx context.Context) (*cpv1.PolicyRule, error) {
			resp, err := c.cp.DeletePolicyRule(ctx, &cpv1.DeletePolicyRuleRequest{RuleId: args[1]})
			return resp.GetRule(), err
		}, func(out io.Writer, r *cpv1.PolicyRule) {
			fmt.Fprintf(out, "deleted rule %s: such operations need approval again\n", r.GetRuleId())
			printRules(out, []*cpv1.PolicyRule{r})
		})
	}
	return usageErr(errors.New("usage: blendctl policy list | blendctl policy delete RULE_ID"))
}

func printRules(out io.Writer, list []*cpv1.PolicyRule) {
	fmt.Fprintf(out, "%-10s %-16s %-20s %-32s %-16s %s\n", "RULE", "PRINCIPAL", "TOOL", "TARGET", "BY", "APPROVAL")
	for _, r := range list {
		fmt.Fprintf(out, "%-10s %-16s %-20s %-32s %-16s %s\n", r.GetRuleId(), r.GetPrincipal(), r.GetToolName(),
			r.GetTarget(), r.GetCreatedBy(), r.GetApprovalId())
	}
}

// printApprovals shows each approval with why it is needed and its preview.
func printApprovals(out io.Writer, list []*cpv1.Approval) {
	if len(list) == 0 {
		fmt.Fprintln(out, "no approvals")
	}
	for i, a := range list {
		if i > 0 {
			fmt.Fprintln(out)
		}
		fmt.Fprintf(out, "%s  %s  plan %s (session %s) by %s at %s\n", a.GetApprovalId(), lower(a.GetState().String()),
			a.GetRequestId(), a.GetSessionId(), a.GetRequestedBy(), a.GetCreateTime().AsTime().Local().Format(time.DateTime))
		if a.GetResolvedBy() != "" {
			how := lower(strings.TrimPrefix(a.GetDecision().String(), "DECISION_"))
			if a.GetDecision() == cpv1.Decision_DECISION_UNSPECIFIED { // no one decided: cancelled with its plan
				how = lower(a.GetState().String())
			}
			fmt.Fprintf(out, "  %s by %s at %s\n", how, a.GetResolvedBy(), a.GetResolveTime().AsTime().Local().Format(time.DateTime))
		}
		for _, d := range a.GetDecisions() {
			fmt.Fprintf(out, "  needs approval: %s %s (%s): %s\n", d.GetOperationId(), d.GetToolName(), d.GetTarget(), d.GetReason())
		}
		printPreview(out, a.GetPreview())
	}
}

func printPreview(out io.Writer, p *cpv1.Preview) {
	switch p.GetState() {
	case cpv1.Preview_STATE_PENDING:
		fmt.Fprintln(out, "  preview: not yet (computed when the plan comes to its turn, after the plans before it)")
		return
	case cpv1.Preview_STATE_FAILED:
		if p.GetFailedOperationId() != "" {
			fmt.Fprintf(out, "  preview: operation %s would fail: %s: %s\n", p.GetFailedOperationId(),
				p.GetFailure().GetErrorCode(), p.GetFailure().GetMessage())
		} else {
			fmt.Fprintf(out, "  preview: none: %s\n", p.GetFailure().GetMessage())
		}
	}
	if p.GetSceneHashBefore() != "" {
		fmt.Fprintf(out, "  preview: scene %s -> %s, %d changes\n", short(p.GetSceneHashBefore()), short(p.GetSceneHashAfter()), len(p.GetChanges()))
	}
	sign := map[cpv1.DatablockChange_Kind]string{cpv1.DatablockChange_KIND_ADDED: "+", cpv1.DatablockChange_KIND_REMOVED: "-", cpv1.DatablockChange_KIND_CHANGED: "~"}
	for _, ch := range p.GetChanges() {
		fmt.Fprintf(out, "    %s %s/%s\n", sign[ch.GetKind()], ch.GetCollection(), ch.GetName())
		for _, f := range ch.GetFields() {
			fmt.Fprintf(out, "        %s: %s -> %s\n", f.GetField(), value(f.GetBefore().AsInterface()), value(f.GetAfter().AsInterface()))
		}
	}
	if r := p.GetRender(); r != nil {
		fmt.Fprintf(out, "  preview render: %s (blendctl download %s --session %s --sha256 %s)\n", r.GetName(), r.GetName(), r.GetSessionId(), r.GetSha256())
	}
}

// value prints a field value as compact JSON.
func value(v any) string {
	if v == nil {
		return "-"
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

func lower(enum string) string { return strings.ToLower(strings.TrimPrefix(enum, "STATE_")) }
