package api

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/agentplane/agentplane/internal/platform"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/trace"
)

func toEvent(ev *store.Event) Event {
	p := json.RawMessage(ev.Payload)
	if len(p) == 0 {
		p = json.RawMessage("null")
	}
	return Event{RunID: ev.RunID, Seq: ev.Seq, Type: ev.Type, Step: ev.Step, At: ev.At, Payload: p,
		PrevHash: hex.EncodeToString(ev.PrevHash[:]), Hash: hex.EncodeToString(ev.Hash[:])}
}

// terminalEvent reports whether typ ends a run's log.
func terminalEvent(typ string) bool { return typ == trace.EvRunCompleted || typ == trace.EvRunFailed }

// frame is one log event encoded as a public stream SSE message, with and
// without the internal log event (include=log).
type frame struct {
	seq     int64
	step    int
	typ     string // the public type
	status  string // the run's status, for a terminal event
	data    []byte
	withLog []byte
}

func encodeFrame(ev *store.Event) frame {
	enc := func(withLog bool) []byte {
		var b bytes.Buffer
		pub := publicEvent(ev, withLog)
		b.WriteString("id: ")
		b.WriteString(strconv.FormatInt(ev.Seq, 10))
		b.WriteString("\nevent: ")
		b.WriteString(pub.Type)
		b.WriteString("\ndata: ")
		e := json.NewEncoder(&b) // one line: JSON never holds a raw newline
		e.SetEscapeHTML(false)
		_ = e.Encode(pub)
		b.WriteString("\n")
		return b.Bytes()
	}
	fr := frame{seq: ev.Seq, step: ev.Step, data: enc(false), withLog: enc(true)}
	fr.typ, _ = publicData(ev)
	if terminalEvent(ev.Type) {
		var e trace.RunEnded
		_ = json.Unmarshal(ev.Payload, &e)
		fr.status = e.Status
	}
	return fr
}

func (fr frame) bytes(withLog bool) []byte {
	if withLog {
		return fr.withLog
	}
	return fr.data
}

// hub fans a run's committed events out to its SSE subscribers. Each run
// with subscribers has one feed that reads new events from the store once
// and keeps them encoded, so a hundred clients of one run cost one query
// per batch. Workers in this process wake the feed after each append
// (notify); a store with a change feed (PostgreSQL's LISTEN/NOTIFY) wakes
// it for appends committed by any process (changed), and a slow poll
// covers what neither announced (another process's workers on SQLite, a
// feed reconnecting). Only committed events are read, so a stream never
// shows an event a crash could undo.
type hub struct {
	st   store.Store
	log  *slog.Logger
	poll time.Duration

	mu    sync.Mutex
	feeds map[string]*feed
}

// feedCache is how many encoded events a feed keeps; a subscriber further
// behind reads the store directly.
const feedCache = 4096

// defaultStreamPoll is how often feeds look for events that no
// notification announced (Options.StreamPoll).
const defaultStreamPoll = time.Second

// announceGrace is how long a feed keeps looking, every 5 ms, for announced
// events that are not committed yet.
const announceGrace = 2 * time.Second

type feed struct {
	runID string
	refs  int // guarded by hub.mu
	kick  chan struct{}

	mu     sync.Mutex
	frames []frame // contiguous, ending at last
	last   int64   // highest seq read
	want   int64   // highest seq announced
	wake   chan struct{}
	closed bool
}

func newHub(st store.Store, log *slog.Logger, poll time.Duration) *hub {
	return &hub{st: st, log: log, poll: poll, feeds: map[string]*feed{}}
}

// changed is the hub's listener of the store's change feed.
func (h *hub) changed(c store.Change) {
	if c.RunID != "" {
		h.notify(c.RunID, c.Seq)
		return
	}
	// Changes may have been missed: every feed reads its run again.
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, f := range h.feeds {
		f.poke()
	}
}

// run polls the feeds that have subscribers until ctx ends.
func (h *hub) run(ctx context.Context) {
	t := time.NewTicker(h.poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			h.mu.Lock()
			for _, f := range h.feeds {
				f.shut()
				f.poke()
			}
			h.mu.Unlock()
			return
		case <-t.C:
			h.mu.Lock()
			for _, f := range h.feeds {
				f.poke()
			}
			h.mu.Unlock()
		}
	}
}

// notify announces that run has events up to seq (0: its status changed).
func (h *hub) notify(runID string, seq int64) {
	h.mu.Lock()
	f := h.feeds[runID]
	h.mu.Unlock()
	if f == nil {
		return
	}
	f.mu.Lock()
	if seq > f.want {
		f.want = seq
	}
	f.mu.Unlock()
	f.poke()
}

func (f *feed) poke() {
	select {
	case f.kick <- struct{}{}:
	default:
	}
}

func (f *feed) shut() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.closed {
		f.closed = true
		close(f.wake)
		f.wake = make(chan struct{})
	}
}

// subscribe returns the run's feed, starting it at after if it is new.
func (h *hub) subscribe(runID string, after int64) *feed {
	h.mu.Lock()
	defer h.mu.Unlock()
	f := h.feeds[runID]
	if f == nil {
		f = &feed{runID: runID, kick: make(chan struct{}, 1), last: after, want: after, wake: make(chan struct{})}
		h.feeds[runID] = f
		go h.fetcher(f)
	}
	f.refs++
	f.poke()
	return f
}

func (h *hub) unsubscribe(f *feed) {
	h.mu.Lock()
	defer h.mu.Unlock()
	f.refs--
	if f.refs == 0 {
		delete(h.feeds, f.runID)
		f.shut()
		f.poke()
	}
}

// fetcher reads new events of one feed until it has no subscribers.
func (h *hub) fetcher(f *feed) {
	retry := time.NewTimer(time.Hour)
	defer retry.Stop()
	var waitingSince time.Time // when the feed first fell behind an announcement
	for {
		select {
		case <-f.kick:
		case <-retry.C:
		}
		f.mu.Lock()
		closed, after := f.closed, f.last
		f.mu.Unlock()
		if closed {
			return
		}
		evs, err := h.st.Events(context.Background(), f.runID, after, 1000)
		if err != nil {
			h.log.Warn("stream feed", "run", f.runID, "err", err)
		}
		f.mu.Lock()
		for i := range evs {
			f.frames = append(f.frames, encodeFrame(&evs[i]))
			f.last = evs[i].Seq
		}
		if n := len(f.frames); n > feedCache {
			f.frames = append([]frame(nil), f.frames[n-feedCache:]...)
		}
		behind := f.last < f.want || len(evs) == 1000
		if len(evs) > 0 || !behind {
			waitingSince = time.Time{}
		} else if waitingSince.IsZero() {
			waitingSince = time.Now()
		} else if time.Since(waitingSince) > announceGrace {
			// The announced events never committed (their batch failed and
			// the run went on without them): stop chasing them; the
			// fallback poll still picks up whatever comes.
			f.want, behind, waitingSince = f.last, false, time.Time{}
		}
		close(f.wake) // wake subscribers: new events, or a status to re-read
		f.wake = make(chan struct{})
		f.mu.Unlock()
		if behind || err != nil {
			// An announced append is not committed yet (buffered appends
			// commit with the writer's next batch), or there is more.
			retry.Reset(5 * time.Millisecond)
		}
	}
}

// since returns the encoded events after seq that the feed holds, and the
// channel closed at the next broadcast. ok is false when seq is older than
// the cache: read the store.
func (f *feed) since(seq int64) (out []frame, wake chan struct{}, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if seq >= f.last {
		return nil, f.wake, true
	}
	if len(f.frames) == 0 || f.frames[0].seq > seq+1 {
		return nil, f.wake, false
	}
	i := int(seq + 1 - f.frames[0].seq)
	return f.frames[i:], f.wake, true
}

// stream writes run's events after `after` as the public run stream
// (stream.go) until the run's log ends, the client goes away or the server
// stops. Idle streams get a comment every heartbeat. Every write has a
// deadline, so a stalled client is dropped (it resumes with Last-Event-ID)
// and never holds up anyone else.
func (s *Server) stream(w http.ResponseWriter, r *http.Request, runID string, after int64, status int, hdr http.Header) {
	withLog := r.URL.Query().Get("include") == "log"
	rc := http.NewResponseController(w)
	for k, v := range hdr {
		w.Header()[k] = v
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(status)
	f := s.hub.subscribe(runID, after)
	defer s.hub.unsubscribe(f)
	// Live model text, as it is generated: message.delta frames carry no
	// id, so they never move Last-Event-ID; the step.model_call event that
	// follows is the record. A reset voids the text streamed for the step.
	var deltas <-chan platform.Delta
	if s.p != nil && s.p.Deltas != nil {
		ch, stop := s.p.Deltas.Subscribe(runID)
		defer stop()
		deltas = ch
	}

	write := func(b []byte) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(s.o.WriteTimeout))
		if _, err := w.Write(b); err != nil {
			return false
		}
		return true
	}
	flush := func() bool {
		_ = rc.SetWriteDeadline(time.Now().Add(s.o.WriteTimeout))
		return rc.Flush() == nil
	}
	// Tell the client how long to wait before reconnecting.
	if !write([]byte("retry: 1000\n\n")) || !flush() {
		return
	}
	hb := time.NewTicker(s.o.Heartbeat)
	defer hb.Stop()
	// Deltas wait until the stream has shown their step's step.started (the
	// events before a step's text come first), and are dropped once its
	// step.model_call (the record of the whole text) has been written.
	var held []platform.Delta
	shownStep, recordedStep := 0, 0
	sendDelta := func(d platform.Delta) bool {
		b, _ := json.Marshal(StreamMessageDeltaData{RunID: d.RunID, Step: d.Step, Text: d.Text, Reset: d.Reset})
		return write([]byte("event: " + StreamMessageDelta + "\ndata: " + string(b) + "\n\n"))
	}
	releaseHeld := func() bool {
		n := 0
		for _, d := range held {
			switch {
			case d.Step <= recordedStep: // stale: the record is out
			case d.Step <= shownStep:
				if !sendDelta(d) {
					return false
				}
			default:
				held[n] = d
				n++
			}
		}
		held = held[:n]
		return true
	}
	ended, endStatus := false, ""
	waitingToldAt := int64(-1) // the id run.waiting was last sent with
	for {
		frames, wake, ok := f.since(after)
		if !ok {
			evs, err := s.st.Events(r.Context(), runID, after, 500)
			if err != nil {
				return
			}
			frames = frames[:0]
			for i := range evs {
				frames = append(frames, encodeFrame(&evs[i]))
			}
		}
		for _, fr := range frames {
			// Held text of a step already shown goes out before the next
			// event, so it comes before the step.model_call that records it.
			if !releaseHeld() || !write(fr.bytes(withLog)) {
				return
			}
			after = fr.seq
			shownStep = max(shownStep, fr.step)
			if fr.typ == StreamModelCall {
				recordedStep = max(recordedStep, fr.step)
			}
			if fr.status != "" {
				ended, endStatus = true, fr.status
				break
			}
		}
		if len(frames) > 0 && (!releaseHeld() || !flush()) {
			return
		}
		if !ended && len(frames) == 0 {
			// Nothing new: has the run ended without a terminal event (a
			// platform failure), or has its log been read to the end? Is
			// it waiting?
			run, err := s.st.GetRun(r.Context(), runID)
			if err != nil {
				return
			}
			ended, endStatus = store.Terminal(run.Status) && after >= run.LastSeq, run.Status
			if run.Status == store.StatusWaiting && after >= run.LastSeq && waitingToldAt != after {
				d := StreamRunWaitingData{Status: run.Status}
				if !run.WakeAt.IsZero() {
					wa := run.WakeAt.UTC()
					d.WakeAt = &wa
				}
				data, _ := json.Marshal(d)
				pub, _ := json.Marshal(StreamEvent{V: StreamVersion, ID: after, Type: StreamRunWaiting, RunID: runID, At: s.o.Clock().UTC(), Data: data})
				if !write([]byte("id: "+strconv.FormatInt(after, 10)+"\nevent: "+StreamRunWaiting+"\ndata: "+string(pub)+"\n\n")) || !flush() {
					return
				}
				waitingToldAt = after
			}
		}
		if ended {
			b, _ := json.Marshal(StreamEndData{RunID: runID, Status: endStatus, LastEventID: after})
			write([]byte("event: " + StreamEnd + "\ndata: " + string(b) + "\n\n"))
			flush()
			return
		}
		if len(frames) > 0 {
			continue // there may be more already
		}
		select {
		case <-r.Context().Done():
			return
		case <-wake:
			if errors.Is(r.Context().Err(), context.Canceled) {
				return
			}
		case <-hb.C:
			if !write([]byte(": heartbeat\n\n")) || !flush() {
				return
			}
		case d := <-deltas:
			if len(held) < 1024 {
				held = append(held, d)
			}
			if d.Step > shownStep {
				f.poke() // its step.started is committed or about to be
			}
			if !releaseHeld() || !flush() {
				return
			}
		}
		f.mu.Lock()
		closed := f.closed
		f.mu.Unlock()
		if closed {
			return // the server is stopping
		}
	}
}

// lastEventID reads the resume point: the Last-Event-ID header, else the
// after query parameter, else 0.
func lastEventID(r *http.Request) (int64, error) {
	v := r.Header.Get("Last-Event-ID")
	if v == "" {
		v = r.URL.Query().Get("after")
	}
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, badRequest("Last-Event-ID / after must be a non-negative event sequence number, got %q", v)
	}
	return n, nil
}
