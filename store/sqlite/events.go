package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/agentplane/agentplane/store"
)

type appendOp struct {
	req  store.AppendRequest
	done chan error // nil for a non-durable append
	// prompts are the prompt hashes the events index (store.PromptHashOf,
	// "" for none), found by the appending goroutine so that the single
	// writer does not decode payloads.
	prompts []string
	// write, when set, is a write of another kind made in the batch's
	// transaction instead of an append (a claim, a release, a lease
	// renewal: see writeInBatch). It may run twice, when its batch is
	// written again op by op, and keeps its results only in variables it
	// sets afresh each time.
	write func(ctx context.Context, tx *sql.Tx) error
}

// writeInBatch makes write part of the writer's next group commit and
// returns once that commit is durable, with write's error. Claims and
// releases made their own transactions on the single writing connection
// before: each one an fsync of its own, waited for between two batches,
// and with many runs starting and ending they were most of the commits.
// Once queued, it waits for the commit even if ctx ends (write keeps its
// results in the caller's variables, read once it returns); write checks
// ctx itself and writes nothing for a caller that gave up.
func (s *Store) writeInBatch(ctx context.Context, runID string, write func(ctx context.Context, tx *sql.Tx) error) error {
	op := &appendOp{req: store.AppendRequest{RunID: runID, Durable: true}, write: write, done: make(chan error, 1)}
	if err := s.enqueue(ctx, op); err != nil {
		return err
	}
	return <-op.done
}

// Append implements store.EventStore.
func (s *Store) Append(ctx context.Context, req store.AppendRequest) error {
	if err := s.takeSticky(req.RunID, req.Epoch); err != nil {
		return err
	}
	for i := range req.Events {
		if req.Events[i].RunID != req.RunID {
			return fmt.Errorf("sqlite store: event for run %q appended to run %q", req.Events[i].RunID, req.RunID)
		}
	}
	op := &appendOp{req: req}
	for i := range req.Events {
		if h := store.PromptHashOf(&req.Events[i]); h != "" {
			if op.prompts == nil {
				op.prompts = make([]string, len(req.Events))
			}
			op.prompts[i] = h
		}
	}
	if req.Durable {
		op.done = make(chan error, 1)
	}
	if err := s.enqueue(ctx, op); err != nil {
		return err
	}
	if !req.Durable {
		return nil
	}
	select {
	case err := <-op.done:
		if err != nil {
			return err
		}
		return s.takeSticky(req.RunID, req.Epoch)
	case <-ctx.Done():
		// The append may still commit; the caller's lease fencing and the
		// seq uniqueness keep the log consistent either way.
		return ctx.Err()
	}
}

// enqueue hands op to the writer, unless the store is closed: the writer
// drains the queue when Close stops it, so an op queued after that would
// never be committed and a durable Append would wait for it forever.
func (s *Store) enqueue(ctx context.Context, op *appendOp) error {
	s.closeMu.RLock()
	defer s.closeMu.RUnlock()
	if s.isClosed {
		return errors.New("sqlite store: closed")
	}
	select {
	case s.queue <- op:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Flush implements store.EventStore. It carries no lease epoch, so it
// reports a failed non-durable append of the run under any epoch.
func (s *Store) Flush(ctx context.Context, runID string) error {
	return s.Append(ctx, store.AppendRequest{RunID: runID, Durable: true})
}

// takeSticky returns the recorded failure of a non-durable append to runID
// under epoch, or under any epoch if epoch is 0. Failures are kept per epoch
// so that a fenced-out worker's failed appends are reported to it and not to
// the worker that now holds the lease.
func (s *Store) takeSticky(runID string, epoch int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if epoch != 0 {
		return s.sticky[runID][epoch]
	}
	for _, err := range s.sticky[runID] {
		return err
	}
	return nil
}

func (s *Store) setSticky(runID string, epoch int64, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.sticky[runID]
	if m == nil {
		m = map[int64]error{}
		s.sticky[runID] = m
	}
	if m[epoch] == nil {
		m[epoch] = err
	}
}

// clearSticky forgets a run's recorded append failures (used when a new lease
// begins, since the new owner re-reads the log).
func (s *Store) clearSticky(runID string) {
	s.mu.Lock()
	delete(s.sticky, runID)
	s.mu.Unlock()
}

func (s *Store) writer() {
	defer s.wg.Done()
	for {
		var first *appendOp
		select {
		case first = <-s.queue:
		case <-s.done:
			// Drain what is left so no queued append is lost on a clean close.
			for {
				select {
				case op := <-s.queue:
					s.commit([]*appendOp{op})
				default:
					return
				}
			}
		}
		batch := []*appendOp{first}
	fill:
		for len(batch) < s.maxBatch {
			select {
			case op := <-s.queue:
				batch = append(batch, op)
			default:
				break fill
			}
		}
		s.commit(batch)
	}
}

// commit writes a batch in one transaction and one fsync. The ops are
// written straight into it first; only when one of them fails (a fenced
// worker, a seq conflict, a signal taken twice: rare) is the transaction
// rolled back and the batch written again with a savepoint per op, so that
// the failure stays the failing op's own. A savepoint per op on every batch
// cost two statements and a sub-journal copy of each page it touched.
func (s *Store) commit(batch []*appendOp) {
	s.stats.batches.Add(1)
	ctx := context.Background()
	errs := make([]error, len(batch))
	finish := func(txErr error) {
		for i, op := range batch {
			err := errs[i]
			if txErr != nil {
				err = txErr
			}
			if err != nil && op.done == nil {
				s.setSticky(op.req.RunID, op.req.Epoch, err)
			}
			if op.done != nil {
				op.done <- err
			}
		}
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		finish(fmt.Errorf("sqlite store: begin: %w", err)) // classified by writer.BeginTx
		return
	}
	failed := false
write:
	for _, ops := range byRun(batch) {
		if joined := coalesce(ops); joined != nil {
			ops = []*appendOp{joined}
		}
		for _, op := range ops {
			if err := s.stmts.appendOne(ctx, tx, op); err != nil {
				failed = true
				break write
			}
		}
	}
	if failed {
		if err := tx.Rollback(); err != nil {
			finish(fmt.Errorf("sqlite store: rollback: %w", classify(err)))
			return
		}
		if tx, err = s.w.BeginTx(ctx, nil); err != nil {
			finish(fmt.Errorf("sqlite store: begin: %w", err))
			return
		}
		if err := s.stmts.appendIsolated(ctx, tx, batch, errs); err != nil {
			tx.Rollback()
			finish(err)
			return
		}
	}
	version, vErr := s.stmts.readVersion(ctx, tx)
	versionAt := time.Now()
	if err := tx.Commit(); err != nil {
		finish(fmt.Errorf("sqlite store: commit: %w", classify(err)))
		return
	}
	if vErr == nil {
		s.sigw.publish(version, versionAt)
	}
	s.committed()
	s.feed(batch, errs)
	finish(nil)
}

var _ store.CommitFeed = (*Store)(nil)

// FeedCommits implements store.CommitFeed.
func (s *Store) FeedCommits(fn func(runID string, evs []store.Event)) (stop func()) {
	s.feedMu.Lock()
	defer s.feedMu.Unlock()
	s.feedID++
	id := s.feedID
	if s.feeds == nil {
		s.feeds = map[int64]func(string, []store.Event){}
	}
	s.feeds[id] = fn
	return func() {
		s.feedMu.Lock()
		delete(s.feeds, id)
		s.feedMu.Unlock()
	}
}

// feed hands the committed ops of batch to the commit feeds.
func (s *Store) feed(batch []*appendOp, errs []error) {
	s.feedMu.Lock()
	defer s.feedMu.Unlock()
	if len(s.feeds) == 0 {
		return
	}
	for i, op := range batch {
		if errs[i] != nil || len(op.req.Events) == 0 {
			continue
		}
		for _, fn := range s.feeds {
			fn(op.req.RunID, op.req.Events)
		}
	}
}

// byRun splits a batch into the ops of each run, runs in the order they
// first appear and each run's ops in their order. Runs are independent, so
// the batch may be written run by run.
func byRun(batch []*appendOp) [][]*appendOp {
	if len(batch) == 1 {
		return [][]*appendOp{batch}
	}
	at := make(map[string]int, len(batch))
	var out [][]*appendOp
	for _, op := range batch {
		i, ok := at[op.req.RunID]
		if !ok {
			i = len(out)
			at[op.req.RunID] = i
			out = append(out, nil)
		}
		out[i] = append(out[i], op)
	}
	return out
}

// coalesce returns one op that writes what the ops of one run write in
// turn: their events in one run-row update rather than an update per op,
// which was most of the writer's statements with many runs appending a step
// at a time. It returns nil when the ops cannot be joined (an op without
// events, another epoch, seqs that do not follow on): the caller writes
// them one by one. A joined op that fails fails the batch's fast path, and
// the ops are written again one by one, each in its own savepoint, so that
// a failure stays the failing op's own.
func coalesce(ops []*appendOp) *appendOp {
	if len(ops) == 1 {
		return ops[0]
	}
	first := &ops[0].req
	n := 0
	for _, op := range ops {
		r := &op.req
		if len(r.Events) == 0 || r.Epoch != first.Epoch || r.Events[0].Seq != first.Events[0].Seq+int64(n) {
			return nil
		}
		n += len(r.Events)
	}
	joined := &appendOp{req: store.AppendRequest{RunID: first.RunID, Epoch: first.Epoch, Events: make([]store.Event, 0, n)}}
	for _, op := range ops {
		if op.prompts != nil {
			if joined.prompts == nil {
				joined.prompts = make([]string, n)
			}
			copy(joined.prompts[len(joined.req.Events):], op.prompts)
		}
		joined.req.Events = append(joined.req.Events, op.req.Events...)
		joined.req.Update = mergeUpdate(joined.req.Update, op.req.Update)
		joined.req.ConsumeSignals = append(joined.req.ConsumeSignals, op.req.ConsumeSignals...)
	}
	return joined
}

// mergeUpdate is a, then b: b's fields where it sets them.
func mergeUpdate(a, b *store.RunUpdate) *store.RunUpdate {
	if a == nil || b == nil {
		if a == nil {
			return b
		}
		return a
	}
	m := *a
	set := func(dst **string, src *string) {
		if src != nil {
			*dst = src
		}
	}
	set(&m.Status, b.Status)
	set(&m.Currency, b.Currency)
	set(&m.Result, b.Result)
	if b.Steps != nil {
		m.Steps = b.Steps
	}
	for _, f := range []struct{ dst, src **int64 }{{&m.InputTokens, &b.InputTokens}, {&m.OutputTokens, &b.OutputTokens}, {&m.CostMicros, &b.CostMicros}} {
		if *f.src != nil {
			*f.dst = *f.src
		}
	}
	if b.CostUnknown != nil {
		m.CostUnknown = b.CostUnknown
	}
	if b.WakeAt != nil {
		m.WakeAt = b.WakeAt
	}
	return &m
}

// appendIsolated writes each op of batch in its own savepoint, recording
// an op's failure in errs; its error is one that ends the transaction.
func (w *writeStmts) appendIsolated(ctx context.Context, tx *sql.Tx, batch []*appendOp, errs []error) error {
	// An op after a failed op of the same run and epoch fails with it, as
	// it would in a batch of its own (a Flush or a release reports the
	// failure of the appends before it).
	type key struct {
		run   string
		epoch int64
	}
	var failed map[key]error
	for i, op := range batch {
		k := key{op.req.RunID, op.req.Epoch}
		if err := failed[k]; err != nil && k.epoch != 0 {
			errs[i] = err
			continue
		}
		if empty(op) {
			continue
		}
		if err := w.appendSaved(ctx, tx, op); err != nil {
			if errors.Is(err, errTxBroken) {
				return err
			}
			errs[i] = err
			if failed == nil {
				failed = map[key]error{}
			}
			failed[k] = err
		}
	}
	return nil
}

// errTxBroken marks an error that ends the batch's transaction.
var errTxBroken = errors.New("sqlite store: the batch's transaction is broken")

// appendSaved writes op in a savepoint of its own, undone if op fails.
func (w *writeStmts) appendSaved(ctx context.Context, tx *sql.Tx, op *appendOp) error {
	if _, err := tx.StmtContext(ctx, w.savepoint).ExecContext(ctx); err != nil {
		return classify(err)
	}
	opErr := w.appendOne(ctx, tx, op)
	if opErr != nil {
		if _, err := tx.StmtContext(ctx, w.rollbackTo).ExecContext(ctx); err != nil {
			return fmt.Errorf("%w: rollback to savepoint: %w", errTxBroken, err)
		}
	}
	if _, err := tx.StmtContext(ctx, w.release).ExecContext(ctx); err != nil {
		return fmt.Errorf("%w: release savepoint: %w", errTxBroken, err)
	}
	return classify(opErr)
}

// empty reports an op with nothing to write (Flush): it only waits for the
// commit that covers the ops queued before it, which its batch's is.
func empty(op *appendOp) bool {
	req := &op.req
	return op.write == nil && len(req.Events) == 0 && req.Update == nil && len(req.ConsumeSignals) == 0
}

// writeStmts are the statements of the append path, prepared once on the
// single writing connection (parsing SQL per event dominated the profile).
type writeStmts struct {
	head, prompt, consume, savepoint, rollbackTo, release *sql.Stmt
	// insert[n-1] inserts n events in one statement: a run's appends
	// joined in a batch are written together.
	insert [maxInsertRows]*sql.Stmt
	// The run row's update with an append, in three forms, so that an
	// append that does not change the status or the wake-up time does not
	// name those columns: SQLite rewrites every index on a column an UPDATE
	// assigns (five on status), even to the value it had.
	seqOnly, counters, update *sql.Stmt
	// Claims, renewals and releases, made in the batches too.
	claimable, leaseRun, runByID, renew, releaseRun *sql.Stmt
	createRun, signalVersion                        *sql.Stmt
}

// The run row's updates guard the append: WHERE names the lease epoch and
// the seq the append follows, so the update touches no row when the worker
// was fenced out or another append came first (appendOne then says which).
const (
	seqOnlySQL  = `UPDATE runs SET last_seq = ? WHERE id = ? AND lease_epoch = ? AND last_seq = ?`
	countersSQL = `UPDATE runs SET last_seq = ?,
  steps = COALESCE(?, steps), input_tokens = COALESCE(?, input_tokens), output_tokens = COALESCE(?, output_tokens),
  cost_micros = COALESCE(?, cost_micros), currency = COALESCE(?, currency), cost_unknown = COALESCE(?, cost_unknown)
WHERE id = ? AND lease_epoch = ? AND last_seq = ?`
	updateRunSQL = `UPDATE runs SET last_seq = ?,
  status = COALESCE(?, status), steps = COALESCE(?, steps), input_tokens = COALESCE(?, input_tokens),
  output_tokens = COALESCE(?, output_tokens), cost_micros = COALESCE(?, cost_micros),
  currency = COALESCE(?, currency), cost_unknown = COALESCE(?, cost_unknown), result = COALESCE(?, result),
  wake_at = COALESCE(?, wake_at)
WHERE id = ? AND lease_epoch = ? AND last_seq = ?`
)

// releaseRunSQL ends a run's lease under its epoch, with what the release
// changes (NULL leaves a column as it is).
const releaseRunSQL = `UPDATE runs SET lease_owner = '', lease_expires = 0, lease_ttl = 0, updated_at = ?,
  status = COALESCE(?, status), steps = COALESCE(?, steps), input_tokens = COALESCE(?, input_tokens),
  output_tokens = COALESCE(?, output_tokens), cost_micros = COALESCE(?, cost_micros),
  currency = COALESCE(?, currency), cost_unknown = COALESCE(?, cost_unknown), result = COALESCE(?, result),
  wake_at = COALESCE(?, wake_at)
WHERE id = ? AND lease_epoch = ?`

func prepareWrites(ctx context.Context, db *sql.DB) (*writeStmts, error) {
	var w writeStmts
	for _, p := range []struct {
		dst **sql.Stmt
		q   string
	}{
		{&w.head, "SELECT last_seq, lease_epoch FROM runs WHERE id = ?"},
		{&w.prompt, "INSERT OR IGNORE INTO run_prompt_hashes(prompt_hash, run_id) VALUES (?,?)"},
		{&w.consume, "UPDATE signals SET consumed = 1 WHERE id = ? AND run_id = ? AND consumed = 0"},
		{&w.seqOnly, seqOnlySQL},
		{&w.counters, countersSQL},
		{&w.update, updateRunSQL},
		{&w.claimable, "SELECT id FROM runs WHERE id = :id AND " + runnable},
		{&w.leaseRun, `UPDATE runs SET status = 'running', lease_owner = ?, lease_expires = ?, lease_ttl = ?,
  lease_epoch = lease_epoch + 1, updated_at = ? WHERE id = ?`},
		{&w.runByID, "SELECT " + runCols + " FROM runs WHERE id = ?"},
		{&w.renew, "UPDATE runs SET lease_expires = ?, lease_ttl = ? WHERE id = ? AND lease_epoch = ? AND status = 'running'"},
		{&w.releaseRun, releaseRunSQL},
		{&w.signalVersion, signalVersionSQL},
		{&w.createRun, `INSERT INTO runs(id, tenant, user_id, agent, agent_version, task, mode, status,
  created_at, updated_at, currency, parent_run_id, bindings) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)`},
		{&w.savepoint, "SAVEPOINT op"},
		{&w.rollbackTo, "ROLLBACK TO op"},
		{&w.release, "RELEASE op"},
	} {
		st, err := db.PrepareContext(ctx, p.q)
		if err != nil {
			return nil, fmt.Errorf("sqlite store: prepare %q: %w", p.q, err)
		}
		*p.dst = st
	}
	for n := 1; n <= maxInsertRows; n++ {
		q := insertEventsSQL(n)
		st, err := db.PrepareContext(ctx, q)
		if err != nil {
			w.close()
			return nil, fmt.Errorf("sqlite store: prepare %q: %w", q, err)
		}
		w.insert[n-1] = st
	}
	return &w, nil
}

// maxInsertRows bounds the events one INSERT writes.
const maxInsertRows = 16

func insertEventsSQL(n int) string {
	return "INSERT INTO events(run_id, seq, type, step, at, payload, prev_hash, hash) VALUES " +
		strings.TrimSuffix(strings.Repeat("(?,?,?,?,?,?,?,?),", n), ",")
}

// insertEvents inserts evs, up to maxInsertRows a statement.
func (w *writeStmts) insertEvents(ctx context.Context, tx *sql.Tx, evs []store.Event) error {
	args := make([]any, 0, 8*min(len(evs), maxInsertRows))
	for len(evs) > 0 {
		n := min(len(evs), maxInsertRows)
		args = args[:0]
		for i := range evs[:n] {
			ev := &evs[i]
			args = append(args, ev.RunID, ev.Seq, ev.Type, ev.Step, micros(ev.At), blob(ev.Payload), ev.PrevHash[:], ev.Hash[:])
		}
		if _, err := tx.StmtContext(ctx, w.insert[n-1]).ExecContext(ctx, args...); err != nil {
			return err
		}
		evs = evs[n:]
	}
	return nil
}

// readStmts are the reads every step of a run makes, prepared once on the
// reader pool (database/sql prepares each on a connection the first time
// it is used there) instead of parsed again at every call.
type readStmts struct {
	events, signals, principal, signalVersion *sql.Stmt
}

func prepareReads(ctx context.Context, db *sql.DB) (*readStmts, error) {
	var r readStmts
	for _, p := range []struct {
		dst **sql.Stmt
		q   string
	}{
		{&r.events, "SELECT seq, type, step, at, payload, prev_hash, hash FROM events WHERE run_id = ? AND seq > ? ORDER BY seq LIMIT ?"},
		{&r.signals, "SELECT id, run_id, kind, payload, key, created_at FROM signals WHERE run_id = ? AND consumed = 0 ORDER BY id"},
		{&r.principal, "SELECT tenant, user_id, scopes, groups_, bindings, updated_at FROM principals WHERE tenant = ? AND user_id = ?"},
		{&r.signalVersion, signalVersionSQL},
	} {
		st, err := db.PrepareContext(ctx, p.q)
		if err != nil {
			return nil, fmt.Errorf("sqlite store: prepare %q: %w", p.q, err)
		}
		*p.dst = st
	}
	return &r, nil
}

func (r *readStmts) close() {
	for _, st := range []*sql.Stmt{r.events, r.signals, r.principal, r.signalVersion} {
		if st != nil {
			st.Close()
		}
	}
}

func (w *writeStmts) close() {
	for _, st := range w.insert {
		if st != nil {
			st.Close()
		}
	}
	for _, st := range []*sql.Stmt{w.head, w.prompt, w.consume, w.seqOnly, w.counters, w.update,
		w.claimable, w.leaseRun, w.runByID, w.renew, w.releaseRun, w.createRun, w.signalVersion, w.savepoint, w.rollbackTo, w.release} {
		if st != nil {
			st.Close()
		}
	}
}

func opt[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

// appendOne writes one append: the run row's update first, guarded by the
// lease epoch and the seq the events follow, then the events. The head of
// the log is read only when the guard fails (to say why) or when the
// append holds no event (nothing to check its seq against).
func (w *writeStmts) appendOne(ctx context.Context, tx *sql.Tx, op *appendOp) error {
	if op.write != nil {
		return op.write(ctx, tx)
	}
	req := &op.req
	if empty(op) {
		return nil
	}
	var after int64 // the seq the events follow
	if len(req.Events) == 0 {
		var err error
		if after, err = w.checkHead(ctx, tx, req, -1); err != nil {
			return err
		}
	} else {
		after = req.Events[0].Seq - 1
		for i := range req.Events {
			if req.Events[i].Seq != after+1+int64(i) {
				return fmt.Errorf("append to run %s: seq %d at position %d of an append after %d: %w", req.RunID, req.Events[i].Seq, i, after, store.ErrConflict)
			}
		}
	}
	lastSeq := after + int64(len(req.Events))
	res, err := w.updateRun(ctx, tx, req, lastSeq, after)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n != 1 {
		if _, err := w.checkHead(ctx, tx, req, after); err != nil {
			return err
		}
		return fmt.Errorf("append to run %s: the run row did not take the append: %w", req.RunID, store.ErrConflict)
	}
	if err := w.insertEvents(ctx, tx, req.Events); err != nil {
		return fmt.Errorf("append to run %s seq %d: %w", req.RunID, req.Events[0].Seq, err)
	}
	for i := range req.Events {
		if op.prompts != nil && op.prompts[i] != "" {
			if _, err := tx.StmtContext(ctx, w.prompt).ExecContext(ctx, op.prompts[i], req.RunID); err != nil {
				return fmt.Errorf("append to run %s seq %d: index prompt hash: %w", req.RunID, req.Events[i].Seq, err)
			}
		}
	}
	for _, id := range req.ConsumeSignals {
		res, err := tx.StmtContext(ctx, w.consume).ExecContext(ctx, id, req.RunID)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return fmt.Errorf("append to run %s: signal %d already consumed: %w", req.RunID, id, store.ErrConflict)
		}
	}
	return nil
}

// checkHead reads the run's head and returns its last seq, or the error
// that explains why an append after seq want (-1: any) cannot go there.
func (w *writeStmts) checkHead(ctx context.Context, tx *sql.Tx, req *store.AppendRequest, want int64) (int64, error) {
	var lastSeq, epoch int64
	err := tx.StmtContext(ctx, w.head).QueryRowContext(ctx, req.RunID).Scan(&lastSeq, &epoch)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("append to run %s: %w", req.RunID, store.ErrNotFound)
	}
	if err != nil {
		return 0, err
	}
	if epoch != req.Epoch {
		return 0, fmt.Errorf("append to run %s (epoch %d, current %d): %w", req.RunID, req.Epoch, epoch, store.ErrLeaseLost)
	}
	if want >= 0 && lastSeq != want {
		return 0, fmt.Errorf("append to run %s: seq %d after %d: %w", req.RunID, want+1, lastSeq, store.ErrConflict)
	}
	return lastSeq, nil
}

// updateRun sets the run row's last seq and what req.Update changes,
// guarded by the epoch and the seq the append follows.
func (w *writeStmts) updateRun(ctx context.Context, tx *sql.Tx, req *store.AppendRequest, lastSeq, after int64) (sql.Result, error) {
	u := req.Update
	if u == nil {
		return tx.StmtContext(ctx, w.seqOnly).ExecContext(ctx, lastSeq, req.RunID, req.Epoch, after)
	}
	var unknown any
	if u.CostUnknown != nil {
		unknown = boolInt(*u.CostUnknown)
	}
	if u.Status == nil && u.Result == nil && u.WakeAt == nil {
		return tx.StmtContext(ctx, w.counters).ExecContext(ctx, lastSeq, opt(u.Steps), opt(u.InputTokens),
			opt(u.OutputTokens), opt(u.CostMicros), opt(u.Currency), unknown, req.RunID, req.Epoch, after)
	}
	var wake any
	if u.WakeAt != nil {
		wake = micros(*u.WakeAt)
	}
	return tx.StmtContext(ctx, w.update).ExecContext(ctx, lastSeq, opt(u.Status), opt(u.Steps), opt(u.InputTokens),
		opt(u.OutputTokens), opt(u.CostMicros), opt(u.Currency), unknown, opt(u.Result), wake, req.RunID, req.Epoch, after)
}

// blob returns b, or an empty slice for nil, which the driver would bind as
// NULL and the NOT NULL payload columns would refuse.
func blob(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Events implements store.EventStore.
func (s *Store) Events(ctx context.Context, runID string, after int64, limit int) ([]store.Event, error) {
	if limit <= 0 {
		limit = -1 // SQLite: no limit
	}
	rows, err := s.reads.events.QueryContext(ctx, runID, after, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.Event
	for rows.Next() {
		ev := store.Event{RunID: runID}
		var at int64
		var prev, hash []byte
		if err := rows.Scan(&ev.Seq, &ev.Type, &ev.Step, &at, &ev.Payload, &prev, &hash); err != nil {
			return nil, err
		}
		ev.At = fromMicros(at)
		copy(ev.PrevHash[:], prev)
		copy(ev.Hash[:], hash)
		out = append(out, ev)
	}
	return out, rows.Err()
}
