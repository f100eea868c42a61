package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"

	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

func (c *cli) sessions(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("sessions", flag.ContinueOnError)
	state := fs.String("state", "", "open, parked, closed or all (default: all but closed)")
	every := fs.Bool("all", false, "every principal's sessions (admin)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	states := []cpv1.Session_State{cpv1.Session_STATE_UNSPECIFIED}
	switch s := strings.ToLower(*state); s {
	case "":
	case "all":
		states = append(states, cpv1.Session_STATE_CLOSED)
	default:
		v, ok := cpv1.Session_State_value["STATE_"+strings.ToUpper(s)]
		if !ok || v == 0 {
			return usageErr(fmt.Errorf("--state %q: want open, parked, closed or all", *state))
		}
		states = []cpv1.Session_State{cpv1.Session_State(v)}
	}
	var all []*cpv1.Session
	for _, st := range states {
		list, err := allPages(ctx, func(ctx context.Context, token string) ([]*cpv1.Session, string, error) {
			resp, err := c.cp.ListSessions(ctx, &cpv1.ListSessionsRequest{PageSize: 500, PageToken: token, State: st, AllPrincipals: *every})
			return resp.GetSessions(), resp.GetNextPageToken(), err
		})
		if err != nil {
			return err
		}
		all = append(all, list...)
	}
	return printList(c, all, printSessions)
}

func (c *cli) session(ctx context.Context, args []string) error {
	if len(args) != 1 {
		return usageErr(errors.New("usage: blendctl session ID"))
	}
	return show(ctx, c, func(ctx context.Context) (*cpv1.Session, error) {
		resp, err := c.cp.GetSession(ctx, &cpv1.GetSessionRequest{SessionId: args[0]})
		return resp.GetSession(), err
	}, printSession)
}

func (c *cli) closeCmd(ctx context.Context, args []string) error {
	if len(args) != 1 {
		return usageErr(errors.New("usage: blendctl close SESSION_ID"))
	}
	return show(ctx, c, func(ctx context.Context) (*cpv1.Session, error) {
		resp, err := c.cp.CloseSession(ctx, &cpv1.CloseSessionRequest{SessionId: args[0]})
		return resp.GetSession(), err
	}, printSession)
}

// plans lists a session's plans, newest first.
func (c *cli) plans(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("plans", flag.ContinueOnError)
	session := fs.String("session", "", "session whose plans to list (required)")
	if err := fs.Parse(args); err != nil {
		return usageErr(err)
	}
	if *session == "" || fs.NArg() != 0 {
		return usageErr(errors.New("usage: blendctl plans --session ID"))
	}
	list, err := allPages(ctx, func(ctx context.Context, token string) ([]*cpv1.Plan, string, error) {
		resp, err := c.cp.ListPlans(ctx, &cpv1.ListPlansRequest{SessionId: *session, PageSize: 1000, PageToken: token})
		return resp.GetPlans(), resp.GetNextPageToken(), err
	})
	if err != nil {
		return err
	}
	return printList(c, list, printPlans)
}
