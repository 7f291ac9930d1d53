package runs

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/agentplane/agentplane/engine"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/trace"
)

// maxMessage bounds a message added to a run.
const maxMessage = 64 << 10

// CancelRequest asks a run to stop.
type CancelRequest struct {
	RunID string
	// Tenant scopes the lookup ("" = any, for the CLI).
	Tenant string
	// By is the user asking; Reason is recorded with the cancel.
	By     string
	Reason string
}

// Cancel asks a run that has not ended to stop; it ends as cancelled at
// its next step boundary. It returns the run as it was when asked, and
// ErrRunEnded (wrapped) for a run that had ended.
func (s *Service) Cancel(ctx context.Context, r CancelRequest) (*store.Run, error) {
	run, err := s.live(ctx, r.RunID, r.Tenant)
	if err != nil {
		return nil, err
	}
	if len(r.Reason) > maxComment {
		return nil, fmt.Errorf("cancel: the reason is longer than %d bytes", maxComment)
	}
	// A secret pasted into the reason is recorded as its placeholder.
	reason, _ := trace.UserText(r.Reason)
	if err := s.o.Engine.Cancel(ctx, run.ID, engine.Cancel{By: r.By, Reason: reason}); err != nil {
		return nil, err
	}
	return run, nil
}

// MessageRequest adds a user's message to a run.
type MessageRequest struct {
	RunID string
	// Tenant scopes the lookup ("" = any, for the CLI).
	Tenant string
	Text   string
}

// Message adds text to a run that has not ended: the model reads it at the
// run's next step (a waiting run wakes). A secret pasted into it is
// replaced by its placeholder before it is sent.
func (s *Service) Message(ctx context.Context, r MessageRequest) (*store.Run, error) {
	if strings.TrimSpace(r.Text) == "" || len(r.Text) > maxMessage {
		return nil, errors.New("message: text is required, at most 64 KiB")
	}
	run, err := s.live(ctx, r.RunID, r.Tenant)
	if err != nil {
		return nil, err
	}
	payload, _ := trace.MessagePayload(r.Text)
	if err := s.o.Engine.Signal(ctx, run.ID, engine.Signal{Kind: trace.SignalMessage, Payload: payload}); err != nil {
		return nil, err
	}
	return run, nil
}

// live returns a run of tenant that has not ended.
func (s *Service) live(ctx context.Context, id, tenant string) (*store.Run, error) {
	run, err := s.run(ctx, id, tenant)
	if err != nil {
		return nil, err
	}
	if store.Terminal(run.Status) {
		return nil, fmt.Errorf("%w: %s is %s", ErrRunEnded, run.ID, run.Status)
	}
	return run, nil
}
