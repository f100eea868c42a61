package e2e

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/chromedp"

	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

// browser is a tab of a headless Debian chromium driven over the DevTools
// protocol; it records every script error, console error and CSP violation
// of its pages, which fail the test.
type browser struct {
	ctx    context.Context
	mu     sync.Mutex
	errors []string
	shots  string
}

func startBrowser(t *testing.T) *browser {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatal("no chromium: `make browser` installs Debian's (make test does)")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox,
		chromedp.WindowSize(1360, 900), chromedp.Flag("lang", "en-US"))
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	return newTab(t, alloc)
}

// newTab opens a tab (the first one starts the browser); each tab has its
// own sessionStorage, so it signs in on its own.
func newTab(t *testing.T, parent context.Context) *browser {
	t.Helper()
	ctx, cancel := chromedp.NewContext(parent)
	b := &browser{ctx: ctx, shots: os.Getenv("BLENDPLANE_CONSOLE_SCREENSHOTS")}
	done := make(chan struct{})
	messages := chromedp.Console(ctx) // starts the tab (and the browser)
	go func() {
		defer close(done)
		for m, err := range messages {
			if err != nil {
				return
			}
			// A refused request (the 401 of a wrong token) is the page's
			// business; anything else at error level (a CSP violation, a
			// script that failed to load or threw) is a defect.
			if (m.Type == chromedp.ConsoleError || m.IsException()) && m.Source != "network" {
				b.mu.Lock()
				b.errors = append(b.errors, m.String()+" "+m.URL)
				b.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		b.mu.Lock()
		defer b.mu.Unlock()
		for _, e := range b.errors {
			t.Errorf("browser: %s", e)
		}
	})
	return b
}

func (b *browser) tab(t *testing.T) *browser { return newTab(t, b.ctx) }

func (b *browser) run(t *testing.T, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 3*time.Minute)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		page, _ := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.body.innerText`))
		t.Fatalf("%s: %v\npage:\n%.3000s", what, err, page)
	}
}

// js runs a script in the page.
func js(expr string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := chromedp.Evaluate[any](expr)(ctx, tg)
		return err
	})
}

// open shows a view of the console (a hash route: no page load).
func open(route string) chromedp.Action[chromedp.Void] {
	return js(fmt.Sprintf(`location.hash = %q`, route))
}

// until waits until a script expression is true.
func until(expr string) chromedp.Action[chromedp.Void] {
	return chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingTimeout(2*time.Minute), chromedp.WithPollingInterval(50*time.Millisecond))
}

// eval returns the value of a script expression.
func eval[T any](t *testing.T, b *browser, expr string) T {
	t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("%s: %v", expr, err)
	}
	return v
}

// shot saves a screenshot of the page as <name>.png when
// BLENDPLANE_CONSOLE_SCREENSHOTS names a directory (make screenshots: docs/console).
func (b *browser) shot(t *testing.T, name string) {
	t.Helper()
	if b.shots == "" {
		return
	}
	b.run(t, "settle before "+name, chromedp.Sleep(300*time.Millisecond))
	png, err := chromedp.Run(b.ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(b.shots, name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

func (b *browser) signIn(t *testing.T, base, token, principal string) {
	t.Helper()
	b.run(t, "sign in as "+principal,
		chromedp.Navigate("about:blank"), // a load, also when the console is open already
		chromedp.Navigate(base+"/console/#/sessions"),
		chromedp.WaitVisible(chromedp.CSS("#sign-in")),
		chromedp.SendKeys(chromedp.CSS("#token"), token),
		chromedp.Click(chromedp.CSS("#sign-in button[type=submit]")),
		until(fmt.Sprintf(`document.getElementById('who').innerText.startsWith(%q)`, principal+" ")),
		chromedp.WaitVisible(chromedp.CSS("#nav")))
}

func count(selector string) string {
	return fmt.Sprintf(`document.querySelectorAll(%q).length`, selector)
}

// TestConsole drives the web console in headless Chromium against a live
// control plane and agent with real Blender: sign-in with tokens (a wrong
// one refused, a revoked one signed out at the next refresh), scopes
// deciding what is offered, a plan watched live from
// the moment it waits for approval to its last receipt, the approval with
// its preview diff and preview render approved in another tab, the render
// opened at its size and downloaded byte for byte, the session's plans, the
// audit searched by mutation id and by principal, the agents. No page may
// log an error.
func TestConsole(t *testing.T) {
	c := startClusterOpts(t, clusterOpts{policy: defaultPolicy})
	base := "http://" + c.httpAddr
	aliceToken := c.createToken(t, "alice", "plans")
	alice := c.clientAs(t, aliceToken)
	neg, err := alice.Negotiate(ctxT(t, 2*time.Minute), &cpv1.NegotiateRequest{ContractVersion: "1.0.0",
		HostProfile: &cpv1.HostProfile{ClientName: "console-e2e", ClientVersion: "1"}})
	if err != nil {
		t.Fatal(err)
	}
	sid := neg.GetContract().GetSessionId()
	submit := func(id string, preview bool, ops ...*cpv1.Operation) *cpv1.Plan {
		t.Helper()
		resp, err := alice.SubmitPlan(ctxT(t, time.Minute), &cpv1.SubmitPlanRequest{SessionId: sid, RequestId: id, Operations: ops, PreviewRender: preview})
		if err != nil {
			t.Fatalf("submit %s: %v", id, err)
		}
		return resp.GetPlan()
	}
	// The scene: a floor, a crate to delete, a camera looking at them.
	submit("setup", false,
		op("floor", "object.create", map[string]any{"type": "plane", "name": "Floor", "size": 12}),
		op("crate", "object.create", map[string]any{"type": "cube", "name": "Crate", "location": []any{-1, 0.5, 0.6}}, "floor"),
		op("camera", "object.set_transform", map[string]any{"name": "Camera", "location": []any{9.5, -8.5, 5.5}, "rotation_euler": []any{1.15, 0, 0.84}}, "crate"))
	waitFor(t, "setup", func() bool {
		resp, err := alice.GetPlan(ctxT(t, 10*time.Second), &cpv1.GetPlanRequest{RequestId: "setup"})
		return err == nil && resp.GetPlan().GetState() == cpv1.Plan_STATE_SUCCEEDED
	})
	// The plan to watch: destructive, so it waits for approval first.
	ops := []*cpv1.Operation{op("del", "object.delete", map[string]any{"name": "Crate"})}
	prev := "del"
	for i := range 12 {
		id := fmt.Sprintf("ball%02d", i)
		ops = append(ops, op(id, "object.create", map[string]any{"type": "uv_sphere", "name": fmt.Sprintf("Ball%02d", i),
			"location": []any{float64(i%4) - 1.5, float64(i/4) - 1, 0.4}, "size": 0.6}, prev))
		prev = id
	}
	ops = append(ops, op("shot", "render.still", map[string]any{"output": "after.png", "resolution": []any{480, 360}, "samples": 8, "seed": 3}, prev))
	p := submit("shot-1", true, ops...)
	if p.GetState() != cpv1.Plan_STATE_AWAITING_APPROVAL {
		t.Fatalf("the destructive plan does not wait: %v", p)
	}
	total := len(ops)

	b := startBrowser(t)
	shots := b.shots

	// A wrong token is refused on the sign-in form; alice (plans scope) sees
	// her session and the waiting approval, but no buttons to resolve it.
	b.run(t, "wrong token",
		chromedp.Navigate(base+"/console/"),
		chromedp.WaitVisible(chromedp.CSS("#sign-in")),
		chromedp.SendKeys(chromedp.CSS("#token"), "bp_not-a-token"),
		chromedp.Click(chromedp.CSS("#sign-in button[type=submit]")),
		until(`document.querySelector('#sign-in .error') && document.querySelector('#sign-in .error').innerText.includes('UNAUTHENTICATED')`))
	b.shot(t, "sign-in")
	b.signIn(t, base, aliceToken, "alice")
	b.run(t, "alice's sessions",
		until(fmt.Sprintf(`!!document.querySelector('#sessions tr[data-session=%q]')`, sid)),
		open("#/approvals"),
		until(`document.querySelectorAll('#approvals [data-approval]').length === 1`),
		until(`document.querySelector('#approvals').innerText.includes('needs the approve scope')`),
		until(count(`#approvals button[data-action=approve]`)+` === 0`),
		open("#/agents"),
		until(`document.getElementById('main').innerText.includes('needs the admin scope')`),
		// The menu offers what her scopes let her see; a plan's address
		// without its request id, or with a stray %, says what is wrong.
		until(`document.querySelector('#nav a[data-view=agents]').hidden && !document.querySelector('#nav a[data-view=sessions]').hidden`),
		open("#/plans/alice"),
		until(`document.getElementById('main').innerText.includes('names no request id')`),
		open("#/plans/%"),
		until(`document.getElementById('main').innerText.includes('is not valid')`),
		open("#/sessions/bad%20id"),
		until(`!!document.querySelector('#main .error') && document.querySelector('#main .error').innerText.includes('SCHEMA_INVALID')`))
	if text := eval[string](t, b, `document.querySelector('#main .error').innerText`); strings.Contains(text, "SCHEMA_INVALID: SCHEMA_INVALID") {
		t.Errorf("an error box repeats its code: %q", text)
	}
	b.run(t, "back to her sessions", open("#/sessions"))
	// An approver's home is Approvals, and its menu offers nothing else.
	rev := c.createToken(t, "rev", "approve")
	b.tab(t).run(t, "an approver signs in", // a tab of its own: alice's stays signed in in hers
		chromedp.Navigate(base+"/console/"),
		chromedp.WaitVisible(chromedp.CSS("#sign-in")),
		chromedp.SendKeys(chromedp.CSS("#token"), rev),
		chromedp.Click(chromedp.CSS("#sign-in button[type=submit]")),
		until(`location.hash === '#/approvals'`),
		until(`document.querySelectorAll('#approvals [data-approval]').length === 1`),
		until(`['agents', 'sessions', 'audit'].every((v) => document.querySelector('#nav a[data-view=' + v + ']').hidden)`))
	// She signs out; carol signs in, and her token revoked, the next
	// refresh of the view signs her out. (Revoking alice's would close her
	// session, and with it the waiting plan below.)
	b.run(t, "alice signs out", js(`document.getElementById('sign-out').click()`), chromedp.WaitVisible(chromedp.CSS("#sign-in")))
	b.signIn(t, base, c.createToken(t, "carol", "plans"), "carol")
	if _, err := c.client.RevokeToken(ctxT(t, 10*time.Second), &cpv1.RevokeTokenRequest{Name: "carol"}); err != nil {
		t.Fatal(err)
	}
	b.run(t, "signed out by a revoked token", chromedp.WaitVisible(chromedp.CSS("#sign-in")), until(`document.getElementById('who').innerText === ''`))

	// The admin watches the plan in one tab while it waits.
	b.signIn(t, base, c.adminToken, "admin")
	b.run(t, "every principal's sessions", until(fmt.Sprintf(`!!document.querySelector('#sessions tr[data-session=%q]')`, sid)))
	b.shot(t, "sessions")
	b.run(t, "the waiting plan",
		open("#/plans/alice/shot-1"),
		until(`!!document.querySelector('#plan-state [data-state=AWAITING_APPROVAL]')`),
		chromedp.WaitVisible(chromedp.CSS("#awaiting-approval")),
		until(count(`#receipts tbody tr`)+` === 0`))
	b.shot(t, "plan-waiting")

	// In another tab: the approval with its preview (diff and render), approved.
	approver := b.tab(t)
	approver.signIn(t, base, c.adminToken, "admin")
	approver.run(t, "the approval",
		open("#/approvals"),
		until(`!!document.querySelector('#approvals [data-approval] .preview [data-state=READY]')`),
		until(`[...document.querySelectorAll('#approvals .diff tr')].some(tr => tr.innerText.includes('removed') && tr.innerText.includes('Crate'))`),
		until(`[...document.querySelectorAll('#approvals img.preview-img')].some(img => img.complete && img.naturalWidth > 0)`))
	approver.shot(t, "approvals")
	approver.run(t, "approve",
		chromedp.Click(chromedp.CSS(`#approvals button[data-action=approve]`)),
		until(`document.querySelector('#approvals').innerText.includes('Nothing waits for approval')`),
		chromedp.Click(chromedp.CSS("#sign-out")),
		chromedp.WaitVisible(chromedp.CSS("#sign-in")))

	// The first tab, never reloaded, shows the plan run to its end.
	b.run(t, "the plan live",
		until(count(`#receipts tbody tr`)+fmt.Sprintf(` === %d`, total)),
		until(`!!document.querySelector('#plan-state [data-state=SUCCEEDED]')`),
		until(count(`#receipts tbody tr[data-status=SUCCEEDED]`)+fmt.Sprintf(` === %d`, total)),
		until(`document.getElementById('live').innerText.includes('ended succeeded')`))
	b.shot(t, "plan")

	// Open the render it made.
	b.run(t, "open the render",
		chromedp.Click(chromedp.CSS(`#receipts button[data-action=view][data-artifact="after.png"]`)),
		until(`!document.getElementById('viewer').hidden && document.getElementById('viewer-img').complete && document.getElementById('viewer-img').naturalWidth > 0`))
	size := eval[[]int](t, b, `[document.getElementById('viewer-img').naturalWidth, document.getElementById('viewer-img').naturalHeight]`)
	if fmt.Sprint(size) != "[480 360]" {
		t.Errorf("the render opened at %v, want 480×360", size)
	}
	b.shot(t, "render")
	b.run(t, "close the render", chromedp.Click(chromedp.CSS("#viewer-close")), until(`document.getElementById('viewer').hidden`))

	// The session: both plans, newest first, and the render to download.
	// The session: both plans, newest first, and the render downloaded to
	// disk byte for byte.
	downloads := t.TempDir()
	if _, err := chromedp.CallBrowser(b.ctx, cdpbrowser.SetDownloadBehavior, cdpbrowser.SetDownloadBehaviorParams{
		Behavior: cdpbrowser.SetDownloadBehaviorBehaviorAllow, DownloadPath: downloads}); err != nil {
		t.Fatal(err)
	}
	b.run(t, "the session",
		open("#/sessions/"+sid),
		until(`[...document.querySelectorAll('#plans tbody tr')].map(tr => tr.dataset.plan).join(',') === 'shot-1,setup'`),
		// The preview's render: its plan's, no operation's.
		until(`document.querySelector('#artifacts tr[data-artifact^="preview-"]')?.textContent.includes('shot-1 preview')`),
		chromedp.Click(chromedp.CSS(`#artifacts tr[data-artifact="after.png"] button[data-action=download]`)))
	b.shot(t, "session")
	// shot-1's artifacts: its preview's render and its operation's.
	arts, err := c.client.ListArtifacts(ctxT(t, 10*time.Second), &cpv1.ListArtifactsRequest{SessionId: sid, RequestId: "shot-1"})
	if err != nil || len(arts.GetArtifacts()) != 2 || arts.GetArtifacts()[1].GetName() != "after.png" {
		t.Fatalf("shot-1's artifacts: %v %v", arts, err)
	}
	waitFor(t, "the downloaded render", func() bool {
		raw, err := os.ReadFile(filepath.Join(downloads, "after.png"))
		return err == nil && fmt.Sprintf("%x", sha256.Sum256(raw)) == arts.GetArtifacts()[1].GetSha256()
	})

	// The audit: by the mutation id of one receipt, and by principal.
	stream, err := c.client.StreamReceipts(ctxT(t, time.Minute), &cpv1.StreamReceiptsRequest{RequestId: "shot-1", StartSequence: 3, Owner: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	third, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	mutation := third.GetReceipt().GetBlenderMutationId()
	if mutation == "" {
		t.Fatalf("no mutation id on %v", third)
	}
	b.run(t, "audit by mutation id",
		open("#/audit"),
		chromedp.WaitVisible(chromedp.CSS("#audit-search")),
		chromedp.SendKeys(chromedp.CSS(`#audit-search input[name=mutation]`), mutation),
		chromedp.Click(chromedp.CSS("#audit-search button[type=submit]")),
		until(count(`#audit tbody tr`)+` === 1`),
		until(fmt.Sprintf(`document.querySelector('#audit tbody tr').innerText.includes(%q)`, third.GetReceipt().GetOperationId())))
	b.run(t, "audit by principal",
		open("#/audit?principal=alice"),
		// Alice's plans' records: setup's 3, shot-1's operations, and the
		// decision on shot-1's approval (which names admin, who decided).
		until(count(`#audit tbody tr`)+fmt.Sprintf(` === %d`, 3+total+1)),
		until(count(`#audit tbody tr [data-state]`)+fmt.Sprintf(` === %d`, 3+total)))
	b.shot(t, "audit")

	// The agents.
	b.run(t, "agents",
		open("#/agents"),
		until(`!!document.querySelector('#agents tr[data-agent] [data-state=READY]')`),
		until(fmt.Sprintf(`document.getElementById('agents').innerText.includes(%q)`, sid)))
	b.shot(t, "agents")

	// A plan queued behind one that waits for approval says so, live (the
	// page showed ": 0 of 0"; found by QA).
	neg2, err := alice.Negotiate(ctxT(t, 2*time.Minute), &cpv1.NegotiateRequest{ContractVersion: "1.0.0",
		HostProfile: &cpv1.HostProfile{ClientName: "console-e2e", ClientVersion: "1", FeatureFlags: []string{"progress_events"}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, plan := range []struct {
		id string
		op *cpv1.Operation
	}{{"waits-1", op("del", "object.delete", map[string]any{"name": "Light"})}, {"queued-1", op("mk", "object.create", map[string]any{"type": "cube"})}} {
		if _, err := alice.SubmitPlan(ctxT(t, time.Minute), &cpv1.SubmitPlanRequest{SessionId: neg2.GetContract().GetSessionId(), RequestId: plan.id,
			Operations: []*cpv1.Operation{plan.op}}); err != nil {
			t.Fatal(err)
		}
	}
	b.run(t, "a plan behind one waiting for approval",
		open("#/plans/alice/queued-1"),
		until(`document.getElementById('live').innerText.includes('waiting behind plan waits-1, which waits for approval apr-')`))
	for _, id := range []string{"queued-1", "waits-1"} {
		if _, err := alice.CancelPlan(ctxT(t, 10*time.Second), &cpv1.CancelPlanRequest{RequestId: id}); err != nil {
			t.Fatal(err)
		}
	}
	if shots != "" {
		t.Logf("screenshots in %s", shots)
	}
}

// TestConsoleInsecureLocal: with --allow-insecure-local there is no sign-in;
// the console shows the anonymous principal and works at once. A path
// outside the console's files is not found.
func TestConsoleInsecureLocal(t *testing.T) {
	httpAddr := freeAddr(t)
	startDaemon(t, "controlplane", "--listen", freeAddr(t), "--http-listen", httpAddr, "--data-dir", t.TempDir(), "--allow-insecure-local")
	base := "http://" + httpAddr
	waitFor(t, "the HTTP listener", func() bool { return httpStatus(base+"/console/") == http.StatusOK })
	if code := httpStatus(base + "/console/nope.js"); code != http.StatusNotFound {
		t.Errorf("/console/nope.js: %d", code)
	}
	b := startBrowser(t)
	b.run(t, "no sign-in",
		chromedp.Navigate(base+"/"),
		until(`document.getElementById('who').innerText.startsWith('anonymous ')`),
		until(`!!document.querySelector('#sessions') || document.getElementById('main').innerText.includes('No sessions')`),
		open("#/agents"),
		until(`document.getElementById('main').innerText.includes('No agent has registered')`))
	if eval[int](t, b, count(`#sign-in`)) != 0 {
		t.Error("a sign-in form without tokens")
	}
}

// httpStatus is the status of a GET (0 when the server cannot be reached).
func httpStatus(url string) int {
	resp, err := http.Get(url)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}
