package model

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// RetryableStatus reports whether an HTTP status from a model API means the
// same request may succeed later: 408 (request timeout), 409 (conflict, used
// for lock timeouts), 429 (rate limited) and every 5xx, including
// Anthropic's 529 (overloaded). Every other status (400 bad request, 401 and
// 403 authentication, 404 unknown model, 413 too large, 422) will fail the
// same way every time.
func RetryableStatus(status int) bool {
	switch {
	case status == http.StatusRequestTimeout, status == http.StatusConflict, status == http.StatusTooManyRequests:
		return true
	case status >= 500 && status <= 599:
		return true
	}
	return false
}

// maxRetryAfterHeader bounds what RetryAfter will believe: a header asking
// for more than a day is treated as that long (the gateway then declines to
// wait at all).
const maxRetryAfterHeader = 24 * time.Hour

// RetryAfter reads the wait a response asks for: the retry-after-ms header
// (milliseconds, as Anthropic and OpenAI send it), else Retry-After in
// seconds or as an HTTP date relative to now. It returns 0 when there is
// none or it cannot be parsed.
func RetryAfter(h http.Header, now time.Time) time.Duration {
	if h == nil {
		return 0
	}
	if v := strings.TrimSpace(h.Get("Retry-After-Ms")); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms > 0 { // NaN fails ms > 0
			return seconds(ms / 1000)
		}
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil {
		if !(s > 0) { // also NaN
			return 0
		}
		return seconds(s)
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 {
			return clampRetryAfter(d)
		}
	}
	return 0
}

// seconds converts a positive number of seconds (possibly +Inf) into a
// duration of at most maxRetryAfterHeader, without overflowing.
func seconds(s float64) time.Duration {
	if s >= maxRetryAfterHeader.Seconds() {
		return maxRetryAfterHeader
	}
	return time.Duration(s * float64(time.Second))
}

func clampRetryAfter(d time.Duration) time.Duration {
	return min(d, maxRetryAfterHeader)
}
