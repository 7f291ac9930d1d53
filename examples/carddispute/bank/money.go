package bank

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"strconv"
	"strings"
)

// maxPaise bounds any amount the bank accepts: ₹1,00,00,00,000 (one
// hundred crore), far above any card transaction.
const maxPaise = 100_000_000_000

// Rupees is an amount in paise that travels as a JSON number of rupees with
// at most two decimals: Rupees(1249900) is written 12499, Rupees(34125) is
// written 341.25.
type Rupees int64

// MarshalJSON writes the amount in rupees, in its shortest exact form.
func (r Rupees) MarshalJSON() ([]byte, error) {
	return []byte(FormatRupees(int64(r))), nil
}

// FormatRupees writes an amount of paise as a decimal number of rupees
// without trailing zeros: 1249900 -> "12499", 34125 -> "341.25",
// 5 -> "0.05".
func FormatRupees(paise int64) string {
	sign := ""
	if paise < 0 {
		sign, paise = "-", -paise
	}
	whole, frac := paise/100, paise%100
	switch {
	case frac == 0:
		return sign + strconv.FormatInt(whole, 10)
	case frac%10 == 0:
		return fmt.Sprintf("%s%d.%d", sign, whole, frac/10)
	default:
		return fmt.Sprintf("%s%d.%02d", sign, whole, frac)
	}
}

// UnmarshalJSON reads a JSON number of rupees with at most two decimals.
// JSON null leaves r unchanged.
func (r *Rupees) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	p, err := parseRupees(string(b), true)
	if err != nil {
		return err
	}
	*r = Rupees(p)
	return nil
}

// ParseRupees converts a JSON number of rupees to paise. It is exact (no
// floating point): the number must be positive, have at most two decimals
// and not exceed the bank's upper bound.
func ParseRupees(n json.Number) (int64, error) {
	return parseRupees(string(n), false)
}

func parseRupees(s string, signed bool) (int64, error) {
	if s == "" {
		return 0, errors.New("amount is missing")
	}
	// Keep hostile input cheap: big.Rat would happily expand 1e999999999.
	if len(s) > 40 {
		return 0, fmt.Errorf("amount %.40q... is too long", s)
	}
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		exp, err := strconv.Atoi(s[i+1:])
		if err != nil || exp < -30 || exp > 30 {
			return 0, fmt.Errorf("amount %q is out of range", s)
		}
	}
	r, ok := new(big.Rat).SetString(s)
	if !ok {
		return 0, fmt.Errorf("amount %q is not a number", s)
	}
	if !signed && r.Sign() <= 0 {
		return 0, fmt.Errorf("amount %s must be greater than zero", s)
	}
	r.Mul(r, big.NewRat(100, 1))
	if !r.IsInt() {
		return 0, fmt.Errorf("amount %s has more than two decimals", s)
	}
	p := new(big.Int).Abs(r.Num())
	if !p.IsInt64() || p.Int64() > maxPaise {
		return 0, fmt.Errorf("amount %s is too large", s)
	}
	if r.Sign() < 0 {
		return -p.Int64(), nil
	}
	return p.Int64(), nil
}
