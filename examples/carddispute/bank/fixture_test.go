package bank_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentplane/agentplane/examples/carddispute/bank"
)

func TestAddFixture(t *testing.T) {
	ctx := context.Background()
	b, _ := openBank(t)
	f := bank.Fixture{
		Customers: []bank.Profile{{CustomerID: "c_500", Name: "Ravi Kumar", Email: "ravi@mail.example", CardLast4: "1234", Segment: "retail"}},
		Transactions: []bank.FixtureTransaction{
			{CustomerID: "c_500", ID: "txn_500a", Date: "2026-10-03", Merchant: "METRO CASH", AmountPaise: 150000},
			{CustomerID: "c_500", ID: "txn_500b", Date: "2026-10-03", Merchant: "METRO CASH", AmountPaise: 150000},
		},
		Tickets: []bank.Ticket{{TicketID: "T-500", CustomerID: "c_500", Subject: "Charged twice", Body: "Two identical charges."}},
	}
	if err := b.AddFixture(ctx, f); err != nil {
		t.Fatal(err)
	}
	res := invoke(t, b, bank.ToolGetTicket, "", map[string]string{"ticket_id": "T-500"})
	var tk bank.Ticket
	if res.IsError || json.Unmarshal(res.Output, &tk) != nil || tk.CustomerID != "c_500" {
		t.Fatalf("get_ticket T-500 = %s", res.Output)
	}
	res = invoke(t, b, bank.ToolGetCardTransactions, "", map[string]string{"customer_id": "c_500"})
	var tl bank.TransactionList
	if err := json.Unmarshal(res.Output, &tl); err != nil || tl.Count != 2 || tl.Transactions[0].AmountINR != 150000 {
		t.Fatalf("transactions = %s", res.Output)
	}
	// Seed data is still there.
	if n, _ := b.TransactionCount(ctx, bank.CustomerID); n == 0 {
		t.Fatal("seed data lost")
	}

	for _, tc := range []struct {
		name string
		f    bank.Fixture
		want string
	}{
		{"existing id", bank.Fixture{Tickets: []bank.Ticket{{TicketID: bank.TicketID, CustomerID: bank.CustomerID, Subject: "s", Body: "b"}}}, "T-40127"},
		{"unknown customer", bank.Fixture{Transactions: []bank.FixtureTransaction{{CustomerID: "c_777", ID: "txn_777", Date: "2026-10-01", Merchant: "X", AmountPaise: 1}}}, "no customer c_777"},
		{"bad date", bank.Fixture{Transactions: []bank.FixtureTransaction{{CustomerID: "c_500", ID: "txn_501", Date: "3 Oct", Merchant: "X", AmountPaise: 1}}}, "not YYYY-MM-DD"},
		{"bad amount", bank.Fixture{Transactions: []bank.FixtureTransaction{{CustomerID: "c_500", ID: "txn_502", Date: "2026-10-01", Merchant: "X", AmountPaise: 0}}}, "out of range"},
		{"bad email", bank.Fixture{Customers: []bank.Profile{{CustomerID: "c_600", Name: "N", Email: "not an address", CardLast4: "1111"}}}, "email"},
		{"bad ticket id", bank.Fixture{Tickets: []bank.Ticket{{TicketID: "X-1", CustomerID: "c_500", Subject: "s", Body: "b"}}}, "not a ticket id"},
	} {
		err := b.AddFixture(ctx, tc.f)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want it to mention %q", tc.name, err, tc.want)
		}
	}
	// A failed fixture writes nothing: all or nothing.
	bad := bank.Fixture{
		Customers: []bank.Profile{{CustomerID: "c_700", Name: "A", Email: "a@mail.example", CardLast4: "0000"}},
		Tickets:   []bank.Ticket{{TicketID: "T-500", CustomerID: "c_700", Subject: "dup", Body: "dup"}},
	}
	if err := b.AddFixture(ctx, bad); err == nil {
		t.Fatal("duplicate ticket id accepted")
	}
	res = invoke(t, b, bank.ToolGetCustomerProfile, "", map[string]string{"customer_id": "c_700"})
	if !res.IsError {
		t.Fatalf("customer of a failed fixture exists: %s", res.Output)
	}
}
