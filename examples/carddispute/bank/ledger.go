package bank

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
)

// Counters summarise the side effects the bank has seen. They are computed
// from the stored records, so they cannot drift from them.
type Counters struct {
	DisputesRaised int
	RefundsIssued  int
	// RefundedPaise is the sum of all refunds issued, in paise.
	RefundedPaise int64
	EmailsSent    int
	EmailsDrafted int
	// DuplicateCallsSuppressed counts calls that repeated an idempotency key
	// already seen (by raise_dispute, issue_refund, draft_email or
	// send_email) and so changed nothing.
	DuplicateCallsSuppressed int
}

// Add returns the sum of two banks' counters (the demo's core-banking and
// e-mail servers keep a database each).
func (c Counters) Add(o Counters) Counters {
	return Counters{DisputesRaised: c.DisputesRaised + o.DisputesRaised, RefundsIssued: c.RefundsIssued + o.RefundsIssued,
		RefundedPaise: c.RefundedPaise + o.RefundedPaise, EmailsSent: c.EmailsSent + o.EmailsSent,
		EmailsDrafted: c.EmailsDrafted + o.EmailsDrafted, DuplicateCallsSuppressed: c.DuplicateCallsSuppressed + o.DuplicateCallsSuppressed}
}

// Counters returns the totals over every run.
func (b *Bank) Counters(ctx context.Context) (Counters, error) {
	return b.counters(ctx, "", nil)
}

// CountersForRun returns the totals of one run, identified by the run id
// part of the idempotency keys ("run_id:step:index") its calls carried.
func (b *Bank) CountersForRun(ctx context.Context, runID string) (Counters, error) {
	if runID == "" || strings.Contains(runID, ":") {
		return Counters{}, fmt.Errorf("bank: counters: invalid run id %q", runID)
	}
	return b.counters(ctx, " WHERE run_id = ?", []any{runID})
}

func (b *Bank) counters(ctx context.Context, where string, arg []any) (Counters, error) {
	// One statement, so the numbers come from one snapshot.
	q := `SELECT
		(SELECT count(*) FROM disputes` + where + `),
		(SELECT count(*) FROM refunds` + where + `),
		(SELECT coalesce(sum(amount_paise), 0) FROM refunds` + where + `),
		(SELECT count(*) FROM emails` + where + `),
		(SELECT count(*) FROM drafts` + where + `),
		(SELECT coalesce(sum(repeats), 0) FROM idempotency` + where + `)`
	var args []any
	for range 6 {
		args = append(args, arg...)
	}
	var c Counters
	if err := b.db.QueryRowContext(ctx, q, args...).Scan(&c.DisputesRaised, &c.RefundsIssued, &c.RefundedPaise,
		&c.EmailsSent, &c.EmailsDrafted, &c.DuplicateCallsSuppressed); err != nil {
		return Counters{}, fmt.Errorf("bank: counters: %w", err)
	}
	return c, nil
}

// Actor says who caused a side effect: the idempotency key of the tool
// call, the run it belongs to, and the tenant and user it acted for.
type Actor struct {
	Key    string
	RunID  string
	Tenant string
	User   string
}

// Dispute is a dispute the bank has opened.
type Dispute struct {
	ID             string
	CustomerID     string
	TransactionIDs []string
	Reason         string
	Status         string
	Actor
}

// Refund is a refund the bank has issued.
type Refund struct {
	ID            string
	CustomerID    string
	TransactionID string
	AmountPaise   int64
	Reason        string
	Actor
}

// Email is a message sent (Emails) or drafted (Drafts).
type Email struct {
	ID      string
	To      string
	Subject string
	Body    string
	Actor
}

// Disputes lists the disputes raised, oldest first.
func (b *Bank) Disputes(ctx context.Context) ([]Dispute, error) {
	rows, err := b.db.QueryContext(ctx, `
		SELECT d.id, d.customer_id, d.reason, d.status, d.key, d.run_id, d.tenant, d.user_id,
		       (SELECT group_concat(transaction_id, ',') FROM
		           (SELECT transaction_id FROM dispute_transactions t WHERE t.dispute_id = d.id ORDER BY transaction_id))
		FROM disputes d ORDER BY d.seq`)
	if err != nil {
		return nil, fmt.Errorf("bank: disputes: %w", err)
	}
	defer rows.Close()
	var out []Dispute
	for rows.Next() {
		var d Dispute
		var txns sql.NullString
		if err := rows.Scan(&d.ID, &d.CustomerID, &d.Reason, &d.Status, &d.Key, &d.RunID, &d.Tenant, &d.User, &txns); err != nil {
			return nil, fmt.Errorf("bank: disputes: %w", err)
		}
		if txns.String != "" {
			d.TransactionIDs = strings.Split(txns.String, ",")
		}
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("bank: disputes: %w", err)
	}
	return out, nil
}

// Refunds lists the refunds issued, oldest first.
func (b *Bank) Refunds(ctx context.Context) ([]Refund, error) {
	rows, err := b.db.QueryContext(ctx, `
		SELECT id, customer_id, transaction_id, amount_paise, reason, key, run_id, tenant, user_id
		FROM refunds ORDER BY seq`)
	if err != nil {
		return nil, fmt.Errorf("bank: refunds: %w", err)
	}
	defer rows.Close()
	var out []Refund
	for rows.Next() {
		var r Refund
		if err := rows.Scan(&r.ID, &r.CustomerID, &r.TransactionID, &r.AmountPaise, &r.Reason,
			&r.Key, &r.RunID, &r.Tenant, &r.User); err != nil {
			return nil, fmt.Errorf("bank: refunds: %w", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("bank: refunds: %w", err)
	}
	return out, nil
}

// Emails lists the emails sent, oldest first.
func (b *Bank) Emails(ctx context.Context) ([]Email, error) {
	return b.emails(ctx, "emails")
}

// Drafts lists the email drafts made, oldest first. A draft made without
// an idempotency key has an empty Key.
func (b *Bank) Drafts(ctx context.Context) ([]Email, error) {
	return b.emails(ctx, "drafts")
}

func (b *Bank) emails(ctx context.Context, table string) ([]Email, error) {
	rows, err := b.db.QueryContext(ctx, `
		SELECT id, rcpt, subject, body, key, run_id, tenant, user_id FROM `+table+` ORDER BY seq`)
	if err != nil {
		return nil, fmt.Errorf("bank: %s: %w", table, err)
	}
	defer rows.Close()
	var out []Email
	for rows.Next() {
		var e Email
		var key sql.NullString
		if err := rows.Scan(&e.ID, &e.To, &e.Subject, &e.Body, &key, &e.RunID, &e.Tenant, &e.User); err != nil {
			return nil, fmt.Errorf("bank: %s: %w", table, err)
		}
		e.Key = key.String
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("bank: %s: %w", table, err)
	}
	return out, nil
}

// TransactionCount returns how many card transactions the customer has.
func (b *Bank) TransactionCount(ctx context.Context, customerID string) (int, error) {
	var n int
	err := b.db.QueryRowContext(ctx, `SELECT count(*) FROM transactions WHERE customer_id = ?`, customerID).Scan(&n)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("bank: transaction count: %w", err)
	}
	return n, nil
}
