package bank

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/agentplane/agentplane/examples/carddispute"
	"github.com/agentplane/agentplane/tool"
)

// Tool names, as registered by Register and declared in the example's
// tools.yaml.
const (
	ToolGetTicket           = "get_ticket"
	ToolGetCustomerProfile  = "get_customer_profile"
	ToolGetCardTransactions = "get_card_transactions"
	ToolRaiseDispute        = "raise_dispute"
	ToolIssueRefund         = "issue_refund"
	ToolDraftEmail          = "draft_email"
	ToolSendEmail           = "send_email"
)

// ToolNames lists every tool Register adds, sorted.
func ToolNames() []string {
	return []string{
		ToolDraftEmail,
		ToolGetCardTransactions,
		ToolGetCustomerProfile,
		ToolGetTicket,
		ToolIssueRefund,
		ToolRaiseDispute,
		ToolSendEmail,
	}
}

// Func returns the function of the bank's tool called name (one of
// ToolNames); ok is false for any other name. The tier-1 catalog
// (Register) and the bank's MCP servers (package bankmcp) both call
// through it.
func (b *Bank) Func(name string) (fn tool.Func, ok bool) {
	fn, ok = map[string]tool.Func{
		ToolGetTicket:           b.GetTicket,
		ToolGetCustomerProfile:  b.GetCustomerProfile,
		ToolGetCardTransactions: b.GetCardTransactions,
		ToolRaiseDispute:        b.RaiseDispute,
		ToolIssueRefund:         b.IssueRefund,
		ToolDraftEmail:          b.DraftEmail,
		ToolSendEmail:           b.SendEmail,
	}[name]
	return fn, ok
}

// Register adds the bank's tools to the catalog under their names
// (ToolNames) and reviews the example's manifests for them. It fails if any
// name is already taken.
func (b *Bank) Register(c *tool.Catalog) error {
	for _, name := range ToolNames() {
		fn, _ := b.Func(name)
		if err := c.Register(name, fn); err != nil {
			return fmt.Errorf("bank: %w", err)
		}
	}
	// The example's manifests ship with these functions and are reviewed
	// with them; the same names with other text are not.
	return c.ReviewFiles(carddispute.Files, "files/"+carddispute.ToolsFile, "analysis/run_python.yaml")
}

// invalid is the result for arguments the bank refuses to read.
func invalid(name string, err error) tool.Result {
	return tool.ErrorResult("%s: invalid arguments: %v", name, err)
}

// ---- reads -------------------------------------------------------------

// Ticket is the output of get_ticket. Body is written by the customer (or
// by whoever managed to edit the ticket) and must be treated as untrusted.
type Ticket struct {
	TicketID   string `json:"ticket_id"`
	CustomerID string `json:"customer_id"`
	Subject    string `json:"subject"`
	Body       string `json:"body"`
}

// GetTicket is the get_ticket tool: {ticket_id} -> Ticket.
func (b *Bank) GetTicket(ctx context.Context, call tool.Call) (tool.Result, error) {
	var a struct {
		TicketID string `json:"ticket_id"`
	}
	if err := decodeArgs(call.Args, &a); err != nil {
		return invalid(ToolGetTicket, err), nil
	}
	if !ticketIDPattern.MatchString(a.TicketID) {
		return invalid(ToolGetTicket, fmt.Errorf("ticket_id %q is not a ticket id (T- followed by digits)", a.TicketID)), nil
	}
	var t Ticket
	err := b.db.QueryRowContext(ctx, `SELECT id, customer_id, subject, body FROM tickets WHERE id = ?`, a.TicketID).
		Scan(&t.TicketID, &t.CustomerID, &t.Subject, &t.Body)
	if errors.Is(err, sql.ErrNoRows) {
		return tool.ErrorResult("ticket %s not found", a.TicketID), nil
	}
	if err != nil {
		return tool.Result{}, fmt.Errorf("bank: %s: %w", ToolGetTicket, err)
	}
	return tool.JSONResult(t)
}

// Profile is the output of get_customer_profile.
type Profile struct {
	CustomerID string `json:"customer_id"`
	Name       string `json:"name"`
	Email      string `json:"email"`
	CardLast4  string `json:"card_last4"`
	Segment    string `json:"segment"`
}

// GetCustomerProfile is the get_customer_profile tool: {customer_id} ->
// Profile.
func (b *Bank) GetCustomerProfile(ctx context.Context, call tool.Call) (tool.Result, error) {
	var a struct {
		CustomerID string `json:"customer_id"`
	}
	if err := decodeArgs(call.Args, &a); err != nil {
		return invalid(ToolGetCustomerProfile, err), nil
	}
	if err := checkCustomerID(a.CustomerID); err != nil {
		return invalid(ToolGetCustomerProfile, err), nil
	}
	var p Profile
	err := b.db.QueryRowContext(ctx, `SELECT id, name, email, card_last4, segment FROM customers WHERE id = ?`, a.CustomerID).
		Scan(&p.CustomerID, &p.Name, &p.Email, &p.CardLast4, &p.Segment)
	if errors.Is(err, sql.ErrNoRows) {
		return tool.ErrorResult("customer %s not found", a.CustomerID), nil
	}
	if err != nil {
		return tool.Result{}, fmt.Errorf("bank: %s: %w", ToolGetCustomerProfile, err)
	}
	return tool.JSONResult(p)
}

// Transaction is one card transaction as get_card_transactions reports it.
type Transaction struct {
	ID        string `json:"id"`
	Date      string `json:"date"`
	Merchant  string `json:"merchant"`
	AmountINR Rupees `json:"amount_inr"`
	Currency  string `json:"currency"`
}

// TransactionList is the output of get_card_transactions.
type TransactionList struct {
	CustomerID   string        `json:"customer_id"`
	Transactions []Transaction `json:"transactions"`
	// Count is len(Transactions).
	Count int `json:"count"`
	// HasMore is set when the limit cut the list short.
	HasMore bool `json:"has_more"`
}

// GetCardTransactions is the get_card_transactions tool:
// {customer_id, from?, to?, limit?} -> TransactionList, newest first. From
// and to are inclusive dates (YYYY-MM-DD); limit defaults to 100 and may
// not exceed 50000.
func (b *Bank) GetCardTransactions(ctx context.Context, call tool.Call) (tool.Result, error) {
	var a struct {
		CustomerID string `json:"customer_id"`
		From       string `json:"from"`
		To         string `json:"to"`
		Limit      *int64 `json:"limit"`
	}
	if err := decodeArgs(call.Args, &a); err != nil {
		return invalid(ToolGetCardTransactions, err), nil
	}
	if err := checkCustomerID(a.CustomerID); err != nil {
		return invalid(ToolGetCardTransactions, err), nil
	}
	if err := checkDate("from", a.From); err != nil {
		return invalid(ToolGetCardTransactions, err), nil
	}
	if err := checkDate("to", a.To); err != nil {
		return invalid(ToolGetCardTransactions, err), nil
	}
	if a.From != "" && a.To != "" && a.From > a.To {
		return invalid(ToolGetCardTransactions, fmt.Errorf("from %s is after to %s", a.From, a.To)), nil
	}
	limit := int64(defaultTxnLimit)
	if a.Limit != nil {
		if *a.Limit < 1 || *a.Limit > maxTxnLimit {
			return invalid(ToolGetCardTransactions, fmt.Errorf("limit %d must be between 1 and %d", *a.Limit, maxTxnLimit)), nil
		}
		limit = *a.Limit
	}
	if ok, err := b.customerExists(ctx, b.db, a.CustomerID); err != nil {
		return tool.Result{}, fmt.Errorf("bank: %s: %w", ToolGetCardTransactions, err)
	} else if !ok {
		return tool.ErrorResult("customer %s not found", a.CustomerID), nil
	}
	from, to := a.From, a.To
	if from == "" {
		from = "0000-01-01"
	}
	if to == "" {
		to = "9999-12-31"
	}
	rows, err := b.db.QueryContext(ctx, `
		SELECT id, date, merchant, amount_paise, currency FROM transactions
		WHERE customer_id = ? AND date >= ? AND date <= ?
		ORDER BY date DESC, id DESC
		LIMIT ?`, a.CustomerID, from, to, limit+1)
	if err != nil {
		return tool.Result{}, fmt.Errorf("bank: %s: %w", ToolGetCardTransactions, err)
	}
	defer rows.Close()
	out := TransactionList{CustomerID: a.CustomerID, Transactions: []Transaction{}}
	for rows.Next() {
		var t Transaction
		var paise int64
		if err := rows.Scan(&t.ID, &t.Date, &t.Merchant, &paise, &t.Currency); err != nil {
			return tool.Result{}, fmt.Errorf("bank: %s: %w", ToolGetCardTransactions, err)
		}
		t.AmountINR = Rupees(paise)
		if int64(len(out.Transactions)) == limit {
			out.HasMore = true
			break
		}
		out.Transactions = append(out.Transactions, t)
	}
	if err := rows.Err(); err != nil {
		return tool.Result{}, fmt.Errorf("bank: %s: %w", ToolGetCardTransactions, err)
	}
	out.Count = len(out.Transactions)
	return tool.JSONResult(out)
}

type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func (b *Bank) customerExists(ctx context.Context, q querier, id string) (bool, error) {
	var one int
	err := q.QueryRowContext(ctx, `SELECT 1 FROM customers WHERE id = ?`, id).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

// txnOwnedBy returns the amount of the transaction if it belongs to the
// customer; ok is false otherwise. Someone else's transaction and a
// missing one look the same to the caller.
func txnOwnedBy(ctx context.Context, q querier, txnID, customerID string) (paise int64, ok bool, err error) {
	err = q.QueryRowContext(ctx, `SELECT amount_paise FROM transactions WHERE id = ? AND customer_id = ?`, txnID, customerID).Scan(&paise)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	return paise, err == nil, err
}

// ---- side effects ------------------------------------------------------

// effect performs a side effect inside the transaction that also records
// its idempotency key.
type effect func(tx *sql.Tx, key, runID string) (tool.Result, error)

// once runs do at most once per idempotency key. A repeated key returns
// the stored outcome (success or refusal) and counts as a suppressed
// duplicate. A key reused for a different tool or different arguments is a
// platform bug and fails with a Go error.
func (b *Bank) once(ctx context.Context, name string, call tool.Call, reqHash string, do effect) (tool.Result, error) {
	key := call.IdempotencyKey
	if key == "" {
		return tool.Result{}, fmt.Errorf("bank: %s: call has no idempotency key", name)
	}
	if len(key) > maxKeyLen || !utf8.ValidString(key) {
		return tool.Result{}, fmt.Errorf("bank: %s: malformed idempotency key", name)
	}
	tx, err := b.db.BeginTx(ctx, nil)
	if err != nil {
		return tool.Result{}, fmt.Errorf("bank: %s: %w", name, err)
	}
	defer tx.Rollback()
	var (
		prevTool, prevHash, output string
		isErr                      bool
	)
	err = tx.QueryRowContext(ctx, `SELECT tool, request_hash, output, is_error FROM idempotency WHERE key = ?`, key).
		Scan(&prevTool, &prevHash, &output, &isErr)
	switch {
	case err == nil:
		if prevTool != name || prevHash != reqHash {
			return tool.Result{}, fmt.Errorf("bank: %s: idempotency key %q was already used by a different %s request", name, key, prevTool)
		}
		if _, err := tx.ExecContext(ctx, `UPDATE idempotency SET repeats = repeats + 1 WHERE key = ?`, key); err != nil {
			return tool.Result{}, fmt.Errorf("bank: %s: %w", name, err)
		}
		if err := tx.Commit(); err != nil {
			return tool.Result{}, fmt.Errorf("bank: %s: %w", name, err)
		}
		return tool.Result{Output: json.RawMessage(output), IsError: isErr}, nil
	case !errors.Is(err, sql.ErrNoRows):
		return tool.Result{}, fmt.Errorf("bank: %s: %w", name, err)
	}
	runID := runIDOf(key)
	res, err := do(tx, key, runID)
	if err != nil {
		return tool.Result{}, fmt.Errorf("bank: %s: %w", name, err)
	}
	if _, err := tx.ExecContext(ctx,
		`INSERT INTO idempotency (key, run_id, tool, request_hash, output, is_error) VALUES (?, ?, ?, ?, ?, ?)`,
		key, runID, name, reqHash, string(res.Output), res.IsError); err != nil {
		return tool.Result{}, fmt.Errorf("bank: %s: %w", name, err)
	}
	if err := tx.Commit(); err != nil {
		return tool.Result{}, fmt.Errorf("bank: %s: %w", name, err)
	}
	return res, nil
}

// DisputeReceipt is the output of raise_dispute.
type DisputeReceipt struct {
	DisputeID      string   `json:"dispute_id"`
	Status         string   `json:"status"`
	CustomerID     string   `json:"customer_id"`
	TransactionIDs []string `json:"transaction_ids"`
}

// RaiseDispute is the raise_dispute tool:
// {customer_id, transaction_ids, reason} -> DisputeReceipt. Every
// transaction must belong to the customer. The dispute id is derived from
// the idempotency key.
func (b *Bank) RaiseDispute(ctx context.Context, call tool.Call) (tool.Result, error) {
	var a struct {
		CustomerID     string   `json:"customer_id"`
		TransactionIDs []string `json:"transaction_ids"`
		Reason         string   `json:"reason"`
	}
	if err := decodeArgs(call.Args, &a); err != nil {
		return invalid(ToolRaiseDispute, err), nil
	}
	if err := checkCustomerID(a.CustomerID); err != nil {
		return invalid(ToolRaiseDispute, err), nil
	}
	if len(a.TransactionIDs) == 0 || len(a.TransactionIDs) > maxDisputeTxns {
		return invalid(ToolRaiseDispute, fmt.Errorf("transaction_ids must list 1 to %d transactions", maxDisputeTxns)), nil
	}
	seen := map[string]bool{}
	for i, id := range a.TransactionIDs {
		if err := checkTxnID(fmt.Sprintf("transaction_ids[%d]", i), id); err != nil {
			return invalid(ToolRaiseDispute, err), nil
		}
		if seen[id] {
			return invalid(ToolRaiseDispute, fmt.Errorf("transaction %s is listed twice", id)), nil
		}
		seen[id] = true
	}
	if err := checkText("reason", a.Reason, maxReasonLen, true); err != nil {
		return invalid(ToolRaiseDispute, err), nil
	}
	h, err := requestHash(ToolRaiseDispute, a)
	if err != nil {
		return tool.Result{}, err
	}
	return b.once(ctx, ToolRaiseDispute, call, h, func(tx *sql.Tx, key, runID string) (tool.Result, error) {
		if ok, err := b.customerExists(ctx, tx, a.CustomerID); err != nil {
			return tool.Result{}, err
		} else if !ok {
			return tool.ErrorResult("customer %s not found", a.CustomerID), nil
		}
		for _, id := range a.TransactionIDs {
			if _, ok, err := txnOwnedBy(ctx, tx, id, a.CustomerID); err != nil {
				return tool.Result{}, err
			} else if !ok {
				return tool.ErrorResult("dispute refused: transaction %s not found for customer %s", id, a.CustomerID), nil
			}
		}
		id, err := freeID(ctx, tx, "disputes", func(i int) string {
			d := digest("dispute", key, strconv.Itoa(i))
			n, _ := strconv.ParseUint(d[:8], 16, 32)
			return fmt.Sprintf("D-2026-%05d", n%100000)
		})
		if err != nil {
			return tool.Result{}, err
		}
		if _, err := tx.ExecContext(ctx,
			`INSERT INTO disputes (id, key, run_id, customer_id, reason, status, tenant, user_id) VALUES (?, ?, ?, ?, ?, 'open', ?, ?)`,
			id, key, runID, a.CustomerID, a.Reason, call.Tenant, call.User); err != nil {
			return tool.Result{}, err
		}
		for _, t := range a.TransactionIDs {
			if _, err := tx.ExecContext(ctx,
				`INSERT INTO dispute_transactions (dispute_id, transaction_id) VALUES (?, ?)`, id, t); err != nil {
				return tool.Result{}, err
			}
		}
		return tool.JSONResult(DisputeReceipt{DisputeID: id, Status: "open", CustomerID: a.CustomerID, TransactionIDs: a.TransactionIDs})
	})
}

// freeID returns the first candidate(i), i = 0, 1, ..., not yet used as an
// id in table.
func freeID(ctx context.Context, tx *sql.Tx, table string, candidate func(int) string) (string, error) {
	for i := 0; i < 1000; i++ {
		id := candidate(i)
		var one int
		err := tx.QueryRowContext(ctx, `SELECT 1 FROM `+table+` WHERE id = ?`, id).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return id, nil
		}
		if err != nil {
			return "", err
		}
	}
	return "", fmt.Errorf("no free id in %s", table)
}

// RefundReceipt is the output of issue_refund.
type RefundReceipt struct {
	RefundID      string `json:"refund_id"`
	TransactionID string `json:"transaction_id"`
	AmountINR     Rupees `json:"amount_inr"`
	Status        string `json:"status"`
}

// IssueRefund is the issue_refund tool:
// {customer_id, transaction_id, amount_inr, reason?} -> RefundReceipt.
// It refuses, as a tool error, an amount above the transaction's amount
// and a transaction that is not the customer's. Each refund is judged on
// its own: two refunds under different keys are two refunds.
func (b *Bank) IssueRefund(ctx context.Context, call tool.Call) (tool.Result, error) {
	var a struct {
		CustomerID    string          `json:"customer_id"`
		TransactionID string          `json:"transaction_id"`
		AmountINR     json.RawMessage `json:"amount_inr"`
		Reason        *string         `json:"reason"`
	}
	if err := decodeArgs(call.Args, &a); err != nil {
		return invalid(ToolIssueRefund, err), nil
	}
	if err := checkCustomerID(a.CustomerID); err != nil {
		return invalid(ToolIssueRefund, err), nil
	}
	if err := checkTxnID("transaction_id", a.TransactionID); err != nil {
		return invalid(ToolIssueRefund, err), nil
	}
	paise, err := amountArg(a.AmountINR)
	if err != nil {
		return invalid(ToolIssueRefund, fmt.Errorf("amount_inr: %v", err)), nil
	}
	reason := ""
	if a.Reason != nil {
		if err := checkText("reason", *a.Reason, maxReasonLen, true); err != nil {
			return invalid(ToolIssueRefund, err), nil
		}
		reason = *a.Reason
	}
	h, err := requestHash(ToolIssueRefund, []any{a.CustomerID, a.TransactionID, paise, reason})
	if err != nil {
		return tool.Result{}, err
	}
	return b.once(ctx, ToolIssueRefund, call, h, func(tx *sql.Tx, key, runID string) (tool.Result, error) {
		if ok, err := b.customerExists(ctx, tx, a.CustomerID); err != nil {
			return tool.Result{}, err
		} else if !ok {
			return tool.ErrorResult("refund refused: customer %s not found", a.CustomerID), nil
		}
		txnPaise, ok, err := txnOwnedBy(ctx, tx, a.TransactionID, a.CustomerID)
		if err != nil {
			return tool.Result{}, err
		}
		if !ok {
			return tool.ErrorResult("refund refused: transaction %s not found for customer %s", a.TransactionID, a.CustomerID), nil
		}
		if paise > txnPaise {
			return tool.ErrorResult("refund refused: ₹%s is more than the ₹%s of transaction %s",
				FormatRupees(paise), FormatRupees(txnPaise), a.TransactionID), nil
		}
		id, err := freeID(ctx, tx, "refunds", func(i int) string {
			return "RF-" + strings.ToUpper(digest("refund", key, strconv.Itoa(i))[:12])
		})
		if err != nil {
			return tool.Result{}, err
		}
		if _, err := tx.ExecContext(ctx,
			`INSERT INTO refunds (id, key, run_id, customer_id, transaction_id, amount_paise, reason, tenant, user_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			id, key, runID, a.CustomerID, a.TransactionID, paise, reason, call.Tenant, call.User); err != nil {
			return tool.Result{}, err
		}
		return tool.JSONResult(RefundReceipt{RefundID: id, TransactionID: a.TransactionID, AmountINR: Rupees(paise), Status: "issued"})
	})
}

type emailArgs struct {
	To      string `json:"to"`
	Subject string `json:"subject"`
	Body    string `json:"body"`
}

func decodeEmail(name string, raw json.RawMessage) (emailArgs, *tool.Result) {
	var a emailArgs
	fail := func(err error) (emailArgs, *tool.Result) {
		r := invalid(name, err)
		return a, &r
	}
	if err := decodeArgs(raw, &a); err != nil {
		return fail(err)
	}
	if err := checkAddress("to", a.To); err != nil {
		return fail(err)
	}
	if err := checkText("subject", a.Subject, maxSubjectLen, false); err != nil {
		return fail(err)
	}
	if err := checkText("body", a.Body, maxBodyLen, true); err != nil {
		return fail(err)
	}
	return a, nil
}

// Draft is the output of draft_email.
type Draft struct {
	DraftID string `json:"draft_id"`
	To      string `json:"to"`
	Subject string `json:"subject"`
	Body    string `json:"body"`
}

// DraftEmail is the draft_email tool: {to, subject, body} -> Draft. A draft
// goes nowhere; it is recorded (and counted) so that tests can see it. With
// an idempotency key, a repeated call returns the same draft.
func (b *Bank) DraftEmail(ctx context.Context, call tool.Call) (tool.Result, error) {
	a, bad := decodeEmail(ToolDraftEmail, call.Args)
	if bad != nil {
		return *bad, nil
	}
	insert := func(tx *sql.Tx, key sql.NullString, runID, id string) (tool.Result, error) {
		if _, err := tx.ExecContext(ctx,
			`INSERT INTO drafts (id, key, run_id, rcpt, subject, body, tenant, user_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
			id, key, runID, a.To, a.Subject, a.Body, call.Tenant, call.User); err != nil {
			return tool.Result{}, err
		}
		return tool.JSONResult(Draft{DraftID: id, To: a.To, Subject: a.Subject, Body: a.Body})
	}
	if call.IdempotencyKey == "" {
		tx, err := b.db.BeginTx(ctx, nil)
		if err != nil {
			return tool.Result{}, fmt.Errorf("bank: %s: %w", ToolDraftEmail, err)
		}
		defer tx.Rollback()
		var seq int64
		if err := tx.QueryRowContext(ctx, `SELECT coalesce(max(seq), 0) + 1 FROM drafts`).Scan(&seq); err != nil {
			return tool.Result{}, fmt.Errorf("bank: %s: %w", ToolDraftEmail, err)
		}
		res, err := insert(tx, sql.NullString{}, "", "draft_"+digest("draft-unkeyed", strconv.FormatInt(seq, 10))[:16])
		if err != nil {
			return tool.Result{}, fmt.Errorf("bank: %s: %w", ToolDraftEmail, err)
		}
		if err := tx.Commit(); err != nil {
			return tool.Result{}, fmt.Errorf("bank: %s: %w", ToolDraftEmail, err)
		}
		return res, nil
	}
	h, err := requestHash(ToolDraftEmail, a)
	if err != nil {
		return tool.Result{}, err
	}
	return b.once(ctx, ToolDraftEmail, call, h, func(tx *sql.Tx, key, runID string) (tool.Result, error) {
		id, err := freeID(ctx, tx, "drafts", func(i int) string {
			return "draft_" + digest("draft", key, strconv.Itoa(i))[:16]
		})
		if err != nil {
			return tool.Result{}, err
		}
		return insert(tx, sql.NullString{String: key, Valid: true}, runID, id)
	})
}

// SentEmail is the output of send_email.
type SentEmail struct {
	MessageID string `json:"message_id"`
	To        string `json:"to"`
	Status    string `json:"status"`
}

// SendEmail is the send_email tool: {to, subject, body} -> SentEmail. The
// bank sends to any address; deciding who may be written to is the
// platform's policy, and tests read Emails to check what left.
func (b *Bank) SendEmail(ctx context.Context, call tool.Call) (tool.Result, error) {
	a, bad := decodeEmail(ToolSendEmail, call.Args)
	if bad != nil {
		return *bad, nil
	}
	h, err := requestHash(ToolSendEmail, a)
	if err != nil {
		return tool.Result{}, err
	}
	return b.once(ctx, ToolSendEmail, call, h, func(tx *sql.Tx, key, runID string) (tool.Result, error) {
		id, err := freeID(ctx, tx, "emails", func(i int) string {
			return "msg_" + digest("email", key, strconv.Itoa(i))[:20]
		})
		if err != nil {
			return tool.Result{}, err
		}
		if _, err := tx.ExecContext(ctx,
			`INSERT INTO emails (id, key, run_id, rcpt, subject, body, tenant, user_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
			id, key, runID, a.To, a.Subject, a.Body, call.Tenant, call.User); err != nil {
			return tool.Result{}, err
		}
		return tool.JSONResult(SentEmail{MessageID: id, To: a.To, Status: "sent"})
	})
}

// amountArg reads amount_inr, which must be a JSON number (not a string
// that looks like one).
func amountArg(raw json.RawMessage) (int64, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return 0, errors.New("amount is missing")
	}
	if c := raw[0]; c != '-' && (c < '0' || c > '9') {
		return 0, errors.New("amount must be a JSON number of rupees")
	}
	return ParseRupees(json.Number(raw))
}
