package sandbox

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"time"
	"unicode/utf8"
)

// The wrapper inside a sandbox writes a sidecar report after each command:
// what it saw of files, network attempts, packages and memory. It is
// written next to code the model wrote, so it is a claim, never telemetry:
// the host reads at most MaxSidecarBytes, refuses unknown fields and bad
// values, and keeps it apart from what the host measured itself.
const (
	SidecarVersion  = 1
	MaxSidecarBytes = 256 << 10

	maxSidecarFiles    = 1000
	maxSidecarNetwork  = 1000
	maxSidecarPackages = 500
	maxSidecarPath     = 1024
	maxSidecarName     = 256
)

// Sidecar is the wrapper's report of one command.
type Sidecar struct {
	Version int `json:"version"`
	// StartedAt and EndedAt are the wrapper's clock: useful to spot clock
	// trouble, never to build the timeline.
	StartedAt time.Time `json:"started_at"`
	EndedAt   time.Time `json:"ended_at"`
	// ExecMS is how long the wrapper says the program ran.
	ExecMS   int64  `json:"exec_ms"`
	ExitCode int    `json:"exit_code"`
	Signal   string `json:"signal,omitempty"`
	// PeakMemoryBytes is the largest resident set of the program's
	// processes, as the wrapper saw it.
	PeakMemoryBytes int64 `json:"peak_memory_bytes"`
	// Files created, modified or deleted in the workspace.
	Files          []SidecarFile `json:"files"`
	FilesTruncated bool          `json:"files_truncated,omitempty"`
	// Network attempts the wrapper's relay saw, allowed or denied.
	Network []SidecarNet `json:"network"`
	// Packages installed into the workspace during the command.
	Packages []SidecarPackage `json:"packages"`
}

// SidecarFile is one changed file of the workspace.
type SidecarFile struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	Change string `json:"change"` // created | modified | deleted
}

// SidecarNet is one outbound attempt through the sandbox's relay.
type SidecarNet struct {
	Host    string `json:"host"`
	Port    int    `json:"port"`
	Allowed bool   `json:"allowed"`
	Status  int    `json:"status,omitempty"` // the proxy's HTTP status
}

// SidecarPackage is one package found installed in the workspace.
type SidecarPackage struct {
	Manager string `json:"manager"` // pip | npm
	Name    string `json:"name"`
	Version string `json:"version,omitempty"`
}

// ErrSidecarTooLarge is returned for a sidecar over MaxSidecarBytes.
var ErrSidecarTooLarge = errors.New("sidecar report larger than the limit")

// ParseSidecar parses and validates a sidecar report: one JSON object of
// the current version, no unknown fields, every value in range, paths
// relative and clean, text valid UTF-8 without control characters.
func ParseSidecar(data []byte) (*Sidecar, error) {
	if len(data) > MaxSidecarBytes {
		return nil, fmt.Errorf("%w (%d bytes)", ErrSidecarTooLarge, len(data))
	}
	if !utf8.Valid(data) {
		return nil, errors.New("sidecar report is not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var s Sidecar
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("sidecar report: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("sidecar report: trailing data after the object")
	}
	if err := s.validate(); err != nil {
		return nil, fmt.Errorf("sidecar report: %w", err)
	}
	return &s, nil
}

func (s *Sidecar) validate() error {
	if s.Version != SidecarVersion {
		return fmt.Errorf("version %d, want %d", s.Version, SidecarVersion)
	}
	if s.StartedAt.IsZero() || s.EndedAt.Before(s.StartedAt) {
		return errors.New("bad started_at/ended_at")
	}
	if s.ExecMS < 0 || s.ExecMS > int64(24*time.Hour/time.Millisecond) {
		return fmt.Errorf("exec_ms %d out of range", s.ExecMS)
	}
	if s.ExitCode < 0 || s.ExitCode > 255 {
		return fmt.Errorf("exit_code %d out of range", s.ExitCode)
	}
	if s.Signal != "" && !plainName(s.Signal, 32) {
		return errors.New("bad signal name")
	}
	if s.PeakMemoryBytes < 0 || s.PeakMemoryBytes > 1<<40 {
		return errors.New("peak_memory_bytes out of range")
	}
	if len(s.Files) > maxSidecarFiles || len(s.Network) > maxSidecarNetwork || len(s.Packages) > maxSidecarPackages {
		return errors.New("too many entries")
	}
	for i, f := range s.Files {
		if !cleanRelPath(f.Path) {
			return fmt.Errorf("files[%d]: path must be relative, clean and printable", i)
		}
		if f.Size < 0 || f.Size > 1<<40 {
			return fmt.Errorf("files[%d]: size out of range", i)
		}
		switch f.Change {
		case "created", "modified", "deleted":
		default:
			return fmt.Errorf("files[%d]: change must be created, modified or deleted", i)
		}
	}
	for i, n := range s.Network {
		if !plainName(n.Host, maxSidecarName) || n.Port < 1 || n.Port > 65535 || n.Status < 0 || n.Status > 999 {
			return fmt.Errorf("network[%d]: bad host, port or status", i)
		}
	}
	for i, p := range s.Packages {
		if (p.Manager != "pip" && p.Manager != "npm") || !plainName(p.Name, maxSidecarName) || (p.Version != "" && !plainName(p.Version, 64)) {
			return fmt.Errorf("packages[%d]: bad manager, name or version", i)
		}
	}
	return nil
}

// plainName accepts short printable text without spaces or controls.
func plainName(s string, max int) bool {
	if s == "" || len(s) > max {
		return false
	}
	for _, r := range s {
		if r <= ' ' || r == 0x7f || (r >= 0x80 && r < 0xa0) || r == utf8.RuneError {
			return false
		}
	}
	return true
}

func cleanRelPath(p string) bool {
	if p == "" || len(p) > maxSidecarPath || strings.HasPrefix(p, "/") || path.Clean(p) != p || p == ".." || strings.HasPrefix(p, "../") {
		return false
	}
	for _, r := range p {
		if r < ' ' || r == 0x7f || (r >= 0x80 && r < 0xa0) || r == utf8.RuneError {
			return false
		}
	}
	return true
}
