package tool

import (
	"fmt"
	"regexp"
	"strconv"
	"time"
)

// Rate-limit scopes: whose calls share one allowance.
const (
	RateScopeRun    = "run"
	RateScopeUser   = "user"
	RateScopeTenant = "tenant"
)

// maxRateN bounds the count of a rate limit; anything larger is no limit.
const maxRateN = 1_000_000_000

// RateLimit allows N calls of a tool per period Per, counted per Scope.
type RateLimit struct {
	N     int
	Per   time.Duration
	Scope string
}

var reRateLimit = regexp.MustCompile(`^\s*(\d+)\s*/\s*([a-z]+)(?:\s+per\s+([a-z]+))?\s*$`)

var rateUnits = map[string]time.Duration{
	"s": time.Second, "sec": time.Second, "second": time.Second,
	"min": time.Minute, "minute": time.Minute,
	"h": time.Hour, "hour": time.Hour,
	"day": 24 * time.Hour,
}

// ParseRateLimit parses a limit written as "N/unit [per scope]", for example
// "60/min per run", "10/s per user" or "1000/hour per tenant". Units are s,
// sec, second, min, minute, h, hour and day; scopes are run, user and
// tenant, and the scope defaults to run.
func ParseRateLimit(s string) (RateLimit, error) {
	m := reRateLimit.FindStringSubmatch(s)
	if m == nil {
		return RateLimit{}, fmt.Errorf("rate limit %q: want N/unit [per run|user|tenant], e.g. \"60/min per run\"", s)
	}
	n, err := strconv.Atoi(m[1])
	if err != nil || n < 1 || n > maxRateN {
		return RateLimit{}, fmt.Errorf("rate limit %q: count must be between 1 and %d", s, maxRateN)
	}
	per, ok := rateUnits[m[2]]
	if !ok {
		return RateLimit{}, fmt.Errorf("rate limit %q: unknown unit %q (use s, min, hour or day)", s, m[2])
	}
	scope := m[3]
	switch scope {
	case "":
		scope = RateScopeRun
	case RateScopeRun, RateScopeUser, RateScopeTenant:
	default:
		return RateLimit{}, fmt.Errorf("rate limit %q: unknown scope %q (use run, user or tenant)", s, scope)
	}
	return RateLimit{N: n, Per: per, Scope: scope}, nil
}

// String returns the limit in the form ParseRateLimit reads, with the
// shortest unit name and the scope always written.
func (r RateLimit) String() string {
	unit := ""
	switch r.Per {
	case time.Second:
		unit = "s"
	case time.Minute:
		unit = "min"
	case time.Hour:
		unit = "hour"
	case 24 * time.Hour:
		unit = "day"
	default:
		unit = r.Per.String()
	}
	return fmt.Sprintf("%d/%s per %s", r.N, unit, r.Scope)
}
