package bank

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Fixture is extra data for a bank: customers, card transactions and
// support tickets added on top of the seed data. Evals use it to give each
// task its own simulated bank (a customer with a duplicate charge, one
// without, a ticket carrying an injected instruction, ...).
type Fixture struct {
	Customers    []Profile
	Transactions []FixtureTransaction
	Tickets      []Ticket
}

// FixtureTransaction is a card transaction of a customer.
type FixtureTransaction struct {
	CustomerID string
	ID         string
	Date       string // YYYY-MM-DD
	Merchant   string
	// AmountPaise is the amount in paise (₹12,499.00 is 1249900).
	AmountPaise int64
}

// AddFixture writes f in one transaction: everything or nothing. Ids must
// be well formed and new (an id the bank already holds, seed data
// included, is an error), transactions and tickets must name a customer
// that exists or is added by f, and amounts must be positive.
func (b *Bank) AddFixture(ctx context.Context, f Fixture) error {
	if err := f.check(); err != nil {
		return fmt.Errorf("bank: fixture: %w", err)
	}
	tx, err := b.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("bank: fixture: %w", err)
	}
	defer tx.Rollback()
	for _, c := range f.Customers {
		if _, err := tx.ExecContext(ctx,
			`INSERT INTO customers (id, name, email, card_last4, segment) VALUES (?, ?, ?, ?, ?)`,
			c.CustomerID, c.Name, c.Email, c.CardLast4, c.Segment); err != nil {
			return fmt.Errorf("bank: fixture: customer %s: %w", c.CustomerID, err)
		}
	}
	for _, t := range f.Transactions {
		if ok, err := b.customerExists(ctx, tx, t.CustomerID); err != nil {
			return fmt.Errorf("bank: fixture: %w", err)
		} else if !ok {
			return fmt.Errorf("bank: fixture: transaction %s: no customer %s", t.ID, t.CustomerID)
		}
		if _, err := tx.ExecContext(ctx,
			`INSERT INTO transactions (id, customer_id, date, merchant, amount_paise, currency) VALUES (?, ?, ?, ?, ?, 'INR')`,
			t.ID, t.CustomerID, t.Date, t.Merchant, t.AmountPaise); err != nil {
			return fmt.Errorf("bank: fixture: transaction %s: %w", t.ID, err)
		}
	}
	for _, t := range f.Tickets {
		if ok, err := b.customerExists(ctx, tx, t.CustomerID); err != nil {
			return fmt.Errorf("bank: fixture: %w", err)
		} else if !ok {
			return fmt.Errorf("bank: fixture: ticket %s: no customer %s", t.TicketID, t.CustomerID)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO tickets (id, customer_id, subject, body) VALUES (?, ?, ?, ?)`,
			t.TicketID, t.CustomerID, t.Subject, t.Body); err != nil {
			return fmt.Errorf("bank: fixture: ticket %s: %w", t.TicketID, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("bank: fixture: %w", err)
	}
	return nil
}

// check validates f without the database.
func (f Fixture) check() error {
	var errs []error
	for i, c := range f.Customers {
		if err := checkCustomerID(c.CustomerID); err != nil {
			errs = append(errs, fmt.Errorf("customers[%d]: %w", i, err))
		}
		if err := checkAddress("email", c.Email); err != nil {
			errs = append(errs, fmt.Errorf("customers[%d]: %w", i, err))
		}
		if c.Name == "" || len(c.CardLast4) != 4 {
			errs = append(errs, fmt.Errorf("customers[%d]: name and a four-digit card_last4 are required", i))
		}
	}
	for i, t := range f.Transactions {
		if err := checkTxnID("id", t.ID); err != nil {
			errs = append(errs, fmt.Errorf("transactions[%d]: %w", i, err))
		}
		if _, err := time.Parse(time.DateOnly, t.Date); err != nil {
			errs = append(errs, fmt.Errorf("transactions[%d]: date %q is not YYYY-MM-DD", i, t.Date))
		}
		if t.Merchant == "" {
			errs = append(errs, fmt.Errorf("transactions[%d]: no merchant", i))
		}
		if t.AmountPaise <= 0 || t.AmountPaise > maxPaise {
			errs = append(errs, fmt.Errorf("transactions[%d]: amount %d paise is out of range", i, t.AmountPaise))
		}
	}
	for i, t := range f.Tickets {
		if !ticketIDPattern.MatchString(t.TicketID) {
			errs = append(errs, fmt.Errorf("tickets[%d]: %q is not a ticket id (T- followed by digits)", i, t.TicketID))
		}
		if t.Subject == "" || t.Body == "" {
			errs = append(errs, fmt.Errorf("tickets[%d]: subject and body are required", i))
		}
	}
	return errors.Join(errs...)
}

// SeedCustomers returns the profiles of the customers every bank starts
// with (Open writes them), so that callers can refer to them without a
// database at hand.
func SeedCustomers() []Profile {
	out := make([]Profile, len(seedCustomers))
	for i, c := range seedCustomers {
		out[i] = Profile{CustomerID: c.id, Name: c.name, Email: c.email, CardLast4: c.last4, Segment: c.segment}
	}
	return out
}
