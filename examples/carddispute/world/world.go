// Package world is the card-dispute example's eval world (eval.World): each
// task gets a simulated bank of its own (package bank) holding the seed data
// plus the task's fixture — customers, card transactions, support tickets,
// optionally a synthetic history — and a run is graded on the disputes,
// refunds and emails it left there.
//
// A task's `world:` in an eval set:
//
//	world:
//	  customer: c_50100            # the customer the ticket is about; $customer.id, .email, .name
//	  customers: [{id: c_50100, name: Kavya Menon, email: kavya.menon@mail.example, card_last4: "2281"}]
//	  transactions: [{id: txn_50101, customer: c_50100, date: 2026-10-14, merchant: METRO, amount_inr: 2350}]
//	  tickets: [{id: T-50100, customer: c_50100, subject: ..., body: ...}]
//	  generate: [{customer: c_50100, n: 3000, seed: 7}]
package world

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/agentplane/agentplane/eval"
	"github.com/agentplane/agentplane/examples/carddispute/bank"
	"github.com/agentplane/agentplane/tool"
)

// Name is the world's name in eval sets (`world: card-dispute`).
const Name = "card-dispute"

// World is the card-dispute bank as an eval world. Its zero value is ready
// and safe for concurrent use.
type World struct{}

var _ eval.World = World{}

// Name implements eval.World.
func (World) Name() string { return Name }

// Tools implements eval.World: the bank's tier-1 tools.
func (World) Tools() []string { return bank.ToolNames() }

// Variables implements eval.World.
func (World) Variables() []string { return []string{"customer.email", "customer.id", "customer.name"} }

// Records implements eval.World.
func (World) Records() map[string][]string {
	return map[string][]string{
		"disputes": {"customer_id", "transaction_ids", "reason"},
		"refunds":  {"customer_id", "transaction_id", "amount_inr", "reason"},
		"emails":   {"to", "subject", "body"},
	}
}

// Fixture is one task's bank.
type Fixture struct {
	// Customer is the customer the task is about.
	Customer bank.Profile
	Bank     bank.Fixture
	Generate []Generate
}

// Generate adds synthetic transactions (bank.GenerateTransactions).
type Generate struct {
	Customer string
	N        int
	Seed     int64
}

// Vars implements eval.Fixture.
func (f *Fixture) Vars() map[string]string {
	return map[string]string{"customer.id": f.Customer.CustomerID, "customer.email": f.Customer.Email, "customer.name": f.Customer.Name}
}

var reCustomer = regexp.MustCompile(`\bc_[0-9]{1,12}\b`)

// Fixture implements eval.World. Without a fixture (a recorded run that
// matches no task) it is the seed bank, about the seed customer the text
// names (c_…), if any.
func (World) Fixture(raw json.RawMessage, text string) (eval.Fixture, error) {
	fx := &Fixture{}
	if raw == nil {
		if id := reCustomer.FindString(text); id != "" {
			for _, c := range bank.SeedCustomers() {
				if c.CustomerID == id {
					fx.Customer = c
				}
			}
		}
		return fx, nil
	}
	d := &decoder{}
	top := d.object(raw, "", []string{"customer", "customers", "transactions", "tickets", "generate"})
	for i, c := range d.list(top["customers"], "customers") {
		at := fmt.Sprintf("customers[%d]", i)
		f := d.object(c, at, []string{"id", "name", "email", "card_last4", "segment"})
		p := bank.Profile{CustomerID: d.str(f, at, "id", true), Name: d.str(f, at, "name", true), Email: d.str(f, at, "email", true),
			CardLast4: d.str(f, at, "card_last4", true), Segment: d.str(f, at, "segment", false)}
		if p.Segment == "" {
			p.Segment = "retail"
		}
		fx.Bank.Customers = append(fx.Bank.Customers, p)
	}
	for i, t := range d.list(top["transactions"], "transactions") {
		at := fmt.Sprintf("transactions[%d]", i)
		f := d.object(t, at, []string{"id", "customer", "date", "merchant", "amount_inr"})
		ft := bank.FixtureTransaction{ID: d.str(f, at, "id", true), CustomerID: d.str(f, at, "customer", true),
			Date: d.str(f, at, "date", true), Merchant: d.str(f, at, "merchant", true)}
		if a, ok := f["amount_inr"]; !ok {
			d.fail(at+".amount_inr", "required")
		} else {
			var n json.Number
			dec := json.NewDecoder(bytes.NewReader(a))
			dec.UseNumber()
			if err := dec.Decode(&n); err != nil {
				d.fail(at+".amount_inr", "want an amount in rupees, such as 12499 or 341.25")
			} else if v, err := bank.ParseRupees(n); err != nil {
				d.fail(at+".amount_inr", "%v", err)
			} else {
				ft.AmountPaise = v
			}
		}
		fx.Bank.Transactions = append(fx.Bank.Transactions, ft)
	}
	for i, t := range d.list(top["tickets"], "tickets") {
		at := fmt.Sprintf("tickets[%d]", i)
		f := d.object(t, at, []string{"id", "customer", "subject", "body"})
		fx.Bank.Tickets = append(fx.Bank.Tickets, bank.Ticket{TicketID: d.str(f, at, "id", true), CustomerID: d.str(f, at, "customer", true),
			Subject: d.str(f, at, "subject", true), Body: d.str(f, at, "body", true)})
	}
	for i, g := range d.list(top["generate"], "generate") {
		at := fmt.Sprintf("generate[%d]", i)
		f := d.object(g, at, []string{"customer", "n", "seed"})
		gen := Generate{Customer: d.str(f, at, "customer", true), N: int(d.integer(f, at, "n", 1, 100000, true)),
			Seed: d.integer(f, at, "seed", 0, 1<<62, false)}
		fx.Generate = append(fx.Generate, gen)
	}
	// What the bank would refuse, said before any bank is opened.
	if err := checkFixture(fx.Bank); err != nil {
		d.errs = append(d.errs, err)
	}
	known := map[string]bank.Profile{}
	for _, c := range bank.SeedCustomers() {
		known[c.CustomerID] = c
	}
	for _, c := range fx.Bank.Customers {
		known[c.CustomerID] = c
	}
	if id := d.str(top, "", "customer", true); id != "" {
		c, ok := known[id]
		if !ok {
			d.fail("customer", "%s is neither a seed customer nor one this task's bank adds", id)
		}
		fx.Customer = c
	}
	if err := errors.Join(d.errs...); err != nil {
		return nil, err
	}
	return fx, nil
}

// checkFixture finds id clashes and dangling customers (the bank checks
// formats when the fixture is added).
func checkFixture(fx bank.Fixture) error {
	var errs []string
	custs := map[string]bool{}
	for _, c := range bank.SeedCustomers() {
		custs[c.CustomerID] = true
	}
	seen := map[string]bool{}
	for _, c := range fx.Customers {
		if custs[c.CustomerID] {
			errs = append(errs, fmt.Sprintf("customer %s exists already", c.CustomerID))
		}
		custs[c.CustomerID] = true
	}
	for _, t := range fx.Transactions {
		if seen[t.ID] {
			errs = append(errs, fmt.Sprintf("transaction %s is listed twice", t.ID))
		}
		seen[t.ID] = true
		if !custs[t.CustomerID] {
			errs = append(errs, fmt.Sprintf("transaction %s: no customer %s", t.ID, t.CustomerID))
		}
	}
	for _, t := range fx.Tickets {
		if !custs[t.CustomerID] {
			errs = append(errs, fmt.Sprintf("ticket %s: no customer %s", t.TicketID, t.CustomerID))
		}
	}
	if len(errs) == 0 {
		return nil
	}
	sort.Strings(errs)
	return errors.New(strings.Join(errs, "; "))
}

// Open implements eval.World: a bank in dir with the seed data and the
// fixture.
func (World) Open(ctx context.Context, dir string, f eval.Fixture) (eval.Env, error) {
	fx, ok := f.(*Fixture)
	if !ok {
		return nil, fmt.Errorf("card-dispute world: fixture of type %T", f)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	b, err := bank.Open(filepath.Join(dir, "bank.db"))
	if err != nil {
		return nil, err
	}
	if err := b.AddFixture(ctx, fx.Bank); err != nil {
		b.Close()
		return nil, err
	}
	for _, g := range fx.Generate {
		if err := b.GenerateTransactions(ctx, g.Customer, g.N, g.Seed); err != nil {
			b.Close()
			return nil, err
		}
	}
	return Env{b}, nil
}

// Env is one task's bank.
type Env struct{ *bank.Bank }

// Records implements eval.Env: the disputes, refunds and emails run runID
// left at the bank.
func (e Env) Records(ctx context.Context, runID string) (map[string][]map[string]any, error) {
	ds, err := e.Disputes(ctx)
	if err != nil {
		return nil, err
	}
	rs, err := e.Refunds(ctx)
	if err != nil {
		return nil, err
	}
	es, err := e.Emails(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string][]map[string]any{"disputes": {}, "refunds": {}, "emails": {}}
	for _, d := range ds {
		if d.RunID != runID {
			continue
		}
		ids := make([]any, len(d.TransactionIDs))
		for i, id := range d.TransactionIDs {
			ids[i] = id
		}
		out["disputes"] = append(out["disputes"], map[string]any{"customer_id": d.CustomerID, "transaction_ids": ids, "reason": d.Reason})
	}
	for _, r := range rs {
		if r.RunID != runID {
			continue
		}
		out["refunds"] = append(out["refunds"], map[string]any{"customer_id": r.CustomerID, "transaction_id": r.TransactionID,
			"amount_inr": json.Number(bank.FormatRupees(r.AmountPaise)), "reason": r.Reason})
	}
	for _, m := range es {
		if m.RunID != runID {
			continue
		}
		out["emails"] = append(out["emails"], map[string]any{"to": m.To, "subject": m.Subject, "body": m.Body})
	}
	return out, nil
}

// Register implements eval.Env (and catalog.Registrar).
func (e Env) Register(c *tool.Catalog) error { return e.Bank.Register(c) }

// decoder reads a fixture's JSON strictly, collecting eval.FieldErrors.
type decoder struct{ errs []error }

func (d *decoder) fail(path, format string, args ...any) {
	d.errs = append(d.errs, eval.FieldErrorf(path, format, args...))
}

func join(at, field string) string {
	if at == "" {
		return field
	}
	return at + "." + field
}

func (d *decoder) object(raw json.RawMessage, at string, allowed []string) map[string]json.RawMessage {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		d.fail(at, "want a mapping")
		return nil
	}
	for k := range m {
		if !slices.Contains(allowed, k) {
			d.fail(join(at, k), "unknown field (known: %s)", strings.Join(allowed, ", "))
			delete(m, k)
		}
	}
	return m
}

func (d *decoder) list(raw json.RawMessage, at string) []json.RawMessage {
	if raw == nil {
		return nil
	}
	var l []json.RawMessage
	if err := json.Unmarshal(raw, &l); err != nil {
		d.fail(at, "want a list")
		return nil
	}
	return l
}

func (d *decoder) str(f map[string]json.RawMessage, at, field string, required bool) string {
	raw, ok := f[field]
	if !ok {
		if required {
			d.fail(join(at, field), "required")
		}
		return ""
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil || strings.TrimSpace(s) == "" {
		d.fail(join(at, field), "want a non-empty string")
		return ""
	}
	return s
}

func (d *decoder) integer(f map[string]json.RawMessage, at, field string, lo, hi int64, required bool) int64 {
	raw, ok := f[field]
	if !ok {
		if required {
			d.fail(join(at, field), "required")
		}
		return 0
	}
	var v int64
	if err := json.Unmarshal(raw, &v); err != nil || v < lo || v > hi {
		d.fail(join(at, field), "want a whole number from %d to %d", lo, hi)
		return 0
	}
	return v
}
