package api

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"time"

	"github.com/agentplane/agentplane/model"
)

// quotaError is a refused admission, answered 429 with what was exceeded.
type quotaError struct {
	quota      string // concurrent_runs | daily_cost | monthly_cost
	limit      string
	used       string
	retryAfter time.Duration // 0: unknown (when a run ends)
	msg        string
}

func (q *quotaError) Error() string { return q.msg }

func (q *quotaError) write(w http.ResponseWriter) {
	secs := int64(q.retryAfter.Round(time.Second) / time.Second)
	if secs > 0 {
		w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
	}
	writeJSON(w, http.StatusTooManyRequests, ErrorResponse{Error: ErrorBody{Code: "quota_exceeded", Message: q.msg,
		Quota: q.quota, Limit: q.limit, Used: q.used, RetryAfter: secs}})
}

// admit decides, in the database, whether the tenant may start the run
// runID: its open runs (queued, running or waiting, and those admitted by
// any process but not yet created) against max_concurrent_runs, and the
// cost of runs created this UTC day and month against the cost caps. The
// store takes a lock on the tenant for the check and the record of the
// admission (store.APIStore.AdmitRun), so admissions racing in many
// processes admit no more than the limit. The caller creates the run, or
// calls forget when it does not.
func (s *Server) admit(ctx context.Context, tenant, runID string) error {
	tc := s.cfg.tenant(tenant)
	if tc.MaxConcurrentRuns == 0 && tc.daily.Micros == 0 && tc.monthly.Micros == 0 {
		return nil
	}
	now := s.clock().UTC()
	day := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, time.UTC)
	month := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
	return s.st.AdmitRun(ctx, tenant, runID, []time.Time{day, month}, now, func(open int, costs []map[string]int64) error {
		if tc.MaxConcurrentRuns > 0 && open >= tc.MaxConcurrentRuns {
			return &quotaError{quota: "concurrent_runs", limit: strconv.Itoa(tc.MaxConcurrentRuns), used: strconv.Itoa(open),
				msg: fmt.Sprintf("tenant %s has %d open runs (queued, running or waiting), its limit is %d; retry when one ends", tenant, open, tc.MaxConcurrentRuns)}
		}
		for _, c := range []struct {
			name  string
			cap   cap
			spent map[string]int64
			next  time.Time
		}{
			{"daily_cost", tc.daily, costs[0], day.AddDate(0, 0, 1)},
			{"monthly_cost", tc.monthly, costs[1], month.AddDate(0, 1, 0)},
		} {
			if c.cap.Micros == 0 {
				continue
			}
			used, err := s.sum(c.spent, c.cap.Currency)
			if err != nil {
				return &quotaError{quota: c.name, limit: money(c.cap.Micros, c.cap.Currency), retryAfter: c.next.Sub(now),
					msg: fmt.Sprintf("tenant %s: %v, so the %s cap cannot be checked; refusing (fail closed)", tenant, err, c.name)}
			}
			if used >= c.cap.Micros {
				return &quotaError{quota: c.name, limit: money(c.cap.Micros, c.cap.Currency), used: money(used, c.cap.Currency),
					retryAfter: c.next.Sub(now),
					msg: fmt.Sprintf("tenant %s has spent %s of its %s cap of %s; it resets at %s", tenant,
						money(used, c.cap.Currency), c.name, money(c.cap.Micros, c.cap.Currency), c.next.Format(time.RFC3339))}
			}
		}
		return nil
	})
}

// forget frees the admission of a run that was not created.
func (s *Server) forget(ctx context.Context, runID string) {
	if err := s.st.ForgetAdmission(context.WithoutCancel(ctx), runID); err != nil {
		s.log.Warn("forget admission", "run", runID, "err", err)
	}
}

// sum adds costs in several currencies in currency cur, converting at the
// platform's rates; a cost that cannot be converted is an error.
func (s *Server) sum(costs map[string]int64, cur string) (int64, error) {
	var total int64
	curs := make([]string, 0, len(costs))
	for c := range costs {
		curs = append(curs, c)
	}
	sort.Strings(curs)
	for _, c := range curs {
		m := costs[c]
		if c == cur {
			total += m
			continue
		}
		if s.p.Rates == nil {
			return 0, fmt.Errorf("runs cost %s and no exchange rate to %s is configured", c, cur)
		}
		out, err := s.p.Rates.Convert(model.Money{Micros: m, Currency: c}, cur)
		if err != nil {
			return 0, err
		}
		total += out.Micros
	}
	return total, nil
}

func money(micros int64, cur string) string {
	return fmt.Sprintf("%d.%06d %s", micros/1_000_000, micros%1_000_000, cur)
}
