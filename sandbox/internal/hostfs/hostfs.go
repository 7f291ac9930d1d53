// Package hostfs holds the host-side state every sandbox executor keeps on
// disk: a private directory per sandbox with a size-capped tmpfs workspace,
// the run directory holding the egress socket, the pipes that carry each
// command's request and report (never a file the sandbox could touch), a
// minimal /etc, safe file
// transfer in and out of the workspace, and removal that never follows a
// symlink the sandbox planted.
package hostfs

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/agentplane/agentplane/sandbox"
)

// Guest uid and gid inside every sandbox.
const (
	GuestUID = 1000
	GuestGID = 1000
)

// NewID returns a fresh sandbox id with the given prefix.
func NewID(prefix string) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// LockDir holds the host-wide lock files that keep concurrent agentplane
// processes on one host apart: one per sandbox uid in use and one per live
// sandbox id. The kernel drops a process's locks when it dies, so a crash
// frees them without cleanup.
// It is not under a sandbox state directory: creating it must not leave a
// parent that sandbox uids cannot traverse.
var LockDir = "/run/agentplane-locks"

// lockDir creates LockDir if needed and refuses one that is not a private
// directory of this user (a symlink, or one others may write to, could let
// another user steal or fake a lease).
func lockDir() error {
	if err := os.MkdirAll(LockDir, 0o700); err != nil {
		return err
	}
	st, err := os.Lstat(LockDir)
	if err != nil {
		return err
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !st.IsDir() || !ok || int(sys.Uid) != os.Geteuid() || st.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("lock directory %s must be a directory owned by uid %d with mode 0700 (is %v)", LockDir, os.Geteuid(), st.Mode())
	}
	return nil
}

// tryLock opens LockDir/name and takes an exclusive flock on it without
// waiting. It returns nil and no error when another open file holds it.
func tryLock(name string) (*os.File, error) {
	if err := lockDir(); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(LockDir, name), os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, nil
		}
		return nil, err
	}
	return f, nil
}

// Lease marks a sandbox id as live on this host for as long as it is held.
type Lease struct {
	f *os.File
}

// Claim takes the lease on a new sandbox id.
func Claim(id string) (*Lease, error) {
	f, err := tryLock("sandbox-" + id)
	if err != nil {
		return nil, fmt.Errorf("sandbox lease: %w", err)
	}
	if f == nil {
		return nil, fmt.Errorf("sandbox lease: %s is held by another process", id)
	}
	return &Lease{f: f}, nil
}

// Release frees the lease and removes its file.
func (l *Lease) Release() {
	if l == nil || l.f == nil {
		return
	}
	_ = os.Remove(l.f.Name())
	_ = l.f.Close()
	l.f = nil
}

// Owned reports whether a live process (this one included) holds the lease
// on id. A sweep leaves owned sandboxes alone: they belong to another
// process on the same host. When it cannot tell, it says owned (the sweep
// then leaves the sandbox) and returns the reason.
func Owned(id string) (bool, error) {
	f, err := tryLock("sandbox-" + id)
	if err != nil {
		return true, fmt.Errorf("sandbox lease of %s: %w", id, err)
	}
	if f == nil {
		return true, nil
	}
	_ = os.Remove(f.Name())
	_ = f.Close()
	return false, nil
}

// UIDs hands out host uids from a range, one per live sandbox, so that two
// sandboxes never share a host identity, also across processes: each uid
// in use is locked host-wide in LockDir.
type UIDs struct {
	mu   sync.Mutex
	base int
	n    int
	used map[int]*os.File
}

// NewUIDs serves uids base..base+n-1.
func NewUIDs(base, n int) *UIDs { return &UIDs{base: base, n: n, used: map[int]*os.File{}} }

// Get returns a uid no other sandbox on the host holds and no process runs
// as (a crashed process's sandbox may outlive its lock until a sweep).
func (u *UIDs) Get() (int, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for i := 0; i < u.n; i++ {
		id := u.base + i
		if u.used[id] != nil {
			continue
		}
		f, err := tryLock(fmt.Sprintf("uid-%d", id))
		if err != nil {
			return 0, fmt.Errorf("sandbox uid lock: %w", err)
		}
		if f == nil {
			continue
		}
		if len(ProcessesOf(id)) > 0 {
			_ = f.Close()
			continue
		}
		u.used[id] = f
		return id, nil
	}
	return 0, errors.New("sandbox: no free uid in the range")
}

// Put returns a uid. Its lock file stays (removing it would race with a
// process opening it); the lock is released.
func (u *UIDs) Put(id int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if f := u.used[id]; f != nil {
		_ = f.Close()
	}
	delete(u.used, id)
}

// Dir is one sandbox's host directory:
//
//	DIR/workspace  tmpfs, owned by the sandbox uid: /workspace inside
//	DIR/run        the host's, read-only: /run/agentplane inside (egress socket)
//	DIR/etc        passwd, group, hosts: read-only files inside
type Dir struct {
	Path      string
	UID       int
	mounted   bool
	workspace *os.Root
}

// Workspace, Run and Etc return host paths.
func (d *Dir) Workspace() string { return filepath.Join(d.Path, "workspace") }
func (d *Dir) Run() string       { return filepath.Join(d.Path, "run") }
func (d *Dir) Etc() string       { return filepath.Join(d.Path, "etc") }

// PrepareState creates the executor's state directory so that sandbox uids
// can traverse it (0711) but not list it.
func PrepareState(state string) error {
	if err := os.MkdirAll(state, 0o711); err != nil {
		return err
	}
	if err := os.Chmod(state, 0o711); err != nil {
		return err
	}
	// Every directory above it must let sandbox uids through.
	for d := filepath.Dir(filepath.Clean(state)); ; d = filepath.Dir(d) {
		st, err := os.Stat(d)
		if err != nil {
			return err
		}
		if st.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("sandbox state %s: sandbox uids cannot traverse %s (mode %v); make it o+x or put the state elsewhere", state, d, st.Mode().Perm())
		}
		if d == "/" || d == "." {
			return nil
		}
	}
}

// Create makes the directory of sandbox id under state, with a tmpfs
// workspace of workspaceMB (a plain directory if tmpfs cannot be mounted)
// owned by the host uid, and an /etc/passwd naming guestUID as the sandbox
// user.
func Create(state, id string, uid, guestUID, workspaceMB int) (*Dir, error) {
	d := &Dir{Path: filepath.Join(state, id), UID: uid}
	if err := os.Mkdir(d.Path, 0o711); err != nil {
		return nil, err
	}
	fail := func(err error) (*Dir, error) {
		_ = d.Remove()
		return nil, err
	}
	if err := os.Mkdir(d.Workspace(), 0o700); err != nil {
		return fail(err)
	}
	opts := fmt.Sprintf("size=%dm,mode=0700,uid=%d,gid=%d,nr_inodes=65536", workspaceMB, uid, uid)
	if err := unix.Mount("tmpfs", d.Workspace(), "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err == nil {
		d.mounted = true
	} else if err := os.Chown(d.Workspace(), uid, uid); err != nil {
		return fail(err)
	}
	// The run directory is the host's (root, 0755, mounted read-only):
	// the sandbox may connect to the egress socket in it, never create,
	// replace or remove anything there.
	if err := os.Mkdir(d.Run(), 0o755); err != nil {
		return fail(err)
	}
	if err := os.Mkdir(d.Etc(), 0o755); err != nil {
		return fail(err)
	}
	files := map[string]string{
		"passwd":        fmt.Sprintf("root:x:0:0:root:/root:/usr/sbin/nologin\nsandbox:x:%d:%d:sandbox:%s:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n", guestUID, guestUID, sandbox.GuestWorkspace),
		"group":         fmt.Sprintf("root:x:0:\nsandbox:x:%d:\nnogroup:x:65534:\n", guestUID),
		"hosts":         "127.0.0.1 localhost sandbox\n::1 localhost\n",
		"nsswitch.conf": "passwd: files\ngroup: files\nhosts: files\n",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(d.Etc(), name), []byte(body), 0o644); err != nil {
			return fail(err)
		}
	}
	root, err := os.OpenRoot(d.Workspace())
	if err != nil {
		return fail(err)
	}
	d.workspace = root
	return d, nil
}

// WriteFile writes data at the workspace-relative path p, creating parent
// directories, owned by the sandbox uid. Paths that leave the workspace,
// including through symlinks, are refused.
func (d *Dir) WriteFile(p string, data []byte) error {
	rel, err := relPath(p)
	if err != nil {
		return err
	}
	if dir := filepath.Dir(rel); dir != "." {
		if err := d.workspace.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		// Directories created here belong to the sandbox.
		parts := strings.Split(dir, "/")
		for i := range parts {
			_ = d.workspace.Lchown(strings.Join(parts[:i+1], "/"), d.UID, d.UID)
		}
	}
	f, err := d.workspace.OpenFile(rel, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|unix.O_NOFOLLOW, 0o644)
	if err != nil {
		return err
	}
	_, werr := io.Copy(f, bytes.NewReader(data))
	cerr := f.Close()
	if err := errors.Join(werr, cerr); err != nil {
		return err
	}
	return d.workspace.Lchown(rel, d.UID, d.UID)
}

// ReadFile reads the workspace-relative path p, at most limit bytes.
func (d *Dir) ReadFile(p string, limit int64) ([]byte, error) {
	rel, err := relPath(p)
	if err != nil {
		return nil, err
	}
	f, err := d.workspace.OpenFile(rel, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", p)
	}
	if st.Size() > limit {
		return nil, fmt.Errorf("%s is %d bytes, more than the %d allowed", p, st.Size(), limit)
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s is more than the %d bytes allowed", p, limit)
	}
	return data, nil
}

func relPath(p string) (string, error) {
	c := filepath.Clean(p)
	if p == "" || filepath.IsAbs(p) || c == "." || c == ".." || strings.HasPrefix(c, "../") || strings.ContainsRune(p, 0) {
		return "", fmt.Errorf("workspace path %q must be relative and stay inside the workspace", p)
	}
	return c, nil
}

// Remove unmounts the workspace and deletes the directory. It never follows
// symlinks (os.RemoveAll does not).
func (d *Dir) Remove() error {
	var errs []error
	if d.workspace != nil {
		_ = d.workspace.Close()
		d.workspace = nil
	}
	if d.mounted {
		if err := unix.Unmount(d.Workspace(), unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("unmount workspace: %w", err))
		} else {
			d.mounted = false
		}
	}
	if err := os.RemoveAll(d.Path); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Leftovers lists sandbox directories with the prefix under state.
func Leftovers(state, prefix string) []string {
	ents, _ := os.ReadDir(state)
	var out []string
	for _, e := range ents {
		if e.IsDir() && strings.HasPrefix(e.Name(), prefix) {
			out = append(out, e.Name())
		}
	}
	return out
}

// RemoveLeftover unmounts and removes a directory left by a crashed process.
func RemoveLeftover(state, id string) error {
	p := filepath.Join(state, id)
	_ = unix.Unmount(filepath.Join(p, "workspace"), unix.MNT_DETACH)
	return os.RemoveAll(p)
}

// Mounted reports whether path is a mount point (for leak checks).
func Mounted(path string) bool {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && f[4] == path {
			return true
		}
	}
	return false
}

// InstallGuest copies the wrapper binary into the state directory (so that
// sandbox uids can read it wherever it was built) and returns its path.
func InstallGuest(state, src string) (string, error) {
	data, err := os.ReadFile(src)
	if err != nil {
		return "", fmt.Errorf("guest binary: %w", err)
	}
	dst := filepath.Join(state, "guest")
	tmp := dst + ".tmp" + NewID("")
	if err := os.WriteFile(tmp, data, 0o755); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, dst); err != nil {
		return "", err
	}
	return dst, nil
}

// ProcessesOf lists live host processes whose real uid is uid. Zombies are
// left out: they hold nothing but a pid until init reaps them (bubblewrap's
// inner init is reparented to init when the outer process exits first).
func ProcessesOf(uid int) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid := 0
		if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err != nil {
			continue
		}
		data, err := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		if err != nil {
			continue
		}
		if strings.Contains(string(data), "\nState:\tZ") {
			continue
		}
		for _, line := range strings.Split(string(data), "\n") {
			if rest, ok := strings.CutPrefix(line, "Uid:"); ok {
				// Real, effective, saved and filesystem uid: any of them.
				for _, f := range strings.Fields(rest) {
					if f == strconv.Itoa(uid) {
						out = append(out, pid)
						break
					}
				}
				break
			}
		}
	}
	return out
}

// maxStateEntries bounds the files AdoptState hands over.
const maxStateEntries = 256

// AdoptState gives a state directory (sandbox.Spec.State) and the regular
// files directly in it to the sandbox uid, so that a program keeps its data
// across sandboxes, each of which runs as a uid of its own. The directory
// is opened without following links; a file with more than one link, a
// link and a subdirectory are left as they are (a sandbox that planted
// them gets nothing from the host by it).
func AdoptState(dir string, uid int) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("sandbox state %s: %w", dir, err)
	}
	f := os.NewFile(uintptr(fd), dir)
	defer f.Close()
	if err := unix.Fchown(fd, uid, uid); err != nil {
		return fmt.Errorf("sandbox state %s: %w", dir, err)
	}
	if err := unix.Fchmod(fd, 0o700); err != nil {
		return fmt.Errorf("sandbox state %s: %w", dir, err)
	}
	ents, err := f.ReadDir(maxStateEntries + 1)
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("sandbox state %s: %w", dir, err)
	}
	if len(ents) > maxStateEntries {
		return fmt.Errorf("sandbox state %s holds more than %d entries", dir, maxStateEntries)
	}
	for _, e := range ents {
		var st unix.Stat_t
		if err := unix.Fstatat(fd, e.Name(), &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("sandbox state %s: %w", dir, err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Nlink != 1 {
			continue
		}
		if err := unix.Fchownat(fd, e.Name(), uid, uid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("sandbox state %s: %w", dir, err)
		}
	}
	return nil
}
