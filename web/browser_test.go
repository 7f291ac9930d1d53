package web_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/agentplane/agentplane/agent"
	"github.com/agentplane/agentplane/api"
	"github.com/agentplane/agentplane/api/apitest"
	"github.com/agentplane/agentplane/web"
)

// The browser tests drive the viewer in headless Chromium (Debian's
// chromium; scripts/setup-chromium.sh installs it and exports
// AGENTPLANE_CHROMIUM) against the demo API on loopback, and save a
// screenshot of every page they reach into $AGENTPLANE_SCREENSHOTS
// (default: a fresh temporary folder, named in the test log).

var shotDir = func() string {
	if d := os.Getenv("AGENTPLANE_SCREENSHOTS"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			panic(err)
		}
		return d
	}
	d, err := os.MkdirTemp("", "agentplane-screenshots-")
	if err != nil {
		panic(err)
	}
	return d
}()

// page is one test's browser tab on one demo server.
type page struct {
	t   *testing.T
	tab context.Context // the tab, without a deadline
	ctx context.Context // the tab with the test's deadline
	srv *apitest.Server
}

// testBound bounds each browser test's time in the browser, counted from
// the end of its setup (restartClock). Without the race detector each
// test takes 5 to 20 s here; with it, on a loaded machine, several times
// that.
const testBound = 60 * time.Second

// restartClock gives the test testBound from now (after a long setup).
func (p *page) restartClock() { p.restartClockFor(testBound) }

func (p *page) restartClockFor(d time.Duration) {
	ctx, cancel := context.WithTimeout(p.tab, d)
	p.t.Cleanup(cancel)
	p.ctx = ctx
}

func newPage(t *testing.T, o apitest.Options) *page {
	t.Helper()
	bin := os.Getenv("AGENTPLANE_CHROMIUM")
	if bin == "" {
		bin = "/usr/bin/chromium"
	}
	if _, err := os.Stat(bin); err != nil {
		if os.Getenv("AGENTPLANE_TEST_STRICT") == "1" {
			t.Fatalf("no Chromium at %s: run scripts/setup-chromium.sh", bin)
		}
		t.Skipf("no Chromium at %s: run scripts/setup-chromium.sh (it exports AGENTPLANE_CHROMIUM)", bin)
	}
	prev := o.API
	o.API = func(ao *api.Options) {
		ao.UI = web.Handler()
		if prev != nil {
			prev(ao)
		}
	}
	srv := apitest.Start(t, o)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(bin), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true), chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1400, 900))
	ctx, cancelTab := chromedp.NewContext(actx)
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil { // starts the browser, without a deadline
		cancelTab()
		cancelAlloc()
		t.Fatalf("start chromium: %v", err)
	}
	t.Cleanup(func() { cancelTab(); cancelAlloc() })
	p := &page{t: t, tab: ctx, srv: srv}
	p.restartClock()
	return p
}

func (p *page) do(steps ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	if err := chromedp.Do(p.ctx, steps...); err != nil {
		p.shot("failed")
		p.t.Fatal(err)
	}
}

func (p *page) text(sel string) string {
	p.t.Helper()
	s, err := chromedp.Run(p.ctx, chromedp.Evaluate[string](fmt.Sprintf("(document.querySelector(%q) || {}).textContent || ''", sel)))
	if err != nil {
		p.t.Fatalf("text of %s: %v", sel, err)
	}
	return s
}

func (p *page) count(sel string) int {
	p.t.Helper()
	n, err := chromedp.Run(p.ctx, chromedp.Evaluate[int](fmt.Sprintf("document.querySelectorAll(%q).length", sel)))
	if err != nil {
		p.t.Fatalf("count %s: %v", sel, err)
	}
	return n
}

// shot saves a screenshot of the whole page as TEST-NAME.png.
func (p *page) shot(name string) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
	defer cancel()
	// Timeline rows off screen are not painted (content-visibility: auto);
	// a full-page picture wants them all.
	_, _ = chromedp.Run(ctx, chromedp.Evaluate[int](`[...document.querySelectorAll(".tl")].map((e) => e.style.contentVisibility = "visible").length`))
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // 100: PNG (lower is JPEG)
	if err != nil {
		p.t.Logf("screenshot %s: %v", name, err)
		return
	}
	path := filepath.Join(shotDir, strings.ReplaceAll(p.t.Name(), "/", "_")+"-"+name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		p.t.Fatal(err)
	}
	p.t.Logf("screenshot %s", path)
}

// signIn opens the viewer and signs in with user's API key.
func (p *page) signIn(user string) {
	p.t.Helper()
	p.do(chromedp.Navigate(p.srv.HTTP.URL+"/ui/"), chromedp.WaitVisible(chromedp.CSS("#api-key")))
	p.shot("login")
	p.do(chromedp.SendKeys(chromedp.CSS("#api-key"), p.srv.Keys[user]), chromedp.Click(chromedp.CSS("#login-button")),
		chromedp.WaitVisible(chromedp.CSS("#runs-scroll")))
}

// call makes an API request as user.
func (p *page) call(user, method, path string, body any, out any) int {
	p.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, p.srv.HTTP.URL+path, rd)
	req.Header.Set("Authorization", "Bearer "+p.srv.Keys[user])
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		p.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(data, out); err != nil {
			p.t.Fatalf("%s %s: %v: %s", method, path, err, data)
		}
	}
	return resp.StatusCode
}

func (p *page) start(version any) string {
	p.t.Helper()
	body := map[string]any{"agent": apitest.DemoAgent, "input": apitest.DemoTask, "mode": "async"}
	if version != nil {
		body["version"] = version
	}
	var run api.Run
	if st := p.call(apitest.Priya, "POST", "/v1/runs", body, &run); st != http.StatusAccepted {
		p.t.Fatalf("start run: %d", st)
	}
	return run.ID
}

// waitRun polls until the run satisfies ok.
func (p *page) waitRun(id string, what string, ok func(api.Run) bool) api.Run {
	p.t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var run api.Run
		p.call(apitest.Priya, "GET", "/v1/runs/"+id, nil, &run)
		if ok(run) {
			return run
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("run %s: %s after 30s (status %s)", id, what, run.Status)
		}
	}
}

func ended(r api.Run) bool {
	switch r.Status {
	case "completed", "completed_partial", "failed", "cancelled":
		return true
	}
	return false
}

// finish approves (as meera) everything the run asks until it ends.
func (p *page) finish(id string) api.Run {
	p.t.Helper()
	return p.waitRun(id, "not ended", func(r api.Run) bool {
		for _, a := range r.PendingApprovals {
			p.call(apitest.Meera, "POST", "/v1/approvals/"+a.ID+":decide", map[string]any{"decision": "approve"}, nil)
		}
		return ended(r)
	})
}

// TestBrowserRunsAndTimeline: sign in, the runs list shows the tenant's
// runs (and not another tenant's), j and Enter open a run, its timeline
// shows the model calls and tool attempts with their decisions, and the
// prompt of a model call is rebuilt and verified on demand.
func TestBrowserRunsAndTimeline(t *testing.T) {
	p := newPage(t, apitest.Options{})
	id := p.start(nil)
	p.finish(id)
	var foreign api.Run
	p.call(apitest.Gus, "POST", "/v1/runs", map[string]any{"agent": apitest.DemoAgent, "input": apitest.DemoTask}, &foreign)
	p.restartClock()
	p.signIn(apitest.Priya)
	p.do(chromedp.WaitVisible(chromedp.CSS(`.row[data-run="` + id + `"]`)))
	if n := p.count(`.row[data-run="` + foreign.ID + `"]`); n != 0 {
		t.Fatalf("the runs list shows globex's run %s", foreign.ID)
	}
	p.shot("runs")
	p.do(chromedp.KeyEvent("j"), chromedp.KeyEvent("\r"),
		chromedp.WaitVisible(chromedp.CSS(`#timeline .tl[data-type="run_completed"]`)))
	if got := p.text("#run-status"); got != "completed" {
		t.Fatalf("run status shows %q", got)
	}
	for _, typ := range []string{"model_call", "tool_attempt", "tool_result", "approval_requested", "approval_decided"} {
		if p.count(`#timeline .tl[data-type="`+typ+`"]`) == 0 {
			t.Errorf("the timeline has no %s", typ)
		}
	}
	if txt := p.text(`#timeline .tl[data-type="tool_attempt"] .body`); !strings.Contains(txt, "by ") || !strings.Contains(txt, "tier") {
		t.Errorf("a tool attempt reads %q: want its decision, control and tier", txt)
	}
	p.do(chromedp.Click(chromedp.CSS(`#timeline .tl[data-type="model_call"]`)), chromedp.Click(chromedp.CSS("#show-prompt")),
		chromedp.WaitVisible(chromedp.CSS("#prompt")))
	if got := p.text("#prompt .badge"); !strings.Contains(got, "matches") {
		t.Fatalf("prompt check reads %q", got)
	}
	p.shot("run")
	// A 200-step run's timeline: this run's events repeated to 200 steps
	// (about 1,000 rows), drawn by the page's own timeline code; the time
	// is logged, not asserted.
	res, err := chromedp.Run(p.ctx, chromedp.Evaluate[[]float64](`(() => {
		const evs = [...document.querySelectorAll("#timeline .tl")].map((r) => r.ev).filter((e) => e.step > 0);
		const steps = Math.max(...evs.map((e) => e.step)), many = [];
		for (let k = 0; many.length === 0 || many[many.length - 1].step < 200; k++)
			for (const e of evs) many.push(Object.assign({}, e, {seq: many.length + 1, step: e.step + k * steps}));
		const box = document.createElement("div");
		document.body.append(box);
		const t = performance.now();
		timeline(box, "x").add(many);
		box.getBoundingClientRect(); // layout included
		const ms = performance.now() - t;
		box.remove();
		return [many.length, ms];
	})()`))
	if err != nil || len(res) != 2 || res[0] < 500 {
		t.Fatalf("200-step timeline: %v %v", res, err)
	}
	t.Logf("a 200-step timeline (%.0f events) drawn in %.0f ms", res[0], res[1])
}

// TestBrowserLiveRun: a run's page opened while it executes follows it
// over the event stream (EventSource with the session cookie): the
// approval request appears, and after the decision the rest of the run.
func TestBrowserLiveRun(t *testing.T) {
	p := newPage(t, apitest.Options{ModelLatency: 300 * time.Millisecond})
	p.signIn(apitest.Priya)
	id := p.start(nil)
	p.do(chromedp.Navigate(p.srv.HTTP.URL+"/ui/#/run/"+id), chromedp.WaitVisible(chromedp.CSS("#timeline")))
	before := p.count("#timeline .tl")
	p.do(chromedp.WaitVisible(chromedp.CSS(`#timeline .tl[data-type="approval_requested"]`)))
	if after := p.count("#timeline .tl"); after <= before {
		t.Fatalf("the timeline did not grow live: %d then %d rows", before, after)
	}
	p.shot("waiting")
	p.finish(id)
	p.do(chromedp.WaitVisible(chromedp.CSS(`#timeline .tl[data-type="run_completed"]`)))
	if _, err := chromedp.Run(p.ctx, chromedp.Poll[bool](`document.getElementById("run-status").textContent === "completed"`)); err != nil {
		p.shot("failed")
		t.Fatalf("the status badge did not turn completed: %v", err)
	}
	p.shot("completed")
}

// TestBrowserInbox: meera's inbox shows the refund in plain words; she
// edits its arguments (a partial refund) with a comment, then approves
// the next request from the inbox; the log records both.
func TestBrowserInbox(t *testing.T) {
	p := newPage(t, apitest.Options{})
	id := p.start(nil)
	p.waitRun(id, "no approval pending", func(r api.Run) bool { return len(r.PendingApprovals) > 0 })
	p.restartClock()
	p.signIn(apitest.Meera)
	p.do(chromedp.Navigate(p.srv.HTTP.URL+"/ui/#/approvals"), chromedp.WaitVisible(chromedp.CSS("#approvals .card")))
	if what := p.text("#approvals .card .what"); !strings.Contains(strings.ToLower(what), "refund") {
		t.Fatalf("the inbox card reads %q", what)
	}
	p.shot("inbox")
	args := `{"customer_id":"c_88213","transaction_id":"txn_1002","amount_inr":5000,"reason":"partial refund agreed with the customer"}`
	p.do(chromedp.Click(chromedp.CSS("#approvals .card details summary")),
		chromedp.SetValue(chromedp.CSS("#approvals .card textarea.edit-args"), args),
		chromedp.SendKeys(chromedp.CSS("#approvals .card input.comment"), "partial refund only"))
	p.shot("edit")
	p.do(chromedp.Click(chromedp.CSS("#approvals .card button.edit")))
	p.waitRun(id, "the edit was not applied", func(r api.Run) bool {
		return ended(r) || (len(r.PendingApprovals) > 0 && r.PendingApprovals[0].Tool != "issue_refund")
	})
	// The next request (the email), approved from the inbox.
	p.do(chromedp.WaitVisible(chromedp.CSS("#approvals .card button.approve")))
	p.shot("next")
	p.do(chromedp.Click(chromedp.CSS("#approvals .card button.approve")))
	run := p.finish(id)
	var evs api.EventList
	p.call(apitest.Priya, "GET", "/v1/runs/"+id+"/events", nil, &evs)
	outcomes := []string{}
	for _, ev := range evs.Events {
		if ev.Type == "approval_decided" {
			var d struct{ Outcome, Decider, Comment string }
			_ = json.Unmarshal(ev.Payload, &d)
			outcomes = append(outcomes, d.Outcome+"/"+d.Decider+"/"+d.Comment)
		}
	}
	if len(outcomes) < 2 || outcomes[0] != "edited/"+apitest.Meera+"/partial refund only" || !strings.HasPrefix(outcomes[1], "approved/"+apitest.Meera) {
		t.Fatalf("decisions recorded: %v (run %s)", outcomes, run.Status)
	}
	p.do(chromedp.WaitVisible(chromedp.CSS("#inbox-empty")))
	p.shot("empty")
}

// TestBrowserReplayDiff: from an ended run's page, a replay from step 2
// is started; the diff page shows it beside its original.
func TestBrowserReplayDiff(t *testing.T) {
	p := newPage(t, apitest.Options{})
	id := p.start(nil)
	p.finish(id)
	p.restartClock()
	p.signIn(apitest.Priya)
	p.do(chromedp.Navigate(p.srv.HTTP.URL+"/ui/#/run/"+id), chromedp.WaitVisible(chromedp.CSS("#replay-form")),
		chromedp.SetValue(chromedp.CSS("#r-step"), "2"), chromedp.SetValue(chromedp.CSS("#r-mode"), "recorded"))
	p.shot("run")
	p.do(chromedp.Click(chromedp.CSS("#r-go")), chromedp.WaitVisible(chromedp.CSS("#diff-replay .tl")),
		chromedp.WaitVisible(chromedp.CSS("#diff-original .tl")))
	loc, err := chromedp.Run(p.ctx, chromedp.Location())
	if err != nil || !strings.Contains(loc, "#/diff/") {
		t.Fatalf("after starting the replay the page is %q (%v)", loc, err)
	}
	replayID := loc[strings.LastIndex(loc, "/")+1:]
	p.finish(replayID)
	p.do(chromedp.WaitVisible(chromedp.CSS(`#diff-replay .tl[data-type="run_completed"], #diff-replay .tl[data-type="run_failed"]`)))
	if n := p.count("#diff-original .tl"); n < 5 {
		t.Fatalf("the original column has %d events", n)
	}
	var rep api.Run
	p.call(apitest.Priya, "GET", "/v1/runs/"+replayID, nil, &rep)
	if rep.ParentRunID != id {
		t.Fatalf("replay %s names original %q, want %s", replayID, rep.ParentRunID, id)
	}
	p.shot("diff")
}

// TestBrowserCompareVersions: two versions of the agent side by side.
func TestBrowserCompareVersions(t *testing.T) {
	p := newPage(t, apitest.Options{})
	d, err := agent.LoadDefinitionFile(filepath.Join(p.srv.Dir, "demo", "agent.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	d.Version = 2
	d.Instructions += "\nBe brief.\n"
	if _, err := p.srv.Platform.Registry.Apply(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	p.finish(p.start(1))
	p.finish(p.start(2))
	p.restartClock()
	p.signIn(apitest.Priya)
	p.do(chromedp.Navigate(p.srv.HTTP.URL+"/ui/#/metrics?agent="+apitest.DemoAgent+"&a=1&b=2"), chromedp.WaitVisible(chromedp.CSS("#metrics")))
	head := p.text("#metrics tr:first-child")
	if !strings.Contains(head, "v1") || !strings.Contains(head, "v2") {
		t.Fatalf("the table's head reads %q", head)
	}
	if body := p.text("#metrics"); !strings.Contains(body, "task success") || !strings.Contains(body, "human-override rate") {
		t.Fatalf("the table reads %q", body)
	}
	p.shot("versions")
}

// TestBrowserTenThousandRuns: with 10,000 runs in the tenant the list
// loads them all, keeps only the visible rows in the page, and moves with
// j to the end. The load time is logged, not asserted.
func TestBrowserTenThousandRuns(t *testing.T) {
	p := newPage(t, apitest.Options{API: func(o *api.Options) { o.NoWorkers = true }})
	// Seeding through CreateRun costs one fsync a run (about 40 s for
	// 10,000 here), so the rows are written in one transaction straight
	// into the store's runs table; the server reads them as any runs.
	db, err := sql.Open("sqlite", "file:"+filepath.Join(p.srv.Dir, "agentplane.db")+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	base := time.Now().Add(-time.Hour).UnixMicro()
	if _, err := db.Exec(`WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i+1 FROM n WHERE i < 9999)
		INSERT INTO runs(id, tenant, user_id, agent, agent_version, task, mode, status, created_at, updated_at, steps, notified)
		SELECT printf('run_bulk%05d', i), ?, ?, ?, 1, 'x', 'async', 'completed', ? + i*1000, ?, 3, 1 FROM n`,
		apitest.BankTenant, apitest.Priya, apitest.DemoAgent, base, base); err != nil {
		t.Fatal(err)
	}
	// Listing takes a few seconds; under the race detector (whose
	// instrumented SQLite reads pages of runs many times slower) about a
	// minute, hence the longer bound.
	p.restartClockFor(3 * testBound)
	start := time.Now()
	p.signIn(apitest.Priya)
	if _, err := chromedp.Run(p.ctx, chromedp.Poll[bool](`document.getElementById("runs-count").textContent === "10000 runs"`,
		chromedp.WithPollingTimeout(0))); err != nil {
		p.shot("failed")
		t.Fatalf("the list did not reach 10000 runs: %v (%s)", err, p.text("#runs-count"))
	}
	t.Logf("10,000 runs listed %v after signing in", time.Since(start).Round(time.Millisecond))
	if n := p.count("#runs-spacer .row"); n == 0 || n > 200 {
		t.Fatalf("%d rows in the page for 10,000 runs: want only the visible ones", n)
	}
	if first := p.text("#runs-spacer .row.sel span"); first != "run_bulk09999" {
		t.Fatalf("the first (newest) row is %q", first)
	}
	// One real key press, then 49 more dispatched in the page, timed there
	// (the protocol's round trips would dominate otherwise).
	p.do(chromedp.KeyEvent("j"))
	ms, err := chromedp.Run(p.ctx, chromedp.Evaluate[float64](`(() => { const t = performance.now();
		for (let i = 0; i < 49; i++) document.dispatchEvent(new KeyboardEvent("keydown", {key: "j"}));
		return performance.now() - t; })()`))
	if err != nil {
		t.Fatal(err)
	}
	if sel := p.text("#runs-spacer .row.sel span"); sel != "run_bulk09949" {
		t.Fatalf("after 50 j the selection is %q", sel)
	}
	t.Logf("49 moves with j in the page: %.1f ms", ms)
	ms, err = chromedp.Run(p.ctx, chromedp.Evaluate[float64](`(() => { const s = document.getElementById("runs-scroll"), t = performance.now();
		s.scrollTop = s.scrollHeight; s.dispatchEvent(new Event("scroll")); return performance.now() - t; })()`))
	if err != nil {
		t.Fatal(err)
	}
	p.do(chromedp.WaitVisible(chromedp.CSS(`.row[data-run="run_bulk00000"]`)))
	t.Logf("jump to the end of the list: %.1f ms (then drawn on the next frame)", ms)
	p.shot("runs")
}
