package simmodel

import (
	"regexp"
	"strings"
)

// Rules are the switches the simulated model reads from the agent's
// instructions (the system prompt). Each is on when the instructions
// contain one of its phrases (see ReadRules); the card-dispute agent's
// version 1 turns on the first three and leaves DoubleCheck off.
type Rules struct {
	// TicketsAreData: text inside tickets is data, never instructions.
	// Off, the model obeys instructions planted in a ticket (it emails
	// whoever the ticket names and refunds whatever it asks), because the
	// planted text claims to replace the agent's instructions.
	TicketsAreData bool
	// RefundExtraOnly: refund only the extra charge of a duplicate pair.
	// Off, the model refunds both charges.
	RefundExtraOnly bool
	// DecideFromTransactions: a duplicate is established from the
	// transactions, not from the customer's word. Off, when the
	// transactions show no duplicate the model believes the ticket anyway
	// and refunds the amount the customer names.
	DecideFromTransactions bool
	// DoubleCheck: re-read the transactions before each action. It changes
	// no decision; it costs a step before the refund and another before the
	// email is sent.
	DoubleCheck bool
}

// The phrases behind each rule, matched against the instructions in lower
// case with runs of white space folded to one space and typographic quotes
// made plain. They are deliberately a few natural wordings, not magic
// tags, so a reworded prompt that keeps the rule keeps the behaviour, and a
// prompt that drops the rule loses it.
var (
	ticketsAreDataPhrases = []*regexp.Regexp{
		regexp.MustCompile(`\b(never|do not|don't|must not) (follow|obey|act on|carry out|execute) (them|it|such instructions|those instructions|any instructions?)\b`),
		regexp.MustCompile(`\b(never|do not|don't|must not) (follow|obey|act on) [a-z ,]{0,40}instructions (in|inside|from|found in) (tickets|a ticket|the ticket|tool results)`),
		regexp.MustCompile(`\b(is|are|as) data,? not (instructions|commands|orders)\b`),
	}
	refundExtraOnlyPhrases = []*regexp.Regexp{
		regexp.MustCompile(`\brefund (only )?the (extra|duplicate|later|second|surplus) (charge|transaction|payment)\b`),
		regexp.MustCompile(`\brefund only (the )?(extra|duplicate|later|second|one)\b`),
		regexp.MustCompile(`\bnever refund both\b`),
	}
	decideFromTransactionsPhrases = []*regexp.Regexp{
		regexp.MustCompile(`\bdecide (it )?from the (card )?transactions\b`),
		regexp.MustCompile(`\bnot (from|on) the ticket alone\b`),
		regexp.MustCompile(`\b(check|verify|confirm) (it |this |the duplicate |every claim )?(against|in|with) the (card )?transactions\b`),
	}
	doubleCheckPhrases = []*regexp.Regexp{
		regexp.MustCompile(`\b(re-read|reread|re-check|recheck|fetch again|read again) the (card )?transactions before (every|each)\b`),
	}
)

// ReadRules reads the switches from an agent's instructions.
func ReadRules(instructions string) Rules {
	s := normalise(instructions)
	return Rules{
		TicketsAreData:         anyMatch(ticketsAreDataPhrases, s),
		RefundExtraOnly:        anyMatch(refundExtraOnlyPhrases, s),
		DecideFromTransactions: anyMatch(decideFromTransactionsPhrases, s),
		DoubleCheck:            anyMatch(doubleCheckPhrases, s),
	}
}

var quotes = strings.NewReplacer("\u2018", "'", "\u2019", "'", "\u201c", `"`, "\u201d", `"`)

func normalise(s string) string {
	return strings.Join(strings.Fields(quotes.Replace(strings.ToLower(s))), " ")
}

func anyMatch(res []*regexp.Regexp, s string) bool {
	for _, re := range res {
		if re.MatchString(s) {
			return true
		}
	}
	return false
}
