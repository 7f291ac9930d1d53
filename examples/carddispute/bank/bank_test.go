package bank_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/agentplane/agentplane/examples/carddispute/bank"
	"github.com/agentplane/agentplane/tool"
)

func openBank(t testing.TB) (*bank.Bank, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "bank.db")
	b, err := bank.Open(path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	return b, path
}

// invoke calls the named tool through a catalog, as the broker would.
func invoke(t testing.TB, b *bank.Bank, name, key string, args any) tool.Result {
	t.Helper()
	res, err := tryInvoke(b, name, key, args)
	if err != nil {
		t.Fatalf("%s(%s): Go error: %v", name, key, err)
	}
	return res
}

func tryInvoke(b *bank.Bank, name, key string, args any) (tool.Result, error) {
	cat := tool.NewCatalog()
	if err := b.Register(cat); err != nil {
		return tool.Result{}, err
	}
	fn, ok := cat.Lookup(name)
	if !ok {
		return tool.Result{}, fmt.Errorf("tool %s not registered", name)
	}
	raw, ok := args.(string)
	if !ok {
		bs, err := json.Marshal(args)
		if err != nil {
			return tool.Result{}, err
		}
		raw = string(bs)
	}
	return fn(context.Background(), tool.Call{
		Tool: name, Args: json.RawMessage(raw), IdempotencyKey: key,
		RunID: strings.SplitN(key, ":", 2)[0], Tenant: "acme-bank", User: "u_priya",
	})
}

func decode[T any](t testing.TB, res tool.Result) T {
	t.Helper()
	if res.IsError {
		t.Fatalf("unexpected tool error: %s", res.Output)
	}
	var v T
	if err := json.Unmarshal(res.Output, &v); err != nil {
		t.Fatalf("decode %s: %v", res.Output, err)
	}
	return v
}

func counters(t testing.TB, b *bank.Bank) bank.Counters {
	t.Helper()
	c, err := b.Counters(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func refundArgs(txn string, amount any) map[string]any {
	return map[string]any{"customer_id": bank.CustomerID, "transaction_id": txn, "amount_inr": amount, "reason": "duplicate charge"}
}

func TestSeedData(t *testing.T) {
	b, _ := openBank(t)

	ticket := decode[bank.Ticket](t, invoke(t, b, bank.ToolGetTicket, "", map[string]any{"ticket_id": bank.TicketID}))
	if ticket.CustomerID != bank.CustomerID {
		t.Errorf("ticket customer = %s", ticket.CustomerID)
	}
	for _, want := range []string{"12,499", "twice", "SYSTEM NOTE TO AI AGENT", bank.InjectionRecipient, "49,000", bank.OtherCustomerTxn} {
		if !strings.Contains(ticket.Body, want) {
			t.Errorf("ticket body lacks %q", want)
		}
	}

	p := decode[bank.Profile](t, invoke(t, b, bank.ToolGetCustomerProfile, "", map[string]any{"customer_id": bank.CustomerID}))
	if p.Email != bank.CustomerEmail || p.CardLast4 != "4417" || p.Name == "" {
		t.Errorf("profile = %+v", p)
	}

	list := decode[bank.TransactionList](t, invoke(t, b, bank.ToolGetCardTransactions, "",
		map[string]any{"customer_id": bank.CustomerID, "from": "2026-10-01", "to": "2026-10-31"}))
	if list.Count != 9 || len(list.Transactions) != 9 || list.HasMore {
		t.Fatalf("October transactions: count=%d len=%d has_more=%v", list.Count, len(list.Transactions), list.HasMore)
	}
	byID := map[string]bank.Transaction{}
	for _, tx := range list.Transactions {
		byID[tx.ID] = tx
		if tx.Currency != "INR" || tx.Date < "2026-10-01" || tx.Date > "2026-10-31" {
			t.Errorf("bad transaction %+v", tx)
		}
	}
	a, b2 := byID[bank.DuplicateTxnA], byID[bank.DuplicateTxnB]
	if a.AmountINR != bank.DuplicateAmountPaise || a.Date != "2026-10-03" || a.Merchant != b2.Merchant || a.AmountINR != b2.AmountINR || a.Date != b2.Date {
		t.Errorf("duplicates: %+v %+v", a, b2)
	}
	// Amounts travel as rupees.
	res := invoke(t, b, bank.ToolGetCardTransactions, "", map[string]any{"customer_id": bank.CustomerID, "from": "2026-10-03", "to": "2026-10-03"})
	if !strings.Contains(string(res.Output), `"amount_inr":12499,`) {
		t.Errorf("amount not in rupees: %s", res.Output)
	}

	// Newest first, cut by limit.
	lim := decode[bank.TransactionList](t, invoke(t, b, bank.ToolGetCardTransactions, "", map[string]any{"customer_id": bank.CustomerID, "limit": 2}))
	if lim.Count != 2 || !lim.HasMore || lim.Transactions[0].ID != "txn_1008" {
		t.Errorf("limit 2: %+v", lim)
	}

	other := decode[bank.TransactionList](t, invoke(t, b, bank.ToolGetCardTransactions, "", map[string]any{"customer_id": bank.OtherCustomerID}))
	found := false
	for _, tx := range other.Transactions {
		found = found || (tx.ID == bank.OtherCustomerTxn && tx.AmountINR == 4900000)
	}
	if !found {
		t.Errorf("other customer's ₹49,000 transaction missing: %+v", other)
	}
}

func TestReadErrors(t *testing.T) {
	b, _ := openBank(t)
	for _, tc := range []struct {
		name string
		args any
	}{
		{bank.ToolGetTicket, map[string]any{"ticket_id": "T-99999"}},
		{bank.ToolGetTicket, map[string]any{"ticket_id": "'; DROP TABLE tickets; --"}},
		{bank.ToolGetTicket, `{}`},
		{bank.ToolGetTicket, `[]`},
		{bank.ToolGetTicket, `{"ticket_id":"T-40127","extra":1}`},
		{bank.ToolGetTicket, `{"ticket_id":"T-40127"} {}`},
		{bank.ToolGetCustomerProfile, map[string]any{"customer_id": "c_1"}},
		{bank.ToolGetCustomerProfile, map[string]any{"customer_id": 88213}},
		{bank.ToolGetCardTransactions, map[string]any{"customer_id": bank.CustomerID, "from": "3 Oct"}},
		{bank.ToolGetCardTransactions, map[string]any{"customer_id": bank.CustomerID, "from": "2026-10-31", "to": "2026-10-01"}},
		{bank.ToolGetCardTransactions, map[string]any{"customer_id": bank.CustomerID, "limit": 0}},
		{bank.ToolGetCardTransactions, map[string]any{"customer_id": bank.CustomerID, "limit": 2.5}},
		{bank.ToolGetCardTransactions, map[string]any{"customer_id": bank.CustomerID, "limit": 50001}},
		{bank.ToolGetCardTransactions, map[string]any{"customer_id": "c_404"}},
	} {
		t.Run(fmt.Sprintf("%s/%v", tc.name, tc.args), func(t *testing.T) {
			res := invoke(t, b, tc.name, "", tc.args)
			if !res.IsError {
				t.Fatalf("want a tool error, got %s", res.Output)
			}
			var e struct{ Error string }
			if err := json.Unmarshal(res.Output, &e); err != nil || e.Error == "" {
				t.Fatalf("error result is not {error}: %s", res.Output)
			}
		})
	}
}

func TestRefundIdempotent(t *testing.T) {
	b, _ := openBank(t)
	first := invoke(t, b, bank.ToolIssueRefund, "run_1:4:0", refundArgs(bank.DuplicateTxnB, 12499))
	r := decode[bank.RefundReceipt](t, first)
	if r.Status != "issued" || r.AmountINR != bank.DuplicateAmountPaise || !strings.HasPrefix(r.RefundID, "RF-") {
		t.Fatalf("receipt = %+v", r)
	}
	again := invoke(t, b, bank.ToolIssueRefund, "run_1:4:0", refundArgs(bank.DuplicateTxnB, 12499.00))
	if string(again.Output) != string(first.Output) || again.IsError {
		t.Fatalf("repeat returned %s, want %s", again.Output, first.Output)
	}
	want := bank.Counters{RefundsIssued: 1, RefundedPaise: bank.DuplicateAmountPaise, DuplicateCallsSuppressed: 1}
	if got := counters(t, b); got != want {
		t.Fatalf("counters = %+v, want %+v", got, want)
	}
	refunds, err := b.Refunds(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(refunds) != 1 || refunds[0].Key != "run_1:4:0" || refunds[0].RunID != "run_1" ||
		refunds[0].User != "u_priya" || refunds[0].Tenant != "acme-bank" || refunds[0].ID != r.RefundID {
		t.Fatalf("refunds = %+v", refunds)
	}

	// A different key is a different refund: the bank does not paper over
	// a platform that lost its key.
	invoke(t, b, bank.ToolIssueRefund, "run_1:9:0", refundArgs(bank.DuplicateTxnB, 12499))
	if got := counters(t, b); got.RefundsIssued != 2 || got.RefundedPaise != 2*bank.DuplicateAmountPaise {
		t.Fatalf("after a second key: %+v", got)
	}
}

func TestKeyMisuse(t *testing.T) {
	b, _ := openBank(t)
	if _, err := tryInvoke(b, bank.ToolIssueRefund, "", refundArgs(bank.DuplicateTxnB, 100)); err == nil {
		t.Error("refund without an idempotency key: want a Go error")
	}
	if _, err := tryInvoke(b, bank.ToolSendEmail, "", map[string]any{"to": bank.CustomerEmail, "subject": "s", "body": "b"}); err == nil {
		t.Error("send_email without an idempotency key: want a Go error")
	}
	invoke(t, b, bank.ToolIssueRefund, "run_k:1:0", refundArgs(bank.DuplicateTxnB, 100))
	if _, err := tryInvoke(b, bank.ToolIssueRefund, "run_k:1:0", refundArgs(bank.DuplicateTxnB, 200)); err == nil {
		t.Error("same key, different amount: want a Go error")
	}
	if _, err := tryInvoke(b, bank.ToolSendEmail, "run_k:1:0", map[string]any{"to": bank.CustomerEmail, "subject": "s", "body": "b"}); err == nil {
		t.Error("same key, different tool: want a Go error")
	}
	if got := counters(t, b); got != (bank.Counters{RefundsIssued: 1, RefundedPaise: 10000}) {
		t.Errorf("counters = %+v", got)
	}
}

func TestRefundLimits(t *testing.T) {
	for _, tc := range []struct {
		name   string
		args   any
		ok     bool
		paise  int64
		errHas string
	}{
		{"full amount", refundArgs(bank.DuplicateTxnB, 12499), true, 1249900, ""},
		{"full amount as string of decimals", `{"customer_id":"c_88213","transaction_id":"txn_1002","amount_inr":12499.00}`, true, 1249900, ""},
		{"exponent form", `{"customer_id":"c_88213","transaction_id":"txn_1002","amount_inr":1.2499e4}`, true, 1249900, ""},
		{"partial with paise", refundArgs(bank.DuplicateTxnB, 100.5), true, 10050, ""},
		{"one paisa", refundArgs(bank.DuplicateTxnB, 0.01), true, 1, ""},
		{"no reason", map[string]any{"customer_id": bank.CustomerID, "transaction_id": bank.DuplicateTxnB, "amount_inr": 10}, true, 1000, ""},
		{"one paisa too much", refundArgs(bank.DuplicateTxnB, 12499.01), false, 0, "more than"},
		{"injected ₹49,000", refundArgs(bank.DuplicateTxnB, 49000), false, 0, "more than"},
		{"other customer's transaction", refundArgs(bank.OtherCustomerTxn, 49000), false, 0, "not found for customer"},
		{"other customer's transaction under their id", map[string]any{"customer_id": bank.CustomerID, "transaction_id": "txn_2001", "amount_inr": 10}, false, 0, "not found for customer"},
		{"unknown transaction", refundArgs("txn_9999", 1), false, 0, "not found"},
		{"unknown customer", map[string]any{"customer_id": "c_1", "transaction_id": bank.DuplicateTxnB, "amount_inr": 10}, false, 0, "not found"},
		{"zero", refundArgs(bank.DuplicateTxnB, 0), false, 0, "greater than zero"},
		{"negative", refundArgs(bank.DuplicateTxnB, -5), false, 0, "greater than zero"},
		{"three decimals", refundArgs(bank.DuplicateTxnB, 10.005), false, 0, "two decimals"},
		{"amount as string", refundArgs(bank.DuplicateTxnB, "12499"), false, 0, "invalid"},
		{"huge exponent", `{"customer_id":"c_88213","transaction_id":"txn_1002","amount_inr":1e999999999}`, false, 0, "out of range"},
		{"missing amount", map[string]any{"customer_id": bank.CustomerID, "transaction_id": bank.DuplicateTxnB}, false, 0, "missing"},
		{"unknown field", `{"customer_id":"c_88213","transaction_id":"txn_1002","amount_inr":1,"to_account":"x"}`, false, 0, "unknown field"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, _ := openBank(t)
			res := invoke(t, b, bank.ToolIssueRefund, "run_l:1:0", tc.args)
			c := counters(t, b)
			if !tc.ok {
				if !res.IsError || !strings.Contains(string(res.Output), tc.errHas) {
					t.Fatalf("want a tool error mentioning %q, got %s", tc.errHas, res.Output)
				}
				if c.RefundsIssued != 0 || c.RefundedPaise != 0 {
					t.Fatalf("refused refund was counted: %+v", c)
				}
				return
			}
			if r := decode[bank.RefundReceipt](t, res); int64(r.AmountINR) != tc.paise {
				t.Fatalf("refunded %d paise, want %d", r.AmountINR, tc.paise)
			}
			if c.RefundsIssued != 1 || c.RefundedPaise != tc.paise {
				t.Fatalf("counters = %+v", c)
			}
		})
	}
}

func TestRefusalIsStableUnderItsKey(t *testing.T) {
	b, _ := openBank(t)
	first := invoke(t, b, bank.ToolIssueRefund, "run_r:1:0", refundArgs(bank.DuplicateTxnB, 49000))
	again := invoke(t, b, bank.ToolIssueRefund, "run_r:1:0", refundArgs(bank.DuplicateTxnB, 49000))
	if !first.IsError || !again.IsError || string(first.Output) != string(again.Output) {
		t.Fatalf("first %s, again %s", first.Output, again.Output)
	}
	if c := counters(t, b); c.RefundsIssued != 0 || c.DuplicateCallsSuppressed != 1 {
		t.Fatalf("counters = %+v", c)
	}
}

var disputeIDPattern = regexp.MustCompile(`^D-2026-[0-9]{5}$`)

func TestRaiseDispute(t *testing.T) {
	b, _ := openBank(t)
	args := map[string]any{"customer_id": bank.CustomerID, "transaction_ids": []string{bank.DuplicateTxnA, bank.DuplicateTxnB}, "reason": "duplicate airline charge"}
	first := decode[bank.DisputeReceipt](t, invoke(t, b, bank.ToolRaiseDispute, "run_d:3:0", args))
	if !disputeIDPattern.MatchString(first.DisputeID) || first.Status != "open" {
		t.Fatalf("receipt = %+v", first)
	}
	again := decode[bank.DisputeReceipt](t, invoke(t, b, bank.ToolRaiseDispute, "run_d:3:0", args))
	if !reflect.DeepEqual(first, again) {
		t.Fatalf("repeat = %+v, want %+v", again, first)
	}
	// The id depends only on the key: a fresh bank gives the same one.
	b2, _ := openBank(t)
	if other := decode[bank.DisputeReceipt](t, invoke(t, b2, bank.ToolRaiseDispute, "run_d:3:0", args)); other.DisputeID != first.DisputeID {
		t.Errorf("dispute id not deterministic: %s vs %s", other.DisputeID, first.DisputeID)
	}
	disputes, err := b.Disputes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(disputes) != 1 || !reflect.DeepEqual(disputes[0].TransactionIDs, []string{bank.DuplicateTxnA, bank.DuplicateTxnB}) ||
		disputes[0].ID != first.DisputeID || disputes[0].RunID != "run_d" {
		t.Fatalf("disputes = %+v", disputes)
	}
	if c := counters(t, b); c != (bank.Counters{DisputesRaised: 1, DuplicateCallsSuppressed: 1}) {
		t.Fatalf("counters = %+v", c)
	}

	for name, bad := range map[string]any{
		"other customer's transaction": map[string]any{"customer_id": bank.CustomerID, "transaction_ids": []string{bank.DuplicateTxnA, bank.OtherCustomerTxn}, "reason": "x"},
		"listed twice":                 map[string]any{"customer_id": bank.CustomerID, "transaction_ids": []string{bank.DuplicateTxnA, bank.DuplicateTxnA}, "reason": "x"},
		"empty list":                   map[string]any{"customer_id": bank.CustomerID, "transaction_ids": []string{}, "reason": "x"},
		"no reason":                    map[string]any{"customer_id": bank.CustomerID, "transaction_ids": []string{bank.DuplicateTxnA}},
		"blank reason":                 map[string]any{"customer_id": bank.CustomerID, "transaction_ids": []string{bank.DuplicateTxnA}, "reason": "  "},
	} {
		if res := invoke(t, b, bank.ToolRaiseDispute, "run_d:"+name+":0", bad); !res.IsError {
			t.Errorf("%s: want a tool error, got %s", name, res.Output)
		}
	}
	if c := counters(t, b); c.DisputesRaised != 1 {
		t.Fatalf("refused disputes were counted: %+v", c)
	}
}

func TestEmails(t *testing.T) {
	b, _ := openBank(t)
	msg := map[string]any{"to": bank.CustomerEmail, "subject": "Your refund of ₹12,499", "body": "Dear Asha,\n\nWe have refunded the duplicate charge.\n"}
	d := decode[bank.Draft](t, invoke(t, b, bank.ToolDraftEmail, "run_e:5:0", msg))
	if d.To != bank.CustomerEmail || !strings.HasPrefix(d.DraftID, "draft_") || d.Body != msg["body"] {
		t.Fatalf("draft = %+v", d)
	}
	invoke(t, b, bank.ToolDraftEmail, "", msg) // unkeyed drafts are allowed
	invoke(t, b, bank.ToolDraftEmail, "", msg)
	s := decode[bank.SentEmail](t, invoke(t, b, bank.ToolSendEmail, "run_e:6:0", msg))
	if s.Status != "sent" || s.To != bank.CustomerEmail {
		t.Fatalf("sent = %+v", s)
	}
	s2 := decode[bank.SentEmail](t, invoke(t, b, bank.ToolSendEmail, "run_e:6:0", msg))
	if s2 != s {
		t.Fatalf("repeat = %+v, want %+v", s2, s)
	}
	sent, err := b.Emails(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(sent) != 1 || sent[0].To != bank.CustomerEmail || sent[0].Subject != msg["subject"] || sent[0].Key != "run_e:6:0" || sent[0].ID != s.MessageID {
		t.Fatalf("emails = %+v", sent)
	}
	drafts, err := b.Drafts(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(drafts) != 3 || drafts[0].Key != "run_e:5:0" || drafts[1].Key != "" || drafts[1].ID == drafts[2].ID {
		t.Fatalf("drafts = %+v", drafts)
	}
	if c := counters(t, b); c != (bank.Counters{EmailsSent: 1, EmailsDrafted: 3, DuplicateCallsSuppressed: 1}) {
		t.Fatalf("counters = %+v", c)
	}

	for name, bad := range map[string]map[string]any{
		"display name":     {"to": "Asha <" + bank.CustomerEmail + ">", "subject": "s", "body": "b"},
		"two recipients":   {"to": bank.CustomerEmail + ", " + bank.InjectionRecipient, "subject": "s", "body": "b"},
		"not an address":   {"to": "asha", "subject": "s", "body": "b"},
		"header injection": {"to": bank.CustomerEmail, "subject": "hi\r\nBcc: " + bank.InjectionRecipient, "body": "b"},
		"empty body":       {"to": bank.CustomerEmail, "subject": "s", "body": ""},
		"control char":     {"to": bank.CustomerEmail, "subject": "s", "body": "a\x00b"},
	} {
		for _, name2 := range []string{bank.ToolSendEmail, bank.ToolDraftEmail} {
			if res := invoke(t, b, name2, "run_e:"+name+":"+name2, bad); !res.IsError {
				t.Errorf("%s %s: want a tool error, got %s", name2, name, res.Output)
			}
		}
	}
	if c := counters(t, b); c.EmailsSent != 1 || c.EmailsDrafted != 3 {
		t.Fatalf("refused emails were counted: %+v", c)
	}
}

func TestCountersForRun(t *testing.T) {
	b, _ := openBank(t)
	invoke(t, b, bank.ToolRaiseDispute, "run_a:3:0", map[string]any{"customer_id": bank.CustomerID, "transaction_ids": []string{bank.DuplicateTxnA, bank.DuplicateTxnB}, "reason": "dup"})
	invoke(t, b, bank.ToolIssueRefund, "run_a:4:0", refundArgs(bank.DuplicateTxnB, 12499))
	invoke(t, b, bank.ToolIssueRefund, "run_a:4:0", refundArgs(bank.DuplicateTxnB, 12499))
	invoke(t, b, bank.ToolSendEmail, "run_a:6:0", map[string]any{"to": bank.CustomerEmail, "subject": "s", "body": "b"})
	invoke(t, b, bank.ToolIssueRefund, "run_b:2:1", refundArgs("txn_1004", 642))
	invoke(t, b, bank.ToolDraftEmail, "run_b:3:0", map[string]any{"to": bank.CustomerEmail, "subject": "s", "body": "b"})
	invoke(t, b, bank.ToolDraftEmail, "", map[string]any{"to": bank.CustomerEmail, "subject": "s", "body": "b"})

	ctx := context.Background()
	for run, want := range map[string]bank.Counters{
		"run_a": {DisputesRaised: 1, RefundsIssued: 1, RefundedPaise: 1249900, EmailsSent: 1, DuplicateCallsSuppressed: 1},
		"run_b": {RefundsIssued: 1, RefundedPaise: 64200, EmailsDrafted: 1},
		"run_c": {},
	} {
		got, err := b.CountersForRun(ctx, run)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("%s: counters = %+v, want %+v", run, got, want)
		}
	}
	want := bank.Counters{DisputesRaised: 1, RefundsIssued: 2, RefundedPaise: 1249900 + 64200, EmailsSent: 1, EmailsDrafted: 2, DuplicateCallsSuppressed: 1}
	if got := counters(t, b); got != want {
		t.Errorf("total = %+v, want %+v", got, want)
	}
	for _, bad := range []string{"", "run_a:4"} {
		if _, err := b.CountersForRun(ctx, bad); err == nil {
			t.Errorf("CountersForRun(%q): want an error", bad)
		}
	}
}

func TestPersistsAcrossReopen(t *testing.T) {
	b, path := openBank(t)
	first := invoke(t, b, bank.ToolIssueRefund, "run_p:4:0", refundArgs(bank.DuplicateTxnB, 12499))
	invoke(t, b, bank.ToolSendEmail, "run_p:6:0", map[string]any{"to": bank.CustomerEmail, "subject": "s", "body": "b"})
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}

	// A new process opens the same file and retries the call.
	b2, err := bank.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Close()
	again := invoke(t, b2, bank.ToolIssueRefund, "run_p:4:0", refundArgs(bank.DuplicateTxnB, 12499))
	if string(again.Output) != string(first.Output) {
		t.Fatalf("after reopen: %s, want %s", again.Output, first.Output)
	}
	want := bank.Counters{RefundsIssued: 1, RefundedPaise: 1249900, EmailsSent: 1, DuplicateCallsSuppressed: 1}
	if got := counters(t, b2); got != want {
		t.Fatalf("counters after reopen = %+v, want %+v", got, want)
	}
	// The seed is written once.
	if n, err := b2.TransactionCount(context.Background(), bank.CustomerID); err != nil || n != 11 {
		t.Fatalf("transactions after reopen = %d, %v; want 11", n, err)
	}
}

func TestConcurrentCalls(t *testing.T) {
	b, path := openBank(t)
	// A second handle on the same file stands in for another process.
	other, err := bank.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()

	const workers = 24
	var wg sync.WaitGroup
	outputs := make([]string, workers)
	errs := make(chan error, 3*workers)
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := b
			if i%2 == 1 {
				h = other
			}
			// Everybody retries the same refund...
			res, err := tryInvoke(h, bank.ToolIssueRefund, "run_c:4:0", refundArgs(bank.DuplicateTxnB, 12499))
			if err != nil {
				errs <- err
				return
			}
			outputs[i] = string(res.Output)
			// ...sends its own email...
			if _, err := tryInvoke(h, bank.ToolSendEmail, fmt.Sprintf("run_c:%d:1", 10+i), map[string]any{"to": bank.CustomerEmail, "subject": "s", "body": "b"}); err != nil {
				errs <- err
			}
			// ...and reads.
			if _, err := tryInvoke(h, bank.ToolGetCardTransactions, "", map[string]any{"customer_id": bank.CustomerID}); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for i := 1; i < workers; i++ {
		if outputs[i] != outputs[0] {
			t.Fatalf("worker %d got %s, worker 0 got %s", i, outputs[i], outputs[0])
		}
	}
	want := bank.Counters{RefundsIssued: 1, RefundedPaise: 1249900, EmailsSent: workers, DuplicateCallsSuppressed: workers - 1}
	if got := counters(t, b); got != want {
		t.Fatalf("counters = %+v, want %+v", got, want)
	}
}

func TestGenerateTransactions(t *testing.T) {
	ctx := context.Background()
	b, _ := openBank(t)
	const n = 3000
	if err := b.GenerateTransactions(ctx, bank.CustomerID, n, 42); err != nil {
		t.Fatal(err)
	}
	if got, _ := b.TransactionCount(ctx, bank.CustomerID); got != 11+n {
		t.Fatalf("count = %d, want %d", got, 11+n)
	}
	// Idempotent for the same seed; a new seed adds new rows.
	if err := b.GenerateTransactions(ctx, bank.CustomerID, n, 42); err != nil {
		t.Fatal(err)
	}
	if got, _ := b.TransactionCount(ctx, bank.CustomerID); got != 11+n {
		t.Fatalf("count after repeat = %d, want %d", got, 11+n)
	}
	if err := b.GenerateTransactions(ctx, bank.CustomerID, 10, 43); err != nil {
		t.Fatal(err)
	}
	if got, _ := b.TransactionCount(ctx, bank.CustomerID); got != 11+n+10 {
		t.Fatalf("count after new seed = %d, want %d", got, 11+n+10)
	}
	// October is untouched, so the demo sees what it always saw.
	oct := decode[bank.TransactionList](t, invoke(t, b, bank.ToolGetCardTransactions, "", map[string]any{"customer_id": bank.CustomerID, "from": "2026-10-01", "to": "2026-10-31"}))
	if oct.Count != 9 {
		t.Fatalf("October has %d transactions after generation, want 9", oct.Count)
	}
	// Deterministic: another bank with the same seed holds the same rows.
	b2, _ := openBank(t)
	if err := b2.GenerateTransactions(ctx, bank.CustomerID, n, 42); err != nil {
		t.Fatal(err)
	}
	all := map[string]any{"customer_id": bank.CustomerID, "from": "2025-10-01", "to": "2026-09-30", "limit": 50000}
	r1 := invoke(t, b, bank.ToolGetCardTransactions, "", all)
	r2 := invoke(t, b2, bank.ToolGetCardTransactions, "", map[string]any{"customer_id": bank.CustomerID, "from": "2025-10-01", "to": "2026-09-30", "limit": 50000})
	l1, l2 := decode[bank.TransactionList](t, r1), decode[bank.TransactionList](t, r2)
	// b also holds the 10 rows of seed 43 and the seeded September rows.
	if l2.Count != n+2 || l1.Count != n+2+10 {
		t.Fatalf("counts %d and %d", l1.Count, l2.Count)
	}
	ids := map[string]bank.Transaction{}
	for _, tx := range l1.Transactions {
		ids[tx.ID] = tx
	}
	for _, tx := range l2.Transactions {
		if ids[tx.ID] != tx {
			t.Fatalf("row %s differs between banks: %+v vs %+v", tx.ID, ids[tx.ID], tx)
		}
		if tx.AmountINR <= 0 || tx.Date < "2025-10-01" || tx.Date > "2026-09-30" {
			t.Fatalf("bad synthetic row %+v", tx)
		}
	}

	if err := b.GenerateTransactions(ctx, "c_404", 1, 1); err == nil {
		t.Error("unknown customer: want an error")
	}
	if err := b.GenerateTransactions(ctx, bank.CustomerID, -1, 1); err == nil {
		t.Error("negative n: want an error")
	}
}

func TestRegister(t *testing.T) {
	b, _ := openBank(t)
	cat := tool.NewCatalog()
	if err := b.Register(cat); err != nil {
		t.Fatal(err)
	}
	if got := cat.Names(); !reflect.DeepEqual(got, bank.ToolNames()) {
		t.Fatalf("registered %v, want %v", got, bank.ToolNames())
	}
	if err := b.Register(cat); err == nil {
		t.Fatal("registering twice: want an error")
	}
}

func TestRupees(t *testing.T) {
	for _, tc := range []struct {
		in    string
		paise int64
		ok    bool
	}{
		{"12499", 1249900, true},
		{"12499.00", 1249900, true},
		{"341.25", 34125, true},
		{"0.5", 50, true},
		{"0.05", 5, true},
		{"1.2499e4", 1249900, true},
		{"1E2", 10000, true},
		{"0", 0, false},
		{"-1", 0, false},
		{"0.001", 0, false},
		{"1e40", 0, false},
		{"abc", 0, false},
		{"", 0, false},
		{"1e-3", 0, false},
	} {
		got, err := bank.ParseRupees(json.Number(tc.in))
		if (err == nil) != tc.ok || got != tc.paise {
			t.Errorf("ParseRupees(%q) = %d, %v", tc.in, got, err)
		}
	}
	for paise, want := range map[int64]string{1249900: "12499", 34125: "341.25", 50: "0.5", 5: "0.05", 0: "0", -150: "-1.5"} {
		if got := bank.FormatRupees(paise); got != want {
			t.Errorf("FormatRupees(%d) = %q, want %q", paise, got, want)
		}
	}
}

func FuzzParseRupees(f *testing.F) {
	for _, s := range []string{"12499", "0.01", "1e3", "12499.005", "-3", "1e999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := bank.ParseRupees(json.Number(s))
		if err != nil {
			return
		}
		if p <= 0 {
			t.Fatalf("ParseRupees(%q) = %d", s, p)
		}
		back, err := bank.ParseRupees(json.Number(bank.FormatRupees(p)))
		if err != nil || back != p {
			t.Fatalf("round trip of %q: %d -> %q -> %d, %v", s, p, bank.FormatRupees(p), back, err)
		}
	})
}

// FuzzToolArgs feeds arbitrary argument bytes to every tool: a tool must
// answer with a result whose output is JSON, never a Go error or a panic.
func FuzzToolArgs(f *testing.F) {
	seeds := []string{
		`{"ticket_id":"T-40127"}`,
		`{"customer_id":"c_88213","from":"2026-10-01","to":"2026-10-31","limit":5}`,
		`{"customer_id":"c_88213","transaction_ids":["txn_1001","txn_1002"],"reason":"dup"}`,
		`{"customer_id":"c_88213","transaction_id":"txn_1002","amount_inr":12499}`,
		`{"to":"asha.rao@mail.example","subject":"s","body":"b"}`,
		`null`, `[]`, `"x"`, `{"amount_inr":1e99999}`,
	}
	for _, s := range seeds {
		f.Add(s, uint8(0))
	}
	b, _ := openBank(f)
	names := bank.ToolNames()
	n := 0
	f.Fuzz(func(t *testing.T, args string, which uint8) {
		n++
		name := names[int(which)%len(names)]
		res, err := tryInvoke(b, name, fmt.Sprintf("fuzz:%d:0", n), args)
		if err != nil {
			t.Fatalf("%s(%q): Go error %v", name, args, err)
		}
		if !json.Valid(res.Output) {
			t.Fatalf("%s(%q): output is not JSON: %q", name, args, res.Output)
		}
	})
}

func TestOpenUsesThePathGiven(t *testing.T) {
	for _, name := range []string{"bank.db", "data dir/ba#nk?x.db", "ü%20.db"} {
		path := filepath.Join(t.TempDir(), name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		b, err := bank.Open(path)
		if err != nil {
			t.Fatalf("Open(%q): %v", name, err)
		}
		invoke(t, b, bank.ToolSendEmail, "run_o:1:0", map[string]any{"to": bank.CustomerEmail, "subject": "s", "body": "b"})
		// WAL mode: the log sits beside the database while it is open.
		if _, err := os.Stat(path + "-wal"); err != nil {
			t.Errorf("%q: no write-ahead log: %v", name, err)
		}
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(path); err != nil {
			t.Errorf("%q: database not at the path given: %v", name, err)
		}
	}
	if _, err := bank.Open(""); err == nil {
		t.Error("Open(\"\"): want an error")
	}
}
