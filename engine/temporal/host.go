package temporal

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/activity"

	"github.com/agentplane/agentplane/engine"
	"github.com/agentplane/agentplane/store"
)

// ActivityAppend is the Temporal activity that appends to agentplane's
// event log: records with no effect of their own, signals, the waiting and
// final updates of the run's row.
const ActivityAppend = "agentplane.append"

// newEvent is an event the workflow asks an activity to append.
type newEvent struct {
	Type    string          `json:"type"`
	Step    int             `json:"step"`
	Payload json.RawMessage `json:"payload,omitempty"`
	// At is the event's time; zero: stamped when appended, by the
	// engine's clock.
	At time.Time `json:"at,omitzero"`
}

// appendIn appends Events after the log's event PrevSeq (hash PrevHash),
// with the run's row updated and the signals consumed in one transaction.
type appendIn struct {
	RunID    string     `json:"run_id"`
	Tenant   string     `json:"tenant"`
	PrevSeq  int64      `json:"prev_seq"`
	PrevHash string     `json:"prev_hash"`
	Events   []newEvent `json:"events,omitempty"`
	// Floor: no stamped event is earlier (a timer's deadline).
	Floor   time.Time        `json:"floor,omitzero"`
	Update  *store.RunUpdate `json:"update,omitempty"`
	Consume []int64          `json:"consume,omitempty"`
	// ConsumeAt[i] is the index in Events of the event recording the
	// signal Consume[i].
	ConsumeAt []int `json:"consume_at,omitempty"`
}

// appended is what an append recorded: each event's time, the new head of
// the chain and the last event's payload (an activity's result).
type appended struct {
	At      []time.Time     `json:"at"`
	Head    string          `json:"head"`
	Payload json.RawMessage `json:"payload,omitempty"`
}

// executeIn runs a named activity on Input and appends Record, whose last
// event takes the activity's result as its payload.
type executeIn struct {
	Record appendIn        `json:"record"`
	Step   int             `json:"step"`
	Input  json.RawMessage `json:"input"`
}

// host runs the activities of one engine on its workers.
type host struct {
	st    store.Store
	acts  *engine.Activities
	clock func() time.Time
}

// appendActivity is ActivityAppend.
func (h *host) appendActivity(ctx context.Context, in appendIn) (appended, error) {
	return attempt(ctx, func(ctx context.Context) (appended, error) {
		if out, done, err := h.recorded(ctx, in); done || err != nil {
			return out, err
		}
		return h.commit(ctx, in)
	})
}

// executeActivity is the Temporal activity registered under the name of
// the engine activity name: it runs it once its result is not recorded yet,
// and appends the result.
func (h *host) executeActivity(name string) func(ctx context.Context, in executeIn) (appended, error) {
	return func(ctx context.Context, in executeIn) (appended, error) {
		return attempt(ctx, func(ctx context.Context) (appended, error) {
			if len(in.Record.Events) == 0 {
				return appended{}, NonRetryableError(fmt.Errorf("activity %s: no event records its result", name))
			}
			// A retried attempt whose predecessor recorded the result
			// returns it: the effect does not run again.
			if out, done, err := h.recorded(ctx, in.Record); done || err != nil {
				return out, err
			}
			act, ok := h.acts.Lookup(name)
			if !ok {
				return appended{}, NonRetryableError(fmt.Errorf("activity %q is not registered with this worker", name))
			}
			ai := activity.GetInfo(ctx)
			info := engine.ActivityInfo{RunID: in.Record.RunID, Activity: name, Step: in.Step, Attempt: int(ai.Attempt)}
			for i, ev := range in.Record.Events[:len(in.Record.Events)-1] {
				info.Pending = append(info.Pending, engine.Event{Seq: in.Record.PrevSeq + 1 + int64(i), Type: ev.Type, Step: ev.Step, At: ev.At, Payload: ev.Payload})
			}
			actx := engine.WithActivityInfo(ctx, info)
			payload, err := act.InvokeJSON(actx, in.Input)
			if err != nil {
				if ctx.Err() != nil {
					return appended{}, ctx.Err()
				}
				if engine.IsRetryable(err) {
					return appended{}, RetryableError(err)
				}
				return appended{}, NonRetryableError(err)
			}
			in.Record.Events[len(in.Record.Events)-1].Payload = payload
			return h.commit(ctx, in.Record)
		})
	}
}

// attempt runs fn, heartbeating when the activity has a heartbeat
// timeout. An attempt whose context ended (its worker stops, or the server
// gave up on it) reports nothing, as a crashed worker would: the server
// retries it after its timeout, and the retry finds in the log whatever
// this attempt recorded.
func attempt(ctx context.Context, fn func(context.Context) (appended, error)) (appended, error) {
	var out appended
	var err error
	if activity.GetInfo(ctx).HeartbeatTimeout > 0 {
		out, err = Heartbeat(ctx, 0, nil, fn)
	} else {
		out, err = fn(ctx)
	}
	if err != nil && ctx.Err() != nil {
		return appended{}, activity.ErrResultPending
	}
	return out, err
}

// pendingActivity returns the signals stored for runID and not consumed
// (but a replay's instructions, which the loop reads itself), in the order
// they were stored: the local activity of a run's first workflow task.
func (h *host) pendingActivity(ctx context.Context, runID string) ([]sigMsg, error) {
	pending, err := h.st.PendingSignals(ctx, runID)
	if err != nil {
		return nil, storeError(fmt.Errorf("pending signals of run %s: %w", runID, err))
	}
	var out []sigMsg
	for _, sg := range pending {
		if sg.Kind != engine.SignalReplay {
			out = append(out, sigMsg{ID: sg.ID, Kind: sg.Kind, Payload: sg.Payload})
		}
	}
	return out, nil
}

// recorded reports whether the events of in are in the log already (an
// earlier attempt appended them and died before the server heard of it),
// returning what was recorded.
func (h *host) recorded(ctx context.Context, in appendIn) (appended, bool, error) {
	if activity.IsActivity(ctx) && activity.GetInfo(ctx).Attempt <= 1 {
		// No earlier attempt: nothing of this activity can be in the log
		// (an append that finds it there anyway conflicts, and commit
		// looks then).
		return appended{}, false, nil
	}
	return h.lookup(ctx, in)
}

// lookup is recorded without the first attempt's shortcut.
func (h *host) lookup(ctx context.Context, in appendIn) (appended, bool, error) {
	run, err := h.st.GetRun(ctx, in.RunID)
	if err != nil {
		return appended{}, false, storeError(err)
	}
	n := int64(len(in.Events))
	switch {
	case run.LastSeq == in.PrevSeq:
		return appended{}, false, nil
	case n > 0 && run.LastSeq >= in.PrevSeq+n:
	default:
		return appended{}, false, NonRetryableError(fmt.Errorf("run %s: the log holds %d events where the workflow expects %d: it was written by another writer, or the history diverged from it",
			in.RunID, run.LastSeq, in.PrevSeq))
	}
	evs, err := h.st.Events(ctx, in.RunID, in.PrevSeq, int(n))
	if err != nil {
		return appended{}, false, storeError(err)
	}
	if int64(len(evs)) != n || hex.EncodeToString(evs[0].PrevHash[:]) != in.PrevHash {
		return appended{}, false, NonRetryableError(fmt.Errorf("run %s: the events after seq %d are not the ones this workflow appends", in.RunID, in.PrevSeq))
	}
	out := appended{At: make([]time.Time, n)}
	for i := range evs {
		if evs[i].Type != in.Events[i].Type || evs[i].Step != in.Events[i].Step {
			return appended{}, false, NonRetryableError(fmt.Errorf("%w: run %s seq %d recorded %s (step %d), the workflow appends %s (step %d)",
				engine.ErrNondeterminism, in.RunID, evs[i].Seq, evs[i].Type, evs[i].Step, in.Events[i].Type, in.Events[i].Step))
		}
		out.At[i] = evs[i].At
	}
	last := evs[len(evs)-1]
	out.Head, out.Payload = hex.EncodeToString(last.Hash[:]), last.Payload
	return out, true, nil
}

// checkSignals refuses to record a signal that is not, byte for byte, the
// pending signal agentplane stored under its id: a Temporal signal sent
// around agentplane (by anyone who may signal workflows in the namespace)
// names no stored signal, or another one, and fails the append rather than
// entering the log.
func (h *host) checkSignals(ctx context.Context, in appendIn) error {
	if len(in.Consume) == 0 {
		return nil
	}
	if len(in.ConsumeAt) != len(in.Consume) {
		return NonRetryableError(fmt.Errorf("run %s: %d signals consumed, %d recorded", in.RunID, len(in.Consume), len(in.ConsumeAt)))
	}
	pending, err := h.st.PendingSignals(ctx, in.RunID)
	if err != nil {
		return storeError(err)
	}
	byID := make(map[int64]*store.Signal, len(pending))
	for _, sg := range pending {
		byID[sg.ID] = sg
	}
	for i, id := range in.Consume {
		sg, at := byID[id], in.ConsumeAt[i]
		if sg == nil || at < 0 || at >= len(in.Events) || in.Events[at].Type != "signal" ||
			!bytes.Equal(in.Events[at].Payload, engine.SignalEventPayload(sg.Kind, sg.Payload)) {
			return NonRetryableError(fmt.Errorf("run %s: a signal the workflow received (id %d) is not a pending signal agentplane stored: refused", in.RunID, id))
		}
	}
	return nil
}

// commit appends the events of in durably, stamping those without a time.
func (h *host) commit(ctx context.Context, in appendIn) (appended, error) {
	prev, err := decodeHash(in.PrevHash)
	if err != nil {
		return appended{}, NonRetryableError(err)
	}
	if err := h.checkSignals(ctx, in); err != nil {
		return appended{}, err
	}
	now := h.clock().UTC().Truncate(time.Microsecond)
	floor := in.Floor
	evs := make([]store.Event, len(in.Events))
	out := appended{At: make([]time.Time, len(in.Events))}
	head := prev
	for i, ne := range in.Events {
		at := ne.At
		if at.IsZero() {
			at = now
		}
		// The log's clock never runs backwards.
		if at.Before(floor) {
			at = floor
		}
		floor = at
		evs[i] = store.Event{RunID: in.RunID, Seq: in.PrevSeq + int64(i) + 1, Type: ne.Type, Step: ne.Step, At: at, Payload: ne.Payload, PrevHash: head}
		evs[i].Hash = store.ChainHash(head, &evs[i])
		head = evs[i].Hash
		out.At[i] = at
	}
	err = h.st.Append(ctx, store.AppendRequest{RunID: in.RunID, Events: evs, Durable: true, Update: in.Update, ConsumeSignals: in.Consume})
	if errors.Is(err, store.ErrConflict) {
		// A concurrent attempt of the same activity may have won.
		if got, done, rerr := h.lookup(ctx, in); done || rerr != nil {
			return got, rerr
		}
	}
	if err != nil {
		return appended{}, storeError(fmt.Errorf("append to run %s: %w", in.RunID, err))
	}
	out.Head = hex.EncodeToString(head[:])
	if n := len(evs); n > 0 {
		out.Payload = evs[n-1].Payload
	}
	return out, nil
}

// storeError classifies a store failure: a missing run, a conflict or a
// fenced append fail for good; anything else (an unavailable database) is
// retried.
func storeError(err error) error {
	if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrLeaseLost) || errors.Is(err, store.ErrCorrupt) {
		return NonRetryableError(err)
	}
	return RetryableError(err)
}

func decodeHash(s string) ([32]byte, error) {
	var h [32]byte
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != len(h) {
		return h, fmt.Errorf("chain head %q is not a sha256 in hex", s)
	}
	copy(h[:], b)
	return h, nil
}
