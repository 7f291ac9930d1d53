package model

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Error is a failed model call carrying its classification, so that the
// gateway's retry policy can decide without parsing messages. Providers wrap
// transport and API failures in an *Error; an error that is not an *Error
// (anywhere in its chain) is treated as not retryable.
type Error struct {
	// Retryable says whether the same request may succeed if sent again
	// (rate limits, overload, a dropped connection), as opposed to a request
	// that will fail the same way every time (bad request, auth, a script
	// that has run out of turns).
	Retryable bool
	// StatusCode is the provider's HTTP status, or 0 when there was none.
	StatusCode int
	// RetryAfter is the wait the provider asked for, or 0 when it named none.
	RetryAfter time.Duration
	// Err is the underlying error.
	Err error
}

func (e *Error) Error() string {
	msg := "model call failed"
	if e.Err != nil {
		msg = e.Err.Error()
	}
	if e.StatusCode != 0 {
		msg = fmt.Sprintf("%s (status %d)", msg, e.StatusCode)
	}
	return msg
}

// Unwrap returns the underlying error.
func (e *Error) Unwrap() error { return e.Err }

// IsRetryable reports whether err, or an error it wraps, is an *Error marked
// Retryable. Context cancellation and deadlines are never retryable: the
// caller has given up.
func IsRetryable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var e *Error
	return errors.As(err, &e) && e.Retryable
}

// ErrUnknownAlias is wrapped by Gateway.Complete when asked for an alias it
// was not configured with.
var ErrUnknownAlias = errors.New("unknown model alias")

// ErrInvalidResponse is wrapped by ValidateResponse (and so by
// Gateway.Complete) when a provider's answer breaks the response contract:
// a malformed tool call, an oversized text, an unknown part type.
var ErrInvalidResponse = errors.New("invalid model response")
