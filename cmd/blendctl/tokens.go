package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/blendplane/blendplane/cmd/internal/flagenv"
	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

func (c *cli) token(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return usageErr(errors.New("usage: blendctl token create|list|revoke ..."))
	}
	switch args[0] {
	case "create":
		fs := flag.NewFlagSet("token create", flag.ContinueOnError)
		name := fs.String("name", "", "the principal's name (required)")
		ttl := fs.Duration("ttl", 0, "how long the token works (default: until revoked)")
		var scopes flagenv.Strings
		fs.Var(&scopes, "scope", "plans, unsafe, approve, admin or agent (repeatable, at least one)")
		if err := fs.Parse(args[1:]); err != nil {
			return usageErr(err)
		}
		req := &cpv1.CreateTokenRequest{Name: *name, Scopes: scopes}
		if *ttl > 0 {
			req.Ttl = durationpb.New(*ttl)
		}
		ctx, cancel := context.WithTimeout(ctx, rpcTimeout)
		defer cancel()
		resp, err := c.cp.CreateToken(ctx, req)
		if err != nil {
			return err
		}
		if c.json {
			return c.printJSON(resp)
		}
		// The secret alone on stdout, so that `> file` makes a token file.
		fmt.Fprintln(c.out, resp.GetSecret())
		return nil
	case "list":
		list, err := allPages(ctx, func(ctx context.Context, token string) ([]*cpv1.Token, string, error) {
			resp, err := c.cp.ListTokens(ctx, &cpv1.ListTokensRequest{PageSize: 500, PageToken: token})
			return resp.GetTokens(), resp.GetNextPageToken(), err
		})
		if err != nil {
			return err
		}
		return printList(c, list, printTokens)
	case "revoke":
		if len(args) != 2 {
			return usageErr(errors.New("usage: blendctl token revoke NAME"))
		}
		return show(ctx, c, func(ctx context.Context) (*cpv1.Token, error) {
			resp, err := c.cp.RevokeToken(ctx, &cpv1.RevokeTokenRequest{Name: args[1]})
			return resp.GetToken(), err
		}, func(out io.Writer, t *cpv1.Token) { printTokens(out, []*cpv1.Token{t}) })
	}
	return usageErr(fmt.Errorf("unknown token command %q (try: create, list, revoke)", args[0]))
}

func printTokens(out io.Writer, list []*cpv1.Token) {
	fmt.Fprintf(out, "%-24s %-28s %-20s %-20s %s\n", "NAME", "SCOPES", "CREATED", "EXPIRES", "STATE")
	for _, t := range list {
		expires, state := "never", "active"
		if t.GetExpireTime() != nil {
			expires = t.GetExpireTime().AsTime().Local().Format(time.DateTime)
			if time.Now().After(t.GetExpireTime().AsTime()) {
				state = "expired"
			}
		}
		if t.GetRevokeTime() != nil {
			state = "revoked " + t.GetRevokeTime().AsTime().Local().Format(time.DateTime)
		}
		fmt.Fprintf(out, "%-24s %-28s %-20s %-20s %s\n", t.GetName(), strings.Join(t.GetScopes(), ","),
			t.GetCreateTime().AsTime().Local().Format(time.DateTime), expires, state)
	}
}
