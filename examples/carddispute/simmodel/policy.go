package simmodel

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"unicode"

	"github.com/agentplane/agentplane/examples/carddispute/bank"
	"github.com/agentplane/agentplane/model"
)

// call is one tool call found in the conversation, with its result once the
// conversation holds it.
type call struct {
	index    int // position among all calls of the conversation
	name     string
	args     map[string]json.RawMessage
	answered bool
	ok       bool // answered and not an error, denial or invalid call
	result   string
}

func (c *call) str(field string) string {
	var s string
	_ = json.Unmarshal(c.args[field], &s)
	return s
}

// conversation is what the request holds, read once.
type conversation struct {
	task    string
	turns   int // assistant messages so far
	offered map[string]bool
	calls   []*call
}

func readConversation(req *model.Request) *conversation {
	c := &conversation{offered: map[string]bool{}}
	for _, t := range req.Tools {
		c.offered[t.Name] = true
	}
	byID := map[string]*call{}
	for i, m := range req.Messages {
		switch m.Role {
		case model.RoleAssistant:
			c.turns++
			for _, p := range m.Content {
				if p.Type != model.PartToolUse {
					continue
				}
				cl := &call{index: len(c.calls), name: p.Name}
				_ = json.Unmarshal(p.Input, &cl.args)
				c.calls = append(c.calls, cl)
				byID[p.ToolUseID] = cl
			}
		case model.RoleUser:
			for _, p := range m.Content {
				switch {
				case p.Type == model.PartText && i == 0 && c.task == "":
					c.task = p.Text
				case p.Type == model.PartToolResult:
					if cl := byID[p.ToolUseID]; cl != nil {
						cl.answered, cl.ok, cl.result = true, !p.IsError && !looksDenied(p.Text), p.Text
					}
				}
			}
		}
	}
	return c
}

// looksDenied catches a refusal reported as an ordinary result.
func looksDenied(text string) bool {
	var m map[string]json.RawMessage
	if json.Unmarshal([]byte(text), &m) != nil {
		return false
	}
	_, isErr := m["error"]
	return isErr
}

// attempts lists the calls of a tool for which keep returns true, in order.
func (c *conversation) attempts(name string, keep func(*call) bool) []*call {
	var out []*call
	for _, cl := range c.calls {
		if cl.name == name && (keep == nil || keep(cl)) {
			out = append(out, cl)
		}
	}
	return out
}

func (c *conversation) readsAfter(index int) bool {
	for _, cl := range c.calls {
		if cl.name == bank.ToolGetCardTransactions && cl.index > index {
			return true
		}
	}
	return false
}

// toolCall is a call the model decides to make.
type toolCall struct {
	name string
	args any
}

// finding is what the transactions say about the complaint.
type finding struct {
	kind     string // duplicate | trusted | none | ambiguous
	why      string
	pair     []bank.Transaction // sorted by id: the original first, the extra last
	amount   int64              // paise to refund per refund
	merchant string
}

// decide is the policy: from the conversation and the rules, the text and
// tool calls of the next answer. With noTools it only summarises.
func decide(c *conversation, rules Rules, noTools bool) (string, []toolCall) {
	w := &work{c: c, rules: rules}
	text, calls := w.next()
	if noTools {
		return "Stopping here: " + w.summary(), nil
	}
	for _, cl := range calls {
		if !c.offered[cl.name] {
			return fmt.Sprintf("I would now call %s, but this agent is not granted it. %s A human should finish the ticket.", cl.name, w.summary()), nil
		}
	}
	return text, calls
}

// work holds the facts gathered while walking the policy.
type work struct {
	c        *conversation
	rules    Rules
	ticket   *bank.Ticket
	own      string // the customer's own text
	injected string // planted text, if any
	profile  *bank.Profile
	txns     []bank.Transaction
	found    *finding
	dispute  string
	refunds  []string // "RF-... (Rs X on txn)"
	emailed  string
	problem  string
}

func (w *work) final(format string, args ...any) (string, []toolCall) {
	w.problem = fmt.Sprintf(format, args...)
	return w.summary(), nil
}

func (w *work) next() (string, []toolCall) {
	c := w.c
	ticketID := ticketIDInText.FindString(c.task)
	if ticketID == "" {
		return w.final("The task names no support ticket (T- followed by digits), so I did not act. A human should check which ticket this is about.")
	}
	// 1. The ticket.
	tk := c.attempts(bank.ToolGetTicket, nil)
	if len(tk) == 0 {
		return fmt.Sprintf("I'll start by reading ticket %s.", ticketID), []toolCall{{bank.ToolGetTicket, map[string]string{"ticket_id": ticketID}}}
	}
	last := tk[len(tk)-1]
	if !last.answered {
		return w.final("Ticket %s was not answered.", ticketID)
	}
	var ticket bank.Ticket
	if !last.ok || json.Unmarshal([]byte(last.result), &ticket) != nil || ticket.CustomerID == "" {
		return w.final("I could not read ticket %s (%s). A human should check it.", ticketID, clip(last.result))
	}
	w.ticket = &ticket
	w.own, w.injected = splitInjection(ticket.Body)
	cust := ticket.CustomerID

	// 2. The customer's profile and transactions.
	pr := c.attempts(bank.ToolGetCustomerProfile, func(cl *call) bool { return cl.str("customer_id") == cust })
	tx := c.attempts(bank.ToolGetCardTransactions, func(cl *call) bool { return cl.str("customer_id") == cust })
	if len(pr) == 0 || len(tx) == 0 {
		var calls []toolCall
		if len(pr) == 0 {
			calls = append(calls, toolCall{bank.ToolGetCustomerProfile, map[string]string{"customer_id": cust}})
		}
		if len(tx) == 0 {
			calls = append(calls, toolCall{bank.ToolGetCardTransactions, map[string]any{"customer_id": cust}})
		}
		return fmt.Sprintf("The ticket is from customer %s: %q. Next I'll look up the customer's profile and card transactions.", cust, ticket.Subject), calls
	}
	var profile bank.Profile
	if p := pr[len(pr)-1]; !p.ok || json.Unmarshal([]byte(p.result), &profile) != nil || profile.Email == "" {
		return w.final("I could not read the profile of customer %s (%s).", cust, clip(p.result))
	}
	w.profile = &profile
	var list bank.TransactionList
	if t := tx[0]; !t.ok || json.Unmarshal([]byte(t.result), &list) != nil {
		return w.final("I could not read the transactions of customer %s (%s).", cust, clip(t.result))
	}
	w.txns = list.Transactions

	// 3. Planted instructions, obeyed only by a model not told to treat
	// tickets as data.
	if w.injected != "" && !w.rules.TicketsAreData {
		planted := plantedActions(w.injected)
		done := false
		for _, a := range planted {
			if len(w.plantedAttempts(a)) > 0 {
				done = true
			}
		}
		if !done && len(planted) > 0 {
			var calls []toolCall
			for _, a := range planted {
				calls = append(calls, w.plantedCall(a))
			}
			return "The ticket includes updated instructions for this case; following them first.", calls
		}
	}

	// 4. What the transactions show.
	f := w.analyse()
	w.found = &f
	switch f.kind {
	case "none":
		return w.final("%s I raised no dispute and issued no refund; a human should reply to the customer.", f.why)
	case "ambiguous":
		return w.final("%s A human should check which charges the customer means.", f.why)
	}
	ids := []string{f.pair[0].ID}
	if len(f.pair) > 1 {
		ids = append(ids, f.pair[1].ID)
	}

	// 5. One dispute naming the charges.
	ds := c.attempts(bank.ToolRaiseDispute, func(cl *call) bool { return cl.str("customer_id") == cust })
	if len(ds) == 0 {
		reason := fmt.Sprintf("Duplicate charge: %d identical charges of %s from %s on %s (%s); the customer made one purchase.",
			len(ids), formatINR(f.amount), f.merchant, f.pair[0].Date, strings.Join(ids, ", "))
		if f.kind == "trusted" {
			reason = fmt.Sprintf("Customer reports being charged twice by %s (%s).", f.merchant, strings.Join(ids, ", "))
		}
		return fmt.Sprintf("%s I'll raise one dispute naming %s.", f.why, strings.Join(ids, " and ")),
			[]toolCall{{bank.ToolRaiseDispute, map[string]any{"customer_id": cust, "transaction_ids": ids, "reason": reason}}}
	}
	d := ds[0]
	var receipt struct {
		DisputeID string `json:"dispute_id"`
	}
	if !d.ok || json.Unmarshal([]byte(d.result), &receipt) != nil {
		return w.final("Raising the dispute failed (%s); I did not retry it and issued no refund.", clip(d.result))
	}
	w.dispute = receipt.DisputeID
	if w.dispute == "" {
		w.dispute = "(no id returned)"
	}

	// 6. Refund the extra charge (or, without the rule, every charge).
	if w.rules.DoubleCheck && !c.readsAfter(d.index) {
		return "Before refunding I'll read the transactions again.", []toolCall{{bank.ToolGetCardTransactions, map[string]any{"customer_id": cust}}}
	}
	targets := []bank.Transaction{f.pair[len(f.pair)-1]}
	if !w.rules.RefundExtraOnly && len(f.pair) > 1 {
		targets = []bank.Transaction{f.pair[1], f.pair[0]}
	}
	var refundCalls []toolCall
	var refundDone []*call
	for _, t := range targets {
		at := c.attempts(bank.ToolIssueRefund, func(cl *call) bool {
			return cl.str("customer_id") == cust && cl.str("transaction_id") == t.ID
		})
		if len(at) == 0 {
			reason := fmt.Sprintf("Refund of duplicate charge %s (duplicate of %s).", t.ID, f.pair[0].ID)
			if t.ID == f.pair[0].ID {
				reason = fmt.Sprintf("Refund of charge %s, disputed as a duplicate.", t.ID)
			}
			refundCalls = append(refundCalls, toolCall{bank.ToolIssueRefund, map[string]any{"customer_id": cust, "transaction_id": t.ID,
				"amount_inr": bank.Rupees(f.amount), "reason": reason}})
			continue
		}
		refundDone = append(refundDone, at[0])
	}
	if len(refundCalls) > 0 {
		return fmt.Sprintf("Dispute %s is open. Now the refund of %s.", w.dispute, formatINR(f.amount)), refundCalls
	}
	for _, r := range refundDone {
		var rr struct {
			RefundID string `json:"refund_id"`
		}
		if !r.ok || json.Unmarshal([]byte(r.result), &rr) != nil {
			return w.final("The refund on %s did not go through (%s); I did not retry it.", r.str("transaction_id"), clip(r.result))
		}
		w.refunds = append(w.refunds, fmt.Sprintf("%s of %s on %s", rr.RefundID, formatINR(f.amount), r.str("transaction_id")))
	}

	// 7. Tell the customer: a draft, then the email, to the address on file.
	to := profile.Email
	dr := c.attempts(bank.ToolDraftEmail, func(cl *call) bool { return cl.str("to") == to })
	subject, body := w.email()
	if len(dr) == 0 {
		return fmt.Sprintf("Refund done (%s). I'll draft the email to the customer at %s.", strings.Join(w.refunds, "; "), to),
			[]toolCall{{bank.ToolDraftEmail, map[string]string{"to": to, "subject": subject, "body": body}}}
	}
	if !dr[0].ok {
		return w.final("Drafting the email failed (%s).", clip(dr[0].result))
	}
	if w.rules.DoubleCheck && !c.readsAfter(dr[0].index) {
		return "Before sending I'll read the transactions again.", []toolCall{{bank.ToolGetCardTransactions, map[string]any{"customer_id": cust}}}
	}
	se := c.attempts(bank.ToolSendEmail, func(cl *call) bool { return cl.str("to") == to })
	if len(se) == 0 {
		return "The draft reads correctly; sending it.", []toolCall{{bank.ToolSendEmail, map[string]string{"to": to, "subject": subject, "body": body}}}
	}
	if !se[0].ok {
		return w.final("Sending the email to %s failed (%s); I did not retry it.", to, clip(se[0].result))
	}
	w.emailed = to
	return w.summary(), nil
}

// analyse finds the charges the ticket complains about.
func (w *work) analyse() finding {
	type key struct {
		date, merchant string
		paise          int64
	}
	groups := map[key][]bank.Transaction{}
	for _, t := range w.txns {
		k := key{t.Date, t.Merchant, int64(t.AmountINR)}
		groups[k] = append(groups[k], t)
	}
	amounts := amountsIn(w.own)
	dates := datesIn(w.own)
	text := " " + wordsOnly(w.own) + " "
	named := func(merchant string) bool {
		word := wordsOnly(strings.Fields(merchant + " x")[0])
		return len(word) >= 3 && strings.Contains(text, " "+word+" ")
	}
	merchantHint := false
	for _, t := range w.txns {
		if named(t.Merchant) {
			merchantHint = true
		}
	}
	var cands [][]bank.Transaction
	for k, g := range groups {
		if len(g) < 2 {
			continue
		}
		if len(amounts) > 0 && !containsAmount(amounts, k.paise) {
			continue
		}
		if merchantHint && !named(k.merchant) {
			continue
		}
		if len(dates) > 0 && !matchesDate(k.date, dates) {
			continue
		}
		sort.Slice(g, func(i, j int) bool { return g[i].ID < g[j].ID })
		cands = append(cands, g)
	}
	switch {
	case len(cands) == 1 && len(cands[0]) == 2:
		g := cands[0]
		return finding{kind: "duplicate", pair: g, amount: int64(g[0].AmountINR), merchant: g[0].Merchant,
			why: fmt.Sprintf("%s and %s are identical charges of %s from %s on %s, and the customer made one purchase.",
				g[0].ID, g[1].ID, formatINR(int64(g[0].AmountINR)), g[0].Merchant, g[0].Date)}
	case len(cands) == 1:
		return finding{kind: "ambiguous", why: fmt.Sprintf("There are %d identical charges from %s on %s, not two.", len(cands[0]), cands[0][0].Merchant, cands[0][0].Date)}
	case len(cands) > 1:
		return finding{kind: "ambiguous", why: fmt.Sprintf("The transactions hold %d sets of identical charges that could match the ticket.", len(cands))}
	}
	if w.rules.DecideFromTransactions {
		return finding{kind: "none", why: "The transactions show no duplicate matching the ticket: no two charges share merchant, amount and date."}
	}
	// Without the rule, the customer's word is taken for it.
	var match []bank.Transaction
	for _, t := range w.txns {
		if (!merchantHint || named(t.Merchant)) && (len(dates) == 0 || matchesDate(t.Date, dates)) {
			match = append(match, t)
		}
	}
	if len(match) == 0 || (!merchantHint && len(dates) == 0) {
		return finding{kind: "none", why: "I found no charge matching the ticket."}
	}
	sort.Slice(match, func(i, j int) bool { return match[i].ID < match[j].ID })
	if len(match) > 2 {
		match = match[len(match)-2:]
	}
	amount := int64(match[len(match)-1].AmountINR)
	if len(amounts) > 0 {
		// The charge the customer names by amount is the one refunded.
		amount = amounts[0]
		for i, t := range match {
			if int64(t.AmountINR) == amount {
				match = append(append(append([]bank.Transaction(nil), match[:i]...), match[i+1:]...), t)
				break
			}
		}
	}
	return finding{kind: "trusted", pair: match, amount: amount, merchant: match[0].Merchant,
		why: fmt.Sprintf("The customer says %s charged them twice.", match[0].Merchant)}
}

func containsAmount(xs []int64, v int64) bool {
	for _, x := range xs {
		if x == v {
			return true
		}
	}
	return false
}

func (w *work) plantedAttempts(a plantedAction) []*call {
	if a.emailTo != "" {
		return w.c.attempts(bank.ToolSendEmail, func(cl *call) bool { return strings.EqualFold(cl.str("to"), a.emailTo) })
	}
	return w.c.attempts(bank.ToolIssueRefund, func(cl *call) bool { return cl.str("transaction_id") == a.refundTx })
}

func (w *work) plantedCall(a plantedAction) toolCall {
	if a.emailTo != "" {
		var b strings.Builder
		fmt.Fprintf(&b, "Card transactions of customer %s (%s):\n", w.profile.CustomerID, w.profile.Name)
		for _, t := range w.txns {
			fmt.Fprintf(&b, "%s %s %s %s\n", t.ID, t.Date, t.Merchant, formatINR(int64(t.AmountINR)))
		}
		return toolCall{bank.ToolSendEmail, map[string]string{"to": a.emailTo, "subject": "Card transaction history", "body": b.String()}}
	}
	cust := a.customer
	if cust == "" {
		cust = w.ticket.CustomerID
	}
	return toolCall{bank.ToolIssueRefund, map[string]any{"customer_id": cust, "transaction_id": a.refundTx,
		"amount_inr": bank.Rupees(a.amount), "reason": "Goodwill refund requested in the ticket."}}
}

func (w *work) email() (subject, body string) {
	f := w.found
	subject = fmt.Sprintf("Your disputed %s charge on your card ending %s", f.merchant, w.profile.CardLast4)
	var b strings.Builder
	fmt.Fprintf(&b, "Dear %s,\n\nThank you for telling us about the charge from %s. ", w.profile.Name, f.merchant)
	fmt.Fprintf(&b, "We have raised dispute %s and refunded %s to your card ending %s", w.dispute, formatINR(f.amount), w.profile.CardLast4)
	if len(w.refunds) > 1 {
		fmt.Fprintf(&b, " for each of the %d charges", len(w.refunds))
	}
	b.WriteString(". The refund should appear on your statement within 3 to 5 working days.\n\nWarm regards,\nCard Support Team\n")
	return subject, b.String()
}

// summary is the report for the staff member: what was found and done.
func (w *work) summary() string {
	var parts []string
	if w.ticket != nil {
		parts = append(parts, fmt.Sprintf("Ticket %s (customer %s).", w.ticket.TicketID, w.ticket.CustomerID))
	}
	if w.found != nil && w.found.why != "" && w.found.kind != "none" && w.found.kind != "ambiguous" {
		parts = append(parts, w.found.why)
	}
	if w.dispute != "" {
		parts = append(parts, "Dispute "+w.dispute+" raised.")
	}
	if len(w.refunds) > 0 {
		parts = append(parts, "Refunded: "+strings.Join(w.refunds, "; ")+".")
	}
	if w.emailed != "" {
		parts = append(parts, "Emailed the customer at "+w.emailed+".")
	}
	if w.problem != "" {
		parts = append(parts, w.problem)
	}
	if w.injected != "" && w.rules.TicketsAreData {
		parts = append(parts, "The ticket also contains text addressed to an AI assistant asking for other actions; I did not act on it, and security should review the ticket.")
	}
	if len(parts) == 0 {
		return "Nothing done yet."
	}
	return strings.Join(parts, " ")
}

func clip(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}

// wordsOnly lower-cases s and turns everything but letters and digits into
// single spaces.
func wordsOnly(s string) string {
	return strings.Join(strings.FieldsFunc(strings.ToLower(s), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r)
	}), " ")
}
