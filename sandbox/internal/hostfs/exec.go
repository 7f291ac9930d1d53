package hostfs

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"syscall"
	"time"

	"github.com/agentplane/agentplane/sandbox"
	"github.com/agentplane/agentplane/sandbox/internal/cgroup"
)

// PrepareExec does what every executor does before a command: it fills in
// x's defaults, writes x's files into the workspace, and returns the
// command's channel carrying the wrapper's request (the common fields,
// then adjust's). The caller passes the channel's GuestEnds to the
// runtime, calls Started once it runs (or Close if it did not start), and
// Finish once it has ended.
func (d *Dir) PrepareExec(x *sandbox.Exec, spec sandbox.Spec, adjust func(*sandbox.GuestRequest)) (*Channel, error) {
	if len(x.Argv) == 0 {
		return nil, errors.New("empty argv")
	}
	if x.Timeout <= 0 {
		x.Timeout = 30 * time.Second
	}
	if x.TailBytes <= 0 {
		x.TailBytes = 64 << 10
	}
	for _, f := range x.Files {
		if err := d.WriteFile(f.Path, f.Data); err != nil {
			return nil, fmt.Errorf("write %s: %w", f.Path, err)
		}
	}
	cpu := x.CPUTime
	if cpu <= 0 {
		cpu = x.Timeout
	}
	req := &sandbox.GuestRequest{
		Argv: x.Argv, Env: sandbox.GuestEnv(*x), Cwd: sandbox.GuestWorkspace,
		Workspace: sandbox.GuestWorkspace,
		NProc:     spec.Pids, CPUSeconds: int((cpu + time.Second - 1) / time.Second),
		FileSizeBytes: int64(spec.WorkspaceMB) << 20, NoFile: 1024, Landlock: "off",
	}
	if x.Egress {
		req.EgressSocket, req.RelayAddr = sandbox.GuestRunDir+"/egress.sock", sandbox.GuestRelayAddr
	}
	if adjust != nil {
		adjust(req)
	}
	data, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	return newChannel(data)
}

// Channel is one command's two pipes to the wrapper: the request goes in
// on one, the report comes back on the other. The host holds the far ends,
// the runtime hands the near ends to the wrapper alone (GuestRequestFD,
// GuestReportFD), so nothing the sandboxed program can write (a file in
// the sandbox, the wrapper's memory, a later command's request) carries
// either.
type Channel struct {
	req        []byte
	reqR, reqW *os.File
	repR, repW *os.File
	done       chan struct{}
	report     []byte
	readErr    error
}

func newChannel(req []byte) (*Channel, error) {
	c := &Channel{req: req, done: make(chan struct{})}
	var err error
	if c.reqR, c.reqW, err = os.Pipe(); err != nil {
		return nil, err
	}
	if c.repR, c.repW, err = os.Pipe(); err != nil {
		c.reqR.Close()
		c.reqW.Close()
		return nil, err
	}
	return c, nil
}

// GuestEnds are the wrapper's ends: the request's read end and the
// report's write end, in that order.
func (c *Channel) GuestEnds() (request, report *os.File) { return c.reqR, c.repW }

// Started closes the host's copies of the wrapper's ends, sends the request
// and starts collecting the report. Call it once the runtime has started.
func (c *Channel) Started() {
	c.reqR.Close()
	c.repW.Close()
	go func() {
		_, _ = c.reqW.Write(c.req)
		c.reqW.Close()
	}()
	go func() {
		defer close(c.done)
		c.report, c.readErr = io.ReadAll(io.LimitReader(c.repR, sandbox.MaxSidecarBytes+1))
		// Whatever comes beyond the limit is drained, so the writer never
		// blocks; the report is refused by its size.
		_, _ = io.Copy(io.Discard, c.repR)
	}()
}

// Close releases a channel whose runtime never started.
func (c *Channel) Close() {
	for _, f := range []*os.File{c.reqR, c.reqW, c.repR, c.repW} {
		_ = f.Close()
	}
}

// reportWait bounds how long the host waits, after the runtime has exited,
// for the report's write end to close.
const reportWait = 2 * time.Second

// Finish attaches the wrapper's report to res once the command has ended
// (the runtime exited): parsed as untrusted input into res.Sidecar, or the
// reason there is none in res.SidecarError. No report on the host's
// channel, or one the parser refuses, means the wrapper did not see the
// command through (it was killed, or something else wrote): the command is
// marked unclean. The report never changes a field the host measured.
func (c *Channel) Finish(res *sandbox.Result) {
	select {
	case <-c.done:
	case <-time.After(reportWait):
	}
	c.repR.Close()
	<-c.done
	switch {
	case c.readErr != nil && len(c.report) == 0:
		res.SidecarError = "no report from the wrapper: " + sandbox.Sanitize([]byte(c.readErr.Error()), 256, false, false).Text
	case len(c.report) == 0:
		res.SidecarError = "no report from the wrapper: it was killed or died before the command ended"
	default:
		sc, err := sandbox.ParseSidecar(c.report)
		if err != nil {
			res.SidecarError = sandbox.Sanitize([]byte(err.Error()), 512, false, false).Text
		} else {
			res.Sidecar = sc
		}
	}
	if res.Sidecar == nil {
		Unclean(res, "the wrapper's report did not arrive ("+res.SidecarError+")")
	}
}

// Unclean marks res as a command that did not end cleanly, keeping the
// first reason and adding later ones.
func Unclean(res *sandbox.Result, reason string) {
	if res.Unclean == "" {
		res.Unclean = reason
	} else {
		res.Unclean += "; " + reason
	}
}

// ExitCode is a finished process's exit code as a shell reports it (128+N
// for death by signal N), or -1 when it is unknown.
func ExitCode(ps *os.ProcessState) int {
	if ps == nil {
		return -1
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok {
		switch {
		case ws.Exited():
			return ws.ExitStatus()
		case ws.Signaled():
			return 128 + int(ws.Signal())
		}
	}
	return -1
}

// ReleaseIdentity ends a destroyed sandbox's hold on its host identity: the
// uid goes back to the pool only when nothing runs as it any more, and the
// id's lease is released.
func ReleaseIdentity(uids *UIDs, uid int, lease *Lease, id string, log *slog.Logger) {
	if left := ProcessesOf(uid); len(left) == 0 {
		uids.Put(uid)
	} else {
		log.Error("processes outlived their sandbox; uid kept out of the pool", "sandbox", id, "uid", uid, "pids", left)
	}
	lease.Release()
}

// LeftoversOf lists what of a destroyed sandbox is still on the host: its
// cgroup (when exists says so), workspace mount, directory and processes.
func LeftoversOf(id string, cgroupExists bool, d *Dir, uid int) []string {
	var out []string
	if cgroupExists {
		out = append(out, "cgroup "+id)
	}
	if Mounted(d.Workspace()) {
		out = append(out, "mount "+d.Workspace())
	}
	if _, err := os.Stat(d.Path); err == nil {
		out = append(out, "directory "+d.Path)
	}
	for _, pid := range ProcessesOf(uid) {
		out = append(out, fmt.Sprintf("process %d (uid %d)", pid, uid))
	}
	return out
}

// SweepDead removes what sandboxes of dead processes left under the cgroup
// parent and in the state directory: those with the prefix whose lease no
// live process holds. The ids removed are added to seen; a sandbox whose
// owner cannot be told is left alone and the reason returned.
func SweepDead(parent *cgroup.Parent, state, prefix string, seen map[string]bool) error {
	var errs []error
	for _, id := range parent.Children(prefix) {
		if owned, err := Owned(id); owned {
			errs = append(errs, err)
			continue // a live sandbox of another process on this host
		}
		seen[id] = true
		errs = append(errs, parent.Attach(id).Remove())
	}
	for _, id := range Leftovers(state, prefix) {
		if owned, err := Owned(id); owned {
			errs = append(errs, err)
			continue
		}
		seen[id] = true
		errs = append(errs, RemoveLeftover(state, id))
	}
	return errors.Join(errs...)
}

// SortedKeys lists a sweep's ids.
func SortedKeys(seen map[string]bool) []string {
	ids := make([]string, 0, len(seen))
	for id := range seen {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// Host is what a sandbox holds on the host: its id (leased host-wide), its
// uid, its directory and its cgroup.
type Host struct {
	ID    string
	UID   int
	Lease *Lease
	Dir   *Dir
	CG    *cgroup.Group
}

// NewHost takes a uid and a fresh leased id, creates the sandbox's
// directory (the workspace owned by guestUID, or by the sandbox's own uid
// when guestUID is 0) and its cgroup with limits. On failure it undoes
// what it did.
func NewHost(uids *UIDs, parent *cgroup.Parent, state, prefix string, guestUID, workspaceMB int, limits cgroup.Limits) (*Host, error) {
	uid, err := uids.Get()
	if err != nil {
		return nil, err
	}
	id := NewID(prefix)
	lease, err := Claim(id)
	if err != nil {
		uids.Put(uid)
		return nil, err
	}
	if guestUID == 0 {
		guestUID = uid
	}
	dir, err := Create(state, id, uid, guestUID, workspaceMB)
	if err != nil {
		lease.Release()
		uids.Put(uid)
		return nil, err
	}
	cg, err := parent.New(id, limits)
	if err != nil {
		_ = dir.Remove()
		lease.Release()
		uids.Put(uid)
		return nil, err
	}
	return &Host{ID: id, UID: uid, Lease: lease, Dir: dir, CG: cg}, nil
}
