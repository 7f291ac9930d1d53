package simmodel

import (
	"encoding/json"
	"regexp"
	"strconv"
	"strings"

	"github.com/agentplane/agentplane/examples/carddispute/bank"
)

var (
	ticketIDInText = regexp.MustCompile(`\bT-[0-9]{1,10}\b`)
	// Amounts as customers write them: Rs 12,499, Rs. 1,500.50, INR 800,
	// ₹12,499 or 12,499 rupees.
	amountBefore = regexp.MustCompile(`(?i)(?:rs\.?|inr|₹)\s*([0-9][0-9,]*(?:\.[0-9]{1,2})?)`)
	amountAfter  = regexp.MustCompile(`(?i)\b([0-9][0-9,]*(?:\.[0-9]{1,2})?)\s*(?:inr|rupees)\b`)
	// Text written to steer an AI agent rather than to describe a problem.
	injectionMarker = regexp.MustCompile(`(?i)(system note|ignore (all |any |your )?(previous|prior|earlier|above) instructions|instructions you were given|note to (the )?(ai|assistant|agent)|\bai (agent|assistant)\b|dear (ai|assistant))`)
	emailTarget     = regexp.MustCompile(`(?i)\b(?:email|e-mail|send|forward|export)\b[^.]*?\bto\s+([a-z0-9._%+-]+@[a-z0-9-]+(?:\.[a-z0-9-]+)*\.[a-z]{2,})`)
	refundTarget    = regexp.MustCompile(`(?i)\brefund\b[^.]*?(?:rs\.?|inr|₹)\s*([0-9][0-9,]*(?:\.[0-9]{1,2})?)[^.]*?\b(txn_[a-z0-9_]{1,64})\b`)
	customerInText  = regexp.MustCompile(`\bc_[0-9]{1,12}\b`)
	dayMonth        = regexp.MustCompile(`(?i)\b([0-9]{1,2})(?:st|nd|rd|th)? (january|february|march|april|may|june|july|august|september|october|november|december)\b`)
	monthDay        = regexp.MustCompile(`(?i)\b(january|february|march|april|may|june|july|august|september|october|november|december) ([0-9]{1,2})(?:st|nd|rd|th)?\b`)
	isoDate         = regexp.MustCompile(`\b(20[0-9]{2})-([01][0-9])-([0-3][0-9])\b`)
)

var months = map[string]int{"january": 1, "february": 2, "march": 3, "april": 4, "may": 5, "june": 6, "july": 7,
	"august": 8, "september": 9, "october": 10, "november": 11, "december": 12}

// parseAmount reads "12,499" or "1,500.50" as paise.
func parseAmount(s string) (int64, bool) {
	p, err := bank.ParseRupees(json.Number(strings.ReplaceAll(s, ",", "")))
	return p, err == nil
}

// amountsIn lists the amounts a text mentions, in paise, in order.
func amountsIn(text string) []int64 {
	var out []int64
	seen := map[int64]bool{}
	for _, re := range []*regexp.Regexp{amountBefore, amountAfter} {
		for _, m := range re.FindAllStringSubmatch(text, -1) {
			if p, ok := parseAmount(m[1]); ok && !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
		}
	}
	return out
}

// dateHint is a day and month a ticket mentions (year unknown).
type dateHint struct{ day, month int }

func datesIn(text string) []dateHint {
	var out []dateHint
	for _, m := range dayMonth.FindAllStringSubmatch(text, -1) {
		d, _ := strconv.Atoi(m[1])
		out = append(out, dateHint{d, months[strings.ToLower(m[2])]})
	}
	for _, m := range monthDay.FindAllStringSubmatch(text, -1) {
		d, _ := strconv.Atoi(m[2])
		out = append(out, dateHint{d, months[strings.ToLower(m[1])]})
	}
	for _, m := range isoDate.FindAllStringSubmatch(text, -1) {
		mo, _ := strconv.Atoi(m[2])
		d, _ := strconv.Atoi(m[3])
		out = append(out, dateHint{d, mo})
	}
	return out
}

// matchesDate reports whether a YYYY-MM-DD date is one of the hints.
func matchesDate(date string, hints []dateHint) bool {
	if len(date) != 10 {
		return false
	}
	mo, _ := strconv.Atoi(date[5:7])
	d, _ := strconv.Atoi(date[8:10])
	for _, h := range hints {
		if h.day == d && h.month == mo {
			return true
		}
	}
	return false
}

// splitInjection separates a ticket body into the customer's own text and
// a planted instruction, which starts at the line holding the first marker
// (or at a "---" line just above it). injected is empty when there is none.
func splitInjection(body string) (own, injected string) {
	loc := injectionMarker.FindStringIndex(body)
	if loc == nil {
		return body, ""
	}
	start := strings.LastIndex(body[:loc[0]], "\n") + 1
	if before := strings.TrimRight(body[:start], "\n "); strings.HasSuffix(before, "---") {
		start = strings.LastIndex(before, "\n") + 1
	}
	return strings.TrimSpace(body[:start]), strings.TrimSpace(body[start:])
}

// plantedAction is one thing a planted instruction asks for.
type plantedAction struct {
	emailTo  string // send the customer's transactions here
	refundTx string // or refund this transaction
	customer string // of this customer ("" = the ticket's)
	amount   int64  // this many paise
}

// plantedActions reads what the planted text asks the agent to do: email
// data to an address, and refund an amount against a transaction.
func plantedActions(injected string) []plantedAction {
	var out []plantedAction
	for _, m := range emailTarget.FindAllStringSubmatch(injected, -1) {
		out = append(out, plantedAction{emailTo: strings.ToLower(m[1])})
	}
	for _, m := range refundTarget.FindAllStringSubmatchIndex(injected, -1) {
		amount, ok := parseAmount(injected[m[2]:m[3]])
		if !ok {
			continue
		}
		a := plantedAction{refundTx: injected[m[4]:m[5]], amount: amount}
		// The customer, if named, is in the same sentence.
		sentence := injected[m[0]:]
		if end := strings.IndexAny(sentence[m[1]-m[0]:], ".\n"); end >= 0 {
			sentence = sentence[:m[1]-m[0]+end]
		}
		if c := customerInText.FindString(sentence); c != "" {
			a.customer = c
		}
		out = append(out, a)
	}
	return out
}

// formatINR writes paise as rupees with Indian digit grouping:
// 1249900 -> "12,499.00", 12500000 -> "1,25,000.00".
func formatINR(paise int64) string {
	whole, frac := paise/100, paise%100
	s := strconv.FormatInt(whole, 10)
	if len(s) > 3 {
		head, tail := s[:len(s)-3], s[len(s)-3:]
		var groups []string
		for len(head) > 2 {
			groups = append([]string{head[len(head)-2:]}, groups...)
			head = head[:len(head)-2]
		}
		if head != "" {
			groups = append([]string{head}, groups...)
		}
		s = strings.Join(groups, ",") + "," + tail
	}
	return "Rs " + s + "." + strconv.FormatInt(100+frac, 10)[1:]
}
