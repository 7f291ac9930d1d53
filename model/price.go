package model

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"strings"
)

// microsPerUnit is how many micro-units make one unit of a currency.
const microsPerUnit = 1_000_000

// tokensPerMTok is the number of tokens a per-million-tokens price covers.
const tokensPerMTok = 1_000_000

// Money is an amount in integer micro-units of a currency: 1.5 USD is
// Money{Micros: 1_500_000, Currency: "USD"}. Currency is an ISO 4217 code
// in upper case. The zero value (no currency, no amount) is "nothing yet" and
// is the identity of Add. Money never goes through floating point.
type Money struct {
	Micros   int64  `json:"micros"`
	Currency string `json:"currency"`
}

// String formats m with six decimals and its currency: "0.023100 USD".
func (m Money) String() string {
	neg := m.Micros < 0
	abs := uint64(m.Micros)
	if neg {
		abs = -abs // two's complement: correct even for math.MinInt64
	}
	s := fmt.Sprintf("%d.%06d", abs/microsPerUnit, abs%microsPerUnit)
	if neg {
		s = "-" + s
	}
	if m.Currency == "" {
		return s
	}
	return s + " " + m.Currency
}

// IsZero reports whether m is the zero value.
func (m Money) IsZero() bool { return m == Money{} }

// Add returns m+o. Both must be in the same currency, except that the zero
// Money adds to anything. Overflow is an error, not a wrap-around.
func (m Money) Add(o Money) (Money, error) {
	switch {
	case m.IsZero():
		return o, nil
	case o.IsZero():
		return m, nil
	case m.Currency != o.Currency:
		return Money{}, fmt.Errorf("money: cannot add %s to %s", o.Currency, m.Currency)
	}
	sum := m.Micros + o.Micros
	if (o.Micros > 0 && sum < m.Micros) || (o.Micros < 0 && sum > m.Micros) {
		return Money{}, fmt.Errorf("money: %s + %s overflows", m, o)
	}
	return Money{Micros: sum, Currency: m.Currency}, nil
}

// Cmp compares two amounts of the same currency: -1 if m < o, 0 if equal,
// +1 if m > o. Comparing different currencies is an error; a zero Money
// compares as zero in any currency.
func (m Money) Cmp(o Money) (int, error) {
	if m.Currency != o.Currency && !m.IsZero() && !o.IsZero() {
		return 0, fmt.Errorf("money: cannot compare %s with %s", m.Currency, o.Currency)
	}
	switch {
	case m.Micros < o.Micros:
		return -1, nil
	case m.Micros > o.Micros:
		return 1, nil
	}
	return 0, nil
}

// ParseMoney parses "<amount> <CUR>", where amount is a decimal number with an
// optional sign and at most six fractional digits and CUR is a three-letter
// upper-case currency code: "150 INR", "0.0231 USD", "-2.5 EUR".
func ParseMoney(s string) (Money, error) {
	fields := strings.Fields(s)
	if len(fields) != 2 {
		return Money{}, fmt.Errorf("money %q: want \"<amount> <CURRENCY>\", like \"150 INR\"", s)
	}
	amount, cur := fields[0], fields[1]
	if err := checkCurrency(cur); err != nil {
		return Money{}, fmt.Errorf("money %q: %w", s, err)
	}
	micros, err := parseMicros(amount)
	if err != nil {
		return Money{}, fmt.Errorf("money %q: %w", s, err)
	}
	return Money{Micros: micros, Currency: cur}, nil
}

// parseMicros parses a decimal with at most six fractional digits into
// micro-units.
func parseMicros(s string) (int64, error) {
	neg := false
	switch {
	case strings.HasPrefix(s, "-"):
		neg, s = true, s[1:]
	case strings.HasPrefix(s, "+"):
		s = s[1:]
	}
	whole, frac, hasDot := strings.Cut(s, ".")
	if whole == "" || !allDigits(whole) || (hasDot && (frac == "" || !allDigits(frac))) {
		return 0, errors.New("amount must be a decimal number such as 150 or 0.0231")
	}
	if len(frac) > 6 {
		return 0, errors.New("amount has more than six decimal places")
	}
	w, err := strconv.ParseUint(whole, 10, 64)
	if err != nil {
		return 0, errors.New("amount is too large")
	}
	f := uint64(0)
	if frac != "" {
		f, _ = strconv.ParseUint(frac+strings.Repeat("0", 6-len(frac)), 10, 64)
	}
	hi, lo := bits.Mul64(w, microsPerUnit)
	total, carry := bits.Add64(lo, f, 0)
	limit := uint64(math.MaxInt64)
	if neg {
		limit++ // |MinInt64|
	}
	if hi != 0 || carry != 0 || total > limit {
		return 0, errors.New("amount is too large")
	}
	if neg {
		return int64(-total), nil
	}
	return int64(total), nil
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// checkCurrency accepts three upper-case ASCII letters.
func checkCurrency(c string) error {
	if len(c) != 3 {
		return fmt.Errorf("currency %q must be a three-letter upper-case code such as USD", c)
	}
	for i := 0; i < 3; i++ {
		if c[i] < 'A' || c[i] > 'Z' {
			return fmt.Errorf("currency %q must be a three-letter upper-case code such as USD", c)
		}
	}
	return nil
}

// Price is what a model charges, in micro-units of Currency per million
// tokens of each kind: $2 per million input tokens is InputPerMTok 2_000_000.
type Price struct {
	Currency          string `json:"currency" yaml:"currency"`
	InputPerMTok      int64  `json:"input_per_mtok" yaml:"input_per_mtok"`
	OutputPerMTok     int64  `json:"output_per_mtok" yaml:"output_per_mtok"`
	CacheWritePerMTok int64  `json:"cache_write_per_mtok" yaml:"cache_write_per_mtok"`
	CacheReadPerMTok  int64  `json:"cache_read_per_mtok" yaml:"cache_read_per_mtok"`
}

// Validate checks the currency code and that no rate is negative.
func (p Price) Validate() error {
	if err := checkCurrency(p.Currency); err != nil {
		return fmt.Errorf("price: %w", err)
	}
	for _, r := range []struct {
		name string
		v    int64
	}{
		{"input", p.InputPerMTok},
		{"output", p.OutputPerMTok},
		{"cache write", p.CacheWritePerMTok},
		{"cache read", p.CacheReadPerMTok},
	} {
		if r.v < 0 {
			return fmt.Errorf("price: %s rate %d is negative", r.name, r.v)
		}
	}
	return nil
}

// Cost is what usage u costs at price p. InputTokens are charged at the input
// rate, CacheCreationTokens at the cache-write rate, CacheReadTokens at the
// cache-read rate and OutputTokens at the output rate. The four products are
// summed exactly in 128-bit integers and divided by one million once, and a
// fractional micro-unit left over is rounded up, so a cost is never
// understated. Negative token counts and negative rates (which Validate
// refuses) count as zero; a total beyond the range of int64 saturates at
// math.MaxInt64 micro-units, far above any real bill (1e12 tokens at 1e9
// micro-units per million is 1e15 micro-units).
func (p Price) Cost(u Usage) Money {
	var sum u128
	for _, term := range [4][2]int64{
		{u.InputTokens, p.InputPerMTok},
		{u.OutputTokens, p.OutputPerMTok},
		{u.CacheCreationTokens, p.CacheWritePerMTok},
		{u.CacheReadTokens, p.CacheReadPerMTok},
	} {
		// Each product is below 2^126, so four of them cannot overflow 128 bits.
		sum = sum.add(mul128(nonNegative(term[0]), nonNegative(term[1])))
	}
	q, ok := sum.divCeil(tokensPerMTok)
	if !ok || q > math.MaxInt64 {
		q = math.MaxInt64
	}
	return Money{Micros: int64(q), Currency: p.Currency}
}

func nonNegative(v int64) uint64 {
	if v < 0 {
		return 0
	}
	return uint64(v)
}

// u128 is an unsigned 128-bit integer for exact intermediate products.
type u128 struct{ hi, lo uint64 }

func mul128(a, b uint64) u128 {
	hi, lo := bits.Mul64(a, b)
	return u128{hi, lo}
}

// add returns x+y; callers keep the operands small enough not to overflow.
func (x u128) add(y u128) u128 {
	lo, carry := bits.Add64(x.lo, y.lo, 0)
	hi, _ := bits.Add64(x.hi, y.hi, carry)
	return u128{hi, lo}
}

// divCeil returns ceil(x/d), or false if the quotient does not fit in 64 bits.
func (x u128) divCeil(d uint64) (uint64, bool) {
	if x.hi >= d {
		return 0, false
	}
	q, r := bits.Div64(x.hi, x.lo, d)
	if r != 0 {
		if q == math.MaxUint64 {
			return 0, false
		}
		q++
	}
	return q, true
}

// Rate is an exchange rate: one unit of From buys Micros micro-units of To.
// USD to INR at 88 is Rate{From: "USD", To: "INR", Micros: 88_000_000}.
type Rate struct {
	From   string `json:"from" yaml:"from"`
	To     string `json:"to" yaml:"to"`
	Micros int64  `json:"micros" yaml:"micros"`
}

type currencyPair struct{ from, to string }

// Rates converts Money between currencies. A pair given in one direction also
// serves the other (by dividing); a pair given in both directions uses each
// as given. Rates is immutable after NewRates and safe for concurrent use; a
// nil *Rates converts only a currency to itself.
type Rates struct {
	m map[currencyPair]int64
}

// NewRates checks and indexes rates. Currencies must be three-letter
// upper-case codes, rates positive, and no direction may be given twice.
func NewRates(rates ...Rate) (*Rates, error) {
	r := &Rates{m: make(map[currencyPair]int64, len(rates))}
	for i, rt := range rates {
		if err := checkCurrency(rt.From); err != nil {
			return nil, fmt.Errorf("rates[%d]: from: %w", i, err)
		}
		if err := checkCurrency(rt.To); err != nil {
			return nil, fmt.Errorf("rates[%d]: to: %w", i, err)
		}
		if rt.From == rt.To {
			return nil, fmt.Errorf("rates[%d]: %s to itself needs no rate", i, rt.From)
		}
		if rt.Micros <= 0 {
			return nil, fmt.Errorf("rates[%d]: %s->%s rate %d micro-units must be positive", i, rt.From, rt.To, rt.Micros)
		}
		k := currencyPair{rt.From, rt.To}
		if _, dup := r.m[k]; dup {
			return nil, fmt.Errorf("rates[%d]: %s->%s given twice", i, rt.From, rt.To)
		}
		r.m[k] = rt.Micros
	}
	return r, nil
}

// Convert expresses m in currency to. Converting to m's own currency returns
// m unchanged. A pair with no rate in either direction is an error, as is a
// result beyond the range of int64. A fractional micro-unit is rounded away
// from zero, so a converted cost is never understated.
func (r *Rates) Convert(m Money, to string) (Money, error) {
	if m.Currency == to {
		return m, nil
	}
	if err := checkCurrency(to); err != nil {
		return Money{}, fmt.Errorf("convert %s: %w", m, err)
	}
	var mul, div uint64
	if rate, ok := r.lookup(m.Currency, to); ok {
		mul, div = uint64(rate), microsPerUnit
	} else if rate, ok := r.lookup(to, m.Currency); ok {
		mul, div = microsPerUnit, uint64(rate)
	} else {
		return Money{}, fmt.Errorf("convert %s to %s: no exchange rate between %s and %s", m, to, m.Currency, to)
	}
	neg := m.Micros < 0
	abs := uint64(m.Micros)
	if neg {
		abs = -abs
	}
	q, ok := mul128(abs, mul).divCeil(div)
	if !ok || q > math.MaxInt64 {
		return Money{}, fmt.Errorf("convert %s to %s: result overflows", m, to)
	}
	out := int64(q)
	if neg {
		out = -out
	}
	return Money{Micros: out, Currency: to}, nil
}

func (r *Rates) lookup(from, to string) (int64, bool) {
	if r == nil {
		return 0, false
	}
	v, ok := r.m[currencyPair{from, to}]
	return v, ok
}
