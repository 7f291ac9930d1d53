// Package retention applies each tenant's retention policy and erasure
// requests to what agentplane keeps about runs (docs/design/retention.md):
//
//   - Purge removes the payloads (blobs) of runs past their payload TTL,
//     keeping failed runs' longer and a deterministic sample of the others
//     longer still, and deletes runs past their metadata TTL. A blob
//     another run still keeps is never removed: blobs are content
//     addressed and shared between a tenant's runs.
//   - Erase removes one run, or every run of one user, on request: the
//     data keys of their payloads are destroyed (so every copy, backups
//     included, is unreadable) and their events' payloads are replaced,
//     keeping the hash chain verifiable, with an erasure record.
//
// Event logs keep each payload's hash and size: `trace verify` passes
// after both, and says what was removed and erased.
package retention

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"time"

	"github.com/agentplane/agentplane/store"
)

// Period is a calendar length: years, months and days, added to a time
// with time.AddDate (13 months from 31 January is 3 March of the next
// year but one; a month is never "30 days"). The zero Period means
// forever.
type Period struct {
	Years, Months, Days int
}

var rePeriod = regexp.MustCompile(`^([0-9]{1,5})(d|w|mo|y)$`)

// ParsePeriod reads "30d", "6w", "13mo" or "1y"; "" is the zero Period
// (kept forever).
func ParsePeriod(s string) (Period, error) {
	if s == "" {
		return Period{}, nil
	}
	m := rePeriod.FindStringSubmatch(s)
	if m == nil {
		return Period{}, fmt.Errorf("%q: want a whole number and a unit, d (days), w (weeks), mo (months) or y (years): 30d, 13mo", s)
	}
	n, _ := strconv.Atoi(m[1])
	if n == 0 {
		return Period{}, fmt.Errorf("%q: a retention period of zero would remove everything at once; leave it out to keep forever", s)
	}
	switch m[2] {
	case "d":
		return Period{Days: n}, nil
	case "w":
		return Period{Days: 7 * n}, nil
	case "mo":
		return Period{Months: n}, nil
	}
	return Period{Years: n}, nil
}

// Forever reports whether p is the zero Period.
func (p Period) Forever() bool { return p == Period{} }

// From returns when a period starting at t ends (the zero time for
// Forever).
func (p Period) From(t time.Time) time.Time {
	if p.Forever() {
		return time.Time{}
	}
	return t.AddDate(p.Years, p.Months, p.Days)
}

// String writes p as ParsePeriod reads it ("" for Forever).
func (p Period) String() string {
	switch {
	case p.Forever():
		return ""
	case p.Years != 0 && p.Months == 0 && p.Days == 0:
		return strconv.Itoa(p.Years) + "y"
	case p.Months != 0 && p.Years == 0 && p.Days == 0:
		return strconv.Itoa(p.Months) + "mo"
	}
	return strconv.Itoa(p.Days+30*p.Months+365*p.Years) + "d"
}

// longest is a bound that compares periods of different units: the
// latest end from a fixed start.
func (p Period) longest() time.Time {
	if p.Forever() {
		return time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	return p.From(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC))
}

// Config is a tenant's retention as written in the API config
// (api.TenantConfig.Retention):
//
//	retention:
//	  payload_ttl: 30d           # payloads of ended runs; omit to keep them
//	  failed_payload_ttl: 180d   # failed runs' payloads (default payload_ttl)
//	  sample_rate: 0.05          # share of the other runs kept longer, by run id
//	  sampled_payload_ttl: 13mo  # how long (default: as long as the run)
//	  metadata_ttl: 13mo         # the runs themselves; omit to keep them
type Config struct {
	PayloadTTL        string  `yaml:"payload_ttl" json:"payload_ttl,omitempty"`
	FailedPayloadTTL  string  `yaml:"failed_payload_ttl" json:"failed_payload_ttl,omitempty"`
	SampleRate        float64 `yaml:"sample_rate" json:"sample_rate,omitempty"`
	SampledPayloadTTL string  `yaml:"sampled_payload_ttl" json:"sampled_payload_ttl,omitempty"`
	MetadataTTL       string  `yaml:"metadata_ttl" json:"metadata_ttl,omitempty"`
}

// Policy is a validated Config. The zero Policy keeps everything.
type Policy struct {
	PayloadTTL        Period
	FailedPayloadTTL  Period
	SampleRate        float64
	SampledPayloadTTL Period
	MetadataTTL       Period
}

// Policy validates c: every period parses; failed and sampled runs keep
// their payloads at least as long as the others; no payload outlives its
// run; the sample rate is a share between 0 and 1 and has something to
// keep longer than.
func (c Config) Policy() (Policy, error) {
	var (
		p    Policy
		errs []error
		err  error
	)
	parse := func(name, s string) Period {
		v, err := ParsePeriod(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
		return v
	}
	p.PayloadTTL = parse("payload_ttl", c.PayloadTTL)
	p.FailedPayloadTTL = parse("failed_payload_ttl", c.FailedPayloadTTL)
	p.SampledPayloadTTL = parse("sampled_payload_ttl", c.SampledPayloadTTL)
	p.MetadataTTL = parse("metadata_ttl", c.MetadataTTL)
	p.SampleRate = c.SampleRate
	if err = errors.Join(errs...); err != nil {
		return Policy{}, err
	}
	if c.FailedPayloadTTL == "" {
		p.FailedPayloadTTL = p.PayloadTTL
	}
	if c.SampledPayloadTTL == "" {
		p.SampledPayloadTTL = p.MetadataTTL
	}
	if math.IsNaN(c.SampleRate) || c.SampleRate < 0 || c.SampleRate > 1 {
		errs = append(errs, fmt.Errorf("sample_rate %v: want a share between 0 and 1 (0.05 keeps one run in twenty)", c.SampleRate))
	}
	if p.PayloadTTL.Forever() {
		for name, v := range map[string]string{"failed_payload_ttl": c.FailedPayloadTTL, "sampled_payload_ttl": c.SampledPayloadTTL} {
			if v != "" {
				errs = append(errs, fmt.Errorf("%s without payload_ttl: every payload is kept anyway; set payload_ttl or drop %s", name, name))
			}
		}
		if c.SampleRate != 0 {
			errs = append(errs, errors.New("sample_rate without payload_ttl: every payload is kept anyway; set payload_ttl or drop sample_rate"))
		}
	}
	if p.FailedPayloadTTL.longest().Before(p.PayloadTTL.longest()) {
		errs = append(errs, fmt.Errorf("failed_payload_ttl %s is shorter than payload_ttl %s: failed runs' payloads are kept at least as long as the others", c.FailedPayloadTTL, c.PayloadTTL))
	}
	if c.SampleRate > 0 && p.SampledPayloadTTL.longest().Before(p.PayloadTTL.longest()) {
		errs = append(errs, fmt.Errorf("sampled_payload_ttl %s is shorter than payload_ttl %s: sampled runs are the ones kept longer", c.SampledPayloadTTL, c.PayloadTTL))
	}
	if !p.MetadataTTL.Forever() {
		for name, v := range map[string]Period{"payload_ttl": p.PayloadTTL, "failed_payload_ttl": p.FailedPayloadTTL, "sampled_payload_ttl": p.SampledPayloadTTL} {
			if v.longest().After(p.MetadataTTL.longest()) {
				errs = append(errs, fmt.Errorf("%s %s outlives metadata_ttl %s: a payload is removed with its run at the latest; shorten it or lengthen metadata_ttl", name, v, c.MetadataTTL))
			}
		}
	}
	if err = errors.Join(errs...); err != nil {
		return Policy{}, err
	}
	return p, nil
}

// Sampled reports whether run id falls in the kept share rate: the first
// 8 bytes of sha256("agentplane retention sample\x00" + id) read as a
// fraction of 2^64, below rate. The same run is always in or out, on
// every process, and the share is rate over many runs.
func Sampled(runID string, rate float64) bool {
	if rate <= 0 {
		return false
	}
	if rate >= 1 {
		return true
	}
	sum := sha256.Sum256([]byte("agentplane retention sample\x00" + runID))
	return float64(binary.BigEndian.Uint64(sum[:8]))/float64(math.MaxUint64) < rate
}

// Rule says which of a policy's rules applies to a run.
const (
	RuleFailed  = "failed"
	RuleSampled = "sampled"
	RuleDefault = "default"
)

// Decision is what a policy says about one run at one time.
type Decision struct {
	Rule string
	// PayloadsUntil and DeleteAt are when the run's payloads expire and
	// when the run itself goes (zero: never).
	PayloadsUntil, DeleteAt time.Time
	// ExpirePayloads and Delete are whether that time has come.
	ExpirePayloads, Delete bool
}

// Decide applies p to run r at now. A run that has not ended keeps
// everything; an ended run's clock starts when it ended (its UpdatedAt).
func (p Policy) Decide(r *store.Run, now time.Time) Decision {
	d := Decision{Rule: RuleDefault}
	ttl := p.PayloadTTL
	switch {
	case r.Status == store.StatusFailed:
		d.Rule, ttl = RuleFailed, p.FailedPayloadTTL
	case Sampled(r.ID, p.SampleRate):
		d.Rule, ttl = RuleSampled, p.SampledPayloadTTL
	}
	if !store.Terminal(r.Status) {
		return d
	}
	d.PayloadsUntil, d.DeleteAt = ttl.From(r.UpdatedAt), p.MetadataTTL.From(r.UpdatedAt)
	d.ExpirePayloads = !d.PayloadsUntil.IsZero() && !now.Before(d.PayloadsUntil)
	d.Delete = !d.DeleteAt.IsZero() && !now.Before(d.DeleteAt)
	if d.Delete {
		d.ExpirePayloads = true
	}
	return d
}
