// Package cgroup gives each sandbox its own control group with memory,
// process and CPU limits, on the unified hierarchy (cgroup v2, what
// production hosts run) and on the legacy per-controller hierarchies (cgroup
// v1, including hybrid hosts where memory and pids exist only in v1).
//
// Sandbox groups live under one parent per process, created beneath the
// group the process itself is in, so the platform's own limits still apply
// to everything it starts. A process joins a group before it execs (see
// Group.ProcsFiles and Group.FD); Remove kills every process left and
// removes the directories.
package cgroup

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Limits of one group. Zero means no limit.
type Limits struct {
	MemoryBytes int64
	Pids        int
	// CPUQuota is the share of one CPU, in percent (100 = one CPU).
	CPUQuota int
}

// Parent is where this process creates sandbox groups.
type Parent struct {
	v2 bool
	// dirs maps a v1 controller (or "" on v2) to the parent directory.
	dirs map[string]string
}

// ErrNoController is returned when a required controller is missing.
var ErrNoController = errors.New("cgroup controller not available")

const root = "/sys/fs/cgroup"

// Open finds (and creates) the parent group name beneath the current
// process's group. memory and pids are required; cpu and freezer are used
// when present (v1).
func Open(name string) (*Parent, error) {
	if _, err := os.Stat(filepath.Join(root, "cgroup.controllers")); err == nil {
		return openV2(name)
	}
	return openV1(name)
}

// V2 reports whether the parent is on the unified hierarchy.
func (p *Parent) V2() bool { return p.v2 }

// String describes the parent for logs.
func (p *Parent) String() string {
	if p.v2 {
		return "cgroup v2 " + p.dirs[""]
	}
	var parts []string
	for _, c := range []string{"memory", "pids", "cpu", "freezer"} {
		if d, ok := p.dirs[c]; ok {
			parts = append(parts, d)
		}
	}
	return "cgroup v1 " + strings.Join(parts, " ")
}

func selfGroups() (map[string]string, error) {
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		if f[1] == "" {
			out[""] = f[2]
			continue
		}
		for _, c := range strings.Split(f[1], ",") {
			out[c] = f[2]
		}
	}
	return out, nil
}

func openV2(name string) (*Parent, error) {
	// A v2 group with processes cannot enable controllers for children, so
	// the parent hangs off the root (or off a delegated group the operator
	// runs agentplane in, when AGENTPLANE_CGROUP_PARENT names one).
	base := root
	if d := os.Getenv("AGENTPLANE_CGROUP_PARENT"); d != "" {
		base = filepath.Join(root, filepath.Clean("/"+d))
	}
	return openV2At(base, name, []string{"memory", "pids"})
}

// openV2At creates the parent name under the v2 group base and enables the
// required controllers (and cpu, when base offers it) for its children.
func openV2At(base, name string, required []string) (*Parent, error) {
	dir := filepath.Join(base, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("cgroup v2: %w", err)
	}
	avail, _ := os.ReadFile(filepath.Join(base, "cgroup.controllers"))
	has := func(data []byte, c string) bool {
		for _, f := range strings.Fields(string(data)) {
			if f == c {
				return true
			}
		}
		return false
	}
	for _, c := range required {
		if !has(avail, c) {
			return nil, fmt.Errorf("%w: cgroup v2 %s not delegated to %s", ErrNoController, c, base)
		}
	}
	for _, d := range []string{base, dir} {
		for _, c := range append(append([]string(nil), required...), "cpu") {
			if has(avail, c) {
				_ = os.WriteFile(filepath.Join(d, "cgroup.subtree_control"), []byte("+"+c), 0)
			}
		}
	}
	got, _ := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
	for _, c := range required {
		if !has(got, c) {
			return nil, fmt.Errorf("%w: cannot enable %s in %s", ErrNoController, c, dir)
		}
	}
	return &Parent{v2: true, dirs: map[string]string{"": dir}}, nil
}

func openV1(name string) (*Parent, error) {
	self, err := selfGroups()
	if err != nil {
		return nil, err
	}
	mounts, err := v1Mounts()
	if err != nil {
		return nil, err
	}
	p := &Parent{dirs: map[string]string{}}
	for _, c := range []string{"memory", "pids", "cpu", "freezer"} {
		mnt, ok := mounts[c]
		if !ok {
			if c == "memory" || c == "pids" {
				return nil, fmt.Errorf("%w: no cgroup v1 %s hierarchy and no cgroup v2 with it", ErrNoController, c)
			}
			continue
		}
		dir := filepath.Join(mnt, filepath.Clean("/"+self[c]), name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			if c == "memory" || c == "pids" {
				return nil, fmt.Errorf("cgroup v1 %s: %w", c, err)
			}
			continue
		}
		p.dirs[c] = dir
	}
	return p, nil
}

// v1Mounts maps each v1 controller to its mount point.
func v1Mounts() (map[string]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		sep := -1
		for i, x := range fields {
			if x == "-" {
				sep = i
				break
			}
		}
		if sep < 0 || sep+3 >= len(fields) || fields[sep+1] != "cgroup" {
			continue
		}
		for _, opt := range strings.Split(fields[sep+3], ",") {
			switch opt {
			case "memory", "pids", "cpu", "freezer":
				if _, dup := out[opt]; !dup {
					out[opt] = fields[4]
				}
			}
		}
	}
	return out, sc.Err()
}

// Group is one sandbox's control group.
type Group struct {
	v2   bool
	dirs map[string]string
}

// New creates the group id under the parent with the given limits.
func (p *Parent) New(id string, l Limits) (*Group, error) {
	if strings.ContainsAny(id, "/.") || id == "" {
		return nil, fmt.Errorf("cgroup: bad id %q", id)
	}
	g := &Group{v2: p.v2, dirs: map[string]string{}}
	for c, parent := range p.dirs {
		d := filepath.Join(parent, id)
		if err := os.Mkdir(d, 0o755); err != nil {
			g.Remove()
			return nil, fmt.Errorf("cgroup: %w", err)
		}
		g.dirs[c] = d
	}
	if err := g.set(l); err != nil {
		g.Remove()
		return nil, err
	}
	return g, nil
}

func write(dir, file, val string) error {
	if err := os.WriteFile(filepath.Join(dir, file), []byte(val), 0); err != nil {
		return fmt.Errorf("cgroup: set %s=%s: %w", file, val, err)
	}
	return nil
}

func (g *Group) set(l Limits) error {
	if g.v2 {
		d := g.dirs[""]
		if l.MemoryBytes > 0 {
			if err := write(d, "memory.max", strconv.FormatInt(l.MemoryBytes, 10)); err != nil {
				return err
			}
			_ = write(d, "memory.swap.max", "0")
		}
		if l.Pids > 0 {
			if err := write(d, "pids.max", strconv.Itoa(l.Pids)); err != nil {
				return err
			}
		}
		if l.CPUQuota > 0 {
			_ = write(d, "cpu.max", fmt.Sprintf("%d 100000", l.CPUQuota*1000))
		}
		return nil
	}
	if l.MemoryBytes > 0 {
		if err := write(g.dirs["memory"], "memory.limit_in_bytes", strconv.FormatInt(l.MemoryBytes, 10)); err != nil {
			return err
		}
		// Without swap accounting the file is absent; memory is still capped.
		_ = write(g.dirs["memory"], "memory.memsw.limit_in_bytes", strconv.FormatInt(l.MemoryBytes, 10))
	}
	if l.Pids > 0 {
		if err := write(g.dirs["pids"], "pids.max", strconv.Itoa(l.Pids)); err != nil {
			return err
		}
	}
	if d, ok := g.dirs["cpu"]; ok && l.CPUQuota > 0 {
		_ = write(d, "cpu.cfs_period_us", "100000")
		_ = write(d, "cpu.cfs_quota_us", strconv.Itoa(l.CPUQuota*1000))
	}
	return nil
}

// V2 reports whether the group is on the unified hierarchy.
func (g *Group) V2() bool { return g.v2 }

// Dir returns the v2 directory (for clone3 CLONE_INTO_CGROUP).
func (g *Group) Dir() string { return g.dirs[""] }

// ProcsFiles lists the cgroup.procs files a process must write its pid to
// (before exec) to join the group on every hierarchy.
func (g *Group) ProcsFiles() []string {
	var out []string
	for _, c := range []string{"", "memory", "pids", "cpu", "freezer"} {
		if d, ok := g.dirs[c]; ok {
			out = append(out, filepath.Join(d, "cgroup.procs"))
		}
	}
	return out
}

func readKey(path, key string) int64 {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == key {
			n, _ := strconv.ParseInt(f[1], 10, 64)
			return n
		}
	}
	return 0
}

func readInt(path string) int64 {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	return n
}

// OOMKills is how many processes the kernel's OOM killer killed in the
// group so far.
func (g *Group) OOMKills() int64 {
	if g.v2 {
		return readKey(filepath.Join(g.dirs[""], "memory.events"), "oom_kill")
	}
	return readKey(filepath.Join(g.dirs["memory"], "memory.oom_control"), "oom_kill")
}

// PeakMemory is the group's peak memory use in bytes (0 when unknown).
func (g *Group) PeakMemory() int64 {
	if g.v2 {
		return readInt(filepath.Join(g.dirs[""], "memory.peak"))
	}
	return readInt(filepath.Join(g.dirs["memory"], "memory.max_usage_in_bytes"))
}

// ResetPeak starts a new peak measurement where the kernel allows it (v1).
func (g *Group) ResetPeak() {
	if !g.v2 {
		_ = os.WriteFile(filepath.Join(g.dirs["memory"], "memory.max_usage_in_bytes"), []byte("0"), 0)
	}
}

// Pids lists the processes in the group.
func (g *Group) Pids() []int {
	seen := map[int]bool{}
	var out []int
	for _, f := range g.ProcsFiles() {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, s := range strings.Fields(string(data)) {
			if n, err := strconv.Atoi(s); err == nil && !seen[n] {
				seen[n] = true
				out = append(out, n)
			}
		}
	}
	return out
}

// Kill sends SIGKILL to every process in the group until it is empty, or
// until the deadline passes.
func (g *Group) Kill(timeout time.Duration) error {
	if g.v2 {
		_ = os.WriteFile(filepath.Join(g.dirs[""], "cgroup.kill"), []byte("1"), 0)
	}
	frozen := false
	if d, ok := g.dirs["freezer"]; ok {
		// Freeze first so a fork loop cannot outrun the kills.
		frozen = os.WriteFile(filepath.Join(d, "freezer.state"), []byte("FROZEN"), 0) == nil
	}
	deadline := time.Now().Add(timeout)
	for {
		pids := g.Pids()
		if len(pids) == 0 {
			break
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		if frozen {
			_ = os.WriteFile(filepath.Join(g.dirs["freezer"], "freezer.state"), []byte("THAWED"), 0)
			frozen = false
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroup: %d processes still alive after %v", len(pids), timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if frozen {
		_ = os.WriteFile(filepath.Join(g.dirs["freezer"], "freezer.state"), []byte("THAWED"), 0)
	}
	return nil
}

// Remove kills what is left and removes the group's directories.
func (g *Group) Remove() error {
	var errs []error
	if err := g.Kill(5 * time.Second); err != nil {
		errs = append(errs, err)
	}
	for c, d := range g.dirs {
		var err error
		for i := 0; i < 200; i++ {
			err = os.Remove(d)
			if err == nil || errors.Is(err, os.ErrNotExist) {
				err = nil
				break
			}
			time.Sleep(5 * time.Millisecond) // exiting processes release it shortly
		}
		if err != nil {
			errs = append(errs, err)
		} else {
			delete(g.dirs, c)
		}
	}
	return errors.Join(errs...)
}

// Exists reports whether any of the group's directories is still there.
func (g *Group) Exists() bool {
	for _, d := range g.dirs {
		if _, err := os.Stat(d); err == nil {
			return true
		}
	}
	return false
}

// Children lists the names of the groups under the parent whose names
// start with prefix (left over by an earlier process, for a sweep).
func (p *Parent) Children(prefix string) []string {
	seen := map[string]bool{}
	var out []string
	for _, d := range p.dirs {
		ents, _ := os.ReadDir(d)
		for _, e := range ents {
			if e.IsDir() && strings.HasPrefix(e.Name(), prefix) && !seen[e.Name()] {
				seen[e.Name()] = true
				out = append(out, e.Name())
			}
		}
	}
	return out
}

// Attach returns the existing group id (for a sweep).
func (p *Parent) Attach(id string) *Group {
	g := &Group{v2: p.v2, dirs: map[string]string{}}
	for c, parent := range p.dirs {
		d := filepath.Join(parent, id)
		if _, err := os.Stat(d); err == nil {
			g.dirs[c] = d
		}
	}
	return g
}
