// Command blendctl is the Blendplane CLI: submit plans and watch their
// receipts, inspect plans and agents.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/blendplane/blendplane/cmd/internal/flagenv"
	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

const usage = `blendctl: the Blendplane CLI

Usage:
  blendctl [--addr HOST:PORT] [--token T | --token-file F] [--ca-file CA] [--json]
           [--max-message-bytes N] COMMAND [ARGS]     (these flags go before the command)

Commands:
  submit PLAN.json [--session ID] [--request-id ID] [--validate-only] [--atomic] [--preview-render] [--watch]
                      [--out DIR [--show]] [--keep-session] [--flag F]... [--selector KEY=VALUE]...
                      [--blender RANGE] [--budget-ms N] [--memory-mib N] [--disk-mib N]
                      submit a plan. Without --session it negotiates a session (the
                      flags from --flag on are its terms; not with --session), waits for
                      the plan to end and closes the session (--keep-session keeps it;
                      so does a file of the plan only its agent has, over the artifact
                      quota, without --out: it says so); a request_id from the file that is already taken is replaced by a fresh
                      one. --watch streams receipts with progress; --out saves the plan's
                      renders and exports into DIR, the last of each name (blendctl
                      download --sha256 takes an earlier one; --show draws PNGs)
  watch REQUEST_ID [--from N] [--owner NAME]
                      stream a plan's receipts from sequence N
  plan REQUEST_ID [--owner NAME]
                      show a plan and its state (--owner: an admin names another
                      principal's plan, with watch, cancel and audit too)
  plans --session ID  list a session's plans, newest first
  cancel REQUEST_ID   stop a plan (the running operation too); the session stays usable
  audit [REQUEST_ID] [--owner NAME]
                      list audit records (of one plan, or all), oldest first
  tools [--session ID | --runtime ID]
                      list the tool registry (of a session, a runtime, or the first runtime)
  macros              list the macros, with their example args
  negotiate [--flag F]... [--selector KEY=VALUE]... [--blender RANGE] [--budget-ms N] [--memory-mib N]
            [--disk-mib N]
                      open a session and print its contract (--selector: on an agent
                      carrying that label, e.g. gpu=true)
  sessions [--state open|parked|closed|all] [--all]
                      list sessions (default: those not closed)
  session ID          show a session
  close ID            close a session: cancel its plans, stop its Blender, remove its scene files
  upload FILE --session ID [--name NAME]
                      store a file in a session (scene.import reads it by NAME)
  download NAME --session ID [--sha256 H] [-o PATH]
                      save a session's artifact (a render, an export, an upload); -o is
                      a file or a directory (ending in /, it is made if missing)
  artifacts --session ID [--request-id ID]
                      list a session's artifacts (of one plan)
  agents              list the agents registered with the control plane (admin)
  token create --name N --scope S [--scope S]... [--ttl D]
                      make a token (admin); its secret is printed once
  token list          list the tokens, never their secrets (admin)
  token revoke NAME   revoke a token: its next call fails (admin)
  mcp [--flag F]...   serve MCP over stdio (for an MCP host's config): one Blendplane session,
                      negotiated on first use with the feature flags, closed when the host
                      disconnects; logs go to stderr
  prompt "TEXT" [--thread ID]
                      ask the planner runtime (a control plane started with --planner):
                      the model's plans run as yours, its text and the run's states print
                      as they come; a plan that waits for approval says how to decide it
  lesson keygen [--private F] [--public F]
                      make an Ed25519 key pair for signing lessons (PEM)
  lesson sign PACK.json [--key F] [--stamp=false]
                      print the lesson pack signed (metadata.issued_at set to now)
  approvals [--state pending|approved|rejected|cancelled|all] [--request-id ID]
                      list approvals (default: pending) with their previews: what each
                      plan would add, remove and change
  approve ID [--always]
                      run a waiting plan (approve scope); --always also allows the same
                      principal, tool and target from now on
  reject ID           fail a waiting plan without running any of it (approve scope)
  policy list         list the rules approve --always made (approve scope)
  policy delete RULE  remove one: such operations need approval again

Every call carries a bearer token: --token, or --token-file (a control
plane's first start writes <data-dir>/admin.token). A control plane that is
not on loopback is reached over TLS: --ca-file is its <data-dir>/ca.pem.
Environment: BLENDPLANE_<FLAG> sets a flag (BLENDPLANE_ADDR, BLENDPLANE_TOKEN,
BLENDPLANE_TOKEN_FILE, BLENDPLANE_CA_FILE).
Exit status: 0 done; 1 a call failed or a plan ended failed; 2 a command
line blendctl does not take (a flag, an argument, a missing --session).
`

type cli struct {
	conn grpc.ClientConnInterface
	cp   cpv1.ControlPlaneServiceClient
	json bool
	out  io.Writer
	// waits are the approvals a watch has said it waits for.
	waits map[string]bool
	// owner: the principal whose plan a command names (--owner, an admin's
	// reach; empty: the caller's own).
	owner string
}

func main() {
	err := run(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return // -h or --help: the usage is printed, as asked
	}
	if err != nil {
		if !errors.Is(err, errPlanFailed) {
			fmt.Fprintln(os.Stderr, "blendctl:", describeError(err))
		}
		if errors.As(err, new(usageError)) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// errPlanFailed: the plan ran and failed; its receipts already said why.
var errPlanFailed = errors.New("plan failed")

// usageError is a command line blendctl cannot take (exit status 2), not
// a call that failed (1): a script can tell its own mistake from the
// control plane's refusal.
type usageError struct{ error }

func (u usageError) Unwrap() error { return u.error }

func usageErr(err error) error {
	if err == nil {
		return nil
	}
	return usageError{err}
}

func run(args []string) error {
	fs := flag.NewFlagSet("blendctl", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(os.Stderr, usage) }
	addr := fs.String("addr", "127.0.0.1:7400", "control plane address")
	asJSON := fs.Bool("json", false, "print JSON (protojson) instead of text")
	maxMsg := fs.Int("max-message-bytes", 64<<20, "largest gRPC message sent or received")
	token := fs.String("token", "", "bearer token")
	tokenFile := fs.String("token-file", "", "file holding the bearer token")
	caFile := fs.String("ca-file", "", "the control plane's CA certificate, to reach it over TLS when it is not on loopback")
	if err := flagenv.Parse(fs, args); err != nil {
		return usageErr(err)
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return usageErr(errors.New("no command given"))
	}
	opts, err := dialOptions(*addr, *token, *tokenFile, *caFile)
	if err != nil {
		return err
	}
	conn, err := grpc.NewClient(*addr, append(opts,
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(*maxMsg), grpc.MaxCallSendMsgSize(*maxMsg)))...)
	if err != nil {
		return err
	}
	defer conn.Close()
	c := &cli{conn: conn, cp: cpv1.NewControlPlaneServiceClient(conn), json: *asJSON, out: os.Stdout}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cmd, rest := fs.Arg(0), fs.Args()[1:]
	if cmd == "help" {
		fs.Usage()
		return nil
	}
	command, ok := commands[cmd]
	if !ok {
		return usageErr(fmt.Errorf("unknown command %q (try: %s)", cmd, strings.Join(slices.Sorted(maps.Keys(commands)), ", ")))
	}
	err = command(c, ctx, rest)
	if name := undefinedFlag(err); name != "" && fs.Lookup(name) != nil {
		return fmt.Errorf("%w: --%s is blendctl's own flag; give it before the command (blendctl --%[2]s ... %s ...)", err, name, cmd)
	}
	return err
}

// undefinedFlag is the flag a command did not know, from its flag set's
// error ("flag provided but not defined: -json", maybe wrapped), or "".
func undefinedFlag(err error) string {
	_, after, ok := strings.Cut(fmt.Sprint(err), "flag provided but not defined: -")
	if !ok {
		return ""
	}
	name, _, _ := strings.Cut(after, " ")
	return name
}

// commands are blendctl's commands by name (see usage).
var commands = map[string]func(c *cli, ctx context.Context, args []string) error{
	"submit":    (*cli).submit,
	"approvals": (*cli).approvals,
	"mcp":       (*cli).mcp,
	"prompt":    (*cli).prompt,
	"lesson":    (*cli).lessonCmd,
	"approve":   resolve(cpv1.Decision_DECISION_APPROVE_ONCE),
	"reject":    resolve(cpv1.Decision_DECISION_REJECT),
	"policy":    (*cli).policy,
	"watch":     (*cli).watchCmd,
	"plan":      (*cli).plan,
	"plans":     (*cli).plans,
	"audit":     (*cli).audit,
	"cancel":    (*cli).cancel,
	"tools":     (*cli).tools,
	"macros":    noArgs("macros", (*cli).macros),
	"negotiate": (*cli).negotiateCmd,
	"agents":    noArgs("agents", (*cli).agents),
	"sessions":  (*cli).sessions,
	"session":   (*cli).session,
	"close":     (*cli).closeCmd,
	"upload":    (*cli).upload,
	"download":  (*cli).download,
	"artifacts": (*cli).artifacts,
	"token":     (*cli).token,
}

// rpcTimeout bounds unary calls; Negotiate may start a Blender.
const rpcTimeout = 2 * time.Minute

// sessionFlags are the negotiation options of submit and negotiate.
type sessionFlags struct {
	flags        flagenv.Strings
	selector     flagenv.Strings // KEY=VALUE labels the session's agent must carry
	blenderRange string
	budgetMs     int64
	memoryMiB    int64
	diskMiB      int64
	fs, own      *flag.FlagSet // the command's flags; the session flags alone
}

func (sf *sessionFlags) register(fs *flag.FlagSet) {
	own := flag.NewFlagSet("", flag.ContinueOnError)
	own.Var(&sf.flags, "flag", "feature flag to negotiate, e.g. unsafe_ops or progress_events (repeatable)")
	own.Var(&sf.selector, "selector", "KEY=VALUE: a label the session's agent must carry, e.g. gpu=true (repeatable)")
	own.StringVar(&sf.blenderRange, "blender", "", `Blender version range, e.g. ">=4.2" or "<4"`)
	own.Int64Var(&sf.budgetMs, "budget-ms", 0, "time budget of one tool call in ms (0: the default)")
	own.Int64Var(&sf.memoryMiB, "memory-mib", 0, "memory the session's Blender may use, in MiB (0: all the agent has)")
	own.Int64Var(&sf.diskMiB, "disk-mib", 0, "disk the session's files (uploads, renders, exports) may take, in MiB (0: all the agent offers)")
	own.VisitAll(func(f *flag.Flag) { fs.Var(f.Value, f.Name, f.Usage) })
	sf.fs, sf.own = fs, own
}

// set names the session flags given on the command line ("" when none):
// they apply only to a session blendctl negotiates.
func (sf *sessionFlags) set() string {
	var names []string
	sf.fs.Visit(func(f *flag.Flag) {
		if sf.own.Lookup(f.Name) != nil {
			names = append(names, "--"+f.Name)
		}
	})
	return strings.Join(names, ", ")
}

func (c *cli) negotiate(ctx context.Context, sf sessionFlags) (*cpv1.SessionContract, error) {
	selector := map[string]string{}
	for _, kv := range sf.selector {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, usageErr(fmt.Errorf("--selector %q: want KEY=VALUE", kv))
		}
		selector[k] = v
	}
	ctx, cancel := context.WithTimeout(ctx, rpcTimeout)
	defer cancel()
	resp, err := c.cp.Negotiate(ctx, &cpv1.NegotiateRequest{
		ContractVersion:     "1.0.0",
		HostProfile:         &cpv1.HostProfile{ClientName: "blendctl", ClientVersion: "0.1.0", FeatureFlags: sf.flags},
		BlenderVersionRange: sf.blenderRange,
		Constraints:         &cpv1.Constraints{ToolTimeBudgetMs: sf.budgetMs, MaxMemoryMib: sf.memoryMiB, TempStorageMib: sf.diskMiB},
		AgentSelector:       selector,
	})
	if err != nil {
		return nil, fmt.Errorf("negotiate: %w", err)
	}
	return resp.GetContract(), nil
}

func (c *cli) negotiateCmd(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("negotiate", flag.ContinueOnError)
	var sf sessionFlags
	sf.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	contract, err := c.negotiate(ctx, sf)
	if err != nil {
		return err
	}
	if c.json {
		return c.printJSON(contract)
	}
	printContract(c.out, contract)
	return nil
}

func (c *cli) agents(ctx context.Context) error {
	list, err := allPages(ctx, func(ctx context.Context, token string) ([]*cpv1.Agent, string, error) {
		resp, err := c.cp.ListAgents(ctx, &cpv1.ListAgentsRequest{PageSize: 500, PageToken: token})
		return resp.GetAgents(), resp.GetNextPageToken(), err
	})
	if err != nil {
		return err
	}
	return printList(c, list, printAgents)
}

func (c *cli) audit(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("audit", flag.ContinueOnError)
	fs.StringVar(&c.owner, "owner", "", ownerHelp)
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return usageErr(err)
		}
		if fs.NArg() == 0 {
			break
		}
		pos, args = append(pos, fs.Arg(0)), fs.Args()[1:]
	}
	if len(pos) > 1 {
		return usageErr(errors.New("usage: blendctl audit [REQUEST_ID] [--owner NAME]"))
	}
	requestID := ""
	if len(pos) == 1 {
		requestID = pos[0]
	}
	records, err := allPages(ctx, func(ctx context.Context, token string) ([]*cpv1.AuditRecord, string, error) {
		resp, err := c.cp.ListAuditRecords(ctx, &cpv1.ListAuditRecordsRequest{RequestId: requestID, Owner: c.owner, PageSize: 500, PageToken: token})
		return resp.GetAuditRecords(), resp.GetNextPageToken(), err
	})
	if err != nil {
		return err
	}
	if len(records) == 0 && requestID != "" {
		// None for a plan that does not exist (a typo'd id) is an error,
		// not an empty list: say so as plan does.
		if _, err := c.cp.GetPlan(ctx, &cpv1.GetPlanRequest{RequestId: requestID, Owner: c.owner}); err != nil {
			return err
		}
	}
	if c.json {
		return printJSONList(c, records)
	}
	if len(records) == 0 {
		fmt.Fprintln(c.out, "no audit records")
	}
	for i, r := range records {
		printAudit(c.out, r, i == 0)
	}
	return nil
}

func (c *cli) cancel(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("cancel", flag.ContinueOnError)
	fs.StringVar(&c.owner, "owner", "", ownerHelp)
	id, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	return show(ctx, c, func(ctx context.Context) (*cpv1.Plan, error) {
		resp, err := c.cp.CancelPlan(ctx, &cpv1.CancelPlanRequest{RequestId: id, Owner: c.owner})
		return resp.GetPlan(), err
	}, printPlan)
}

func (c *cli) tools(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("tools", flag.ContinueOnError)
	session := fs.String("session", "", "list the registry of this session")
	runtime := fs.String("runtime", "", "list the registry of this runtime")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	return show(ctx, c, func(ctx context.Context) (*cpv1.ListToolsResponse, error) {
		return c.cp.ListTools(ctx, &cpv1.ListToolsRequest{SessionId: *session, RuntimeId: *runtime})
	}, printTools)
}

func (c *cli) macros(ctx context.Context) error {
	return show(ctx, c, func(ctx context.Context) (*cpv1.ListMacrosResponse, error) {
		return c.cp.ListMacros(ctx, &cpv1.ListMacrosRequest{})
	}, printMacros)
}

// ownerHelp is the help of --owner, which plan, watch, cancel and audit take.
const ownerHelp = "the principal whose plan it is (admin; default: your own)"

func (c *cli) plan(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("plan", flag.ContinueOnError)
	fs.StringVar(&c.owner, "owner", "", ownerHelp)
	id, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	return show(ctx, c, func(ctx context.Context) (*cpv1.Plan, error) {
		resp, err := c.cp.GetPlan(ctx, &cpv1.GetPlanRequest{RequestId: id, Owner: c.owner})
		return resp.GetPlan(), err
	}, printPlan)
}

// show makes one unary call under the CLI's deadline and prints the answer
// as JSON (--json) or as text.
func show[M proto.Message](ctx context.Context, c *cli, call func(context.Context) (M, error), text func(io.Writer, M)) error {
	ctx, cancel := context.WithTimeout(ctx, rpcTimeout)
	defer cancel()
	resp, err := call(ctx)
	if err != nil {
		return err
	}
	if c.json {
		return c.printJSON(resp)
	}
	text(c.out, resp)
	return nil
}

// parseFlags parses a command line of flags only: a stray argument is a
// usage error too (exit status 2), not ignored.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return usageErr(err)
	}
	if fs.NArg() > 0 {
		return usageErr(fmt.Errorf("%s: unexpected argument %q (it takes flags only)", fs.Name(), fs.Arg(0)))
	}
	return nil
}

// noArgs is a command of no arguments, refusing any.
func noArgs(name string, run func(c *cli, ctx context.Context) error) func(c *cli, ctx context.Context, args []string) error {
	return func(c *cli, ctx context.Context, args []string) error {
		if len(args) > 0 {
			return usageErr(fmt.Errorf("%s: unexpected argument %q (it takes none)", name, args[0]))
		}
		return run(c, ctx)
	}
}

// parseInterspersed parses flags placed before or after the one positional
// argument, as people type them.
func parseInterspersed(fs *flag.FlagSet, args []string) (string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return "", usageErr(err)
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if len(pos) != 1 {
		return "", usageErr(fmt.Errorf("%s: want exactly one argument, got %d", fs.Name(), len(pos)))
	}
	return pos[0], nil
}
