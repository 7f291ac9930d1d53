package model

import (
	"fmt"
	"math"
	"math/big"
	"strings"
	"testing"
)

// sonnet is seed 004's list price: $2/MTok input, $10 output, $2.50 cache
// writes, $0.20 cache reads.
var sonnet = Price{
	Currency:          "USD",
	InputPerMTok:      2_000_000,
	OutputPerMTok:     10_000_000,
	CacheWritePerMTok: 2_500_000,
	CacheReadPerMTok:  200_000,
}

func TestMoneyString(t *testing.T) {
	for _, tc := range []struct {
		m    Money
		want string
	}{
		{Money{23_100, "USD"}, "0.023100 USD"},
		{Money{150_000_000, "INR"}, "150.000000 INR"},
		{Money{0, "USD"}, "0.000000 USD"},
		{Money{1, "EUR"}, "0.000001 EUR"},
		{Money{-1_500_000, "USD"}, "-1.500000 USD"},
		{Money{math.MinInt64, "USD"}, "-9223372036854.775808 USD"},
		{Money{math.MaxInt64, "USD"}, "9223372036854.775807 USD"},
		{Money{}, "0.000000"},
	} {
		if got := tc.m.String(); got != tc.want {
			t.Errorf("%#v.String() = %q, want %q", tc.m, got, tc.want)
		}
	}
}

func TestParseMoney(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    Money
		wantErr string
	}{
		{in: "150 INR", want: Money{150_000_000, "INR"}},
		{in: "0.0231 USD", want: Money{23_100, "USD"}},
		{in: "  1.275   USD ", want: Money{1_275_000, "USD"}},
		{in: "0.000001 USD", want: Money{1, "USD"}},
		{in: "-2.5 EUR", want: Money{-2_500_000, "EUR"}},
		{in: "+7 USD", want: Money{7_000_000, "USD"}},
		{in: "9223372036854.775807 USD", want: Money{math.MaxInt64, "USD"}},
		{in: "-9223372036854.775808 USD", want: Money{math.MinInt64, "USD"}},
		{in: "9223372036854.775808 USD", wantErr: "too large"},
		{in: "99999999999999999999 USD", wantErr: "too large"},
		{in: "0.0000001 USD", wantErr: "six decimal places"},
		{in: "150 inr", wantErr: "upper-case"},
		{in: "150 RUPEES", wantErr: "upper-case"},
		{in: "150", wantErr: "want"},
		{in: "INR 150", wantErr: "upper-case"},
		{in: "1,000 INR", wantErr: "decimal"},
		{in: ".5 USD", wantErr: "decimal"},
		{in: "5. USD", wantErr: "decimal"},
		{in: "1e3 USD", wantErr: "decimal"},
		{in: "- USD", wantErr: "decimal"},
		{in: "", wantErr: "want"},
	} {
		got, err := ParseMoney(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParseMoney(%q) = %v, %v; want error containing %q", tc.in, got, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseMoney(%q) = %#v, %v; want %#v", tc.in, got, err, tc.want)
		}
	}
}

func TestMoneyAddCmp(t *testing.T) {
	a := Money{1_000_000, "USD"}
	sum, err := a.Add(Money{275_000, "USD"})
	if err != nil || sum != (Money{1_275_000, "USD"}) {
		t.Fatalf("Add = %v, %v", sum, err)
	}
	if got, err := (Money{}).Add(a); err != nil || got != a {
		t.Errorf("zero.Add(a) = %v, %v; want a", got, err)
	}
	if got, err := a.Add(Money{}); err != nil || got != a {
		t.Errorf("a.Add(zero) = %v, %v; want a", got, err)
	}
	if _, err := a.Add(Money{1, "INR"}); err == nil {
		t.Error("adding INR to USD succeeded")
	}
	if _, err := (Money{math.MaxInt64, "USD"}).Add(Money{1, "USD"}); err == nil {
		t.Error("overflowing Add succeeded")
	}
	if _, err := (Money{math.MinInt64, "USD"}).Add(Money{-1, "USD"}); err == nil {
		t.Error("underflowing Add succeeded")
	}
	for _, tc := range []struct {
		a, b Money
		want int
	}{
		{a, Money{2_000_000, "USD"}, -1},
		{a, a, 0},
		{Money{2_000_000, "USD"}, a, 1},
		{Money{}, a, -1},
	} {
		if got, err := tc.a.Cmp(tc.b); err != nil || got != tc.want {
			t.Errorf("%v.Cmp(%v) = %d, %v; want %d", tc.a, tc.b, got, err, tc.want)
		}
	}
	if _, err := a.Cmp(Money{1, "INR"}); err == nil {
		t.Error("comparing USD with INR succeeded")
	}
}

func TestPriceCost(t *testing.T) {
	for _, tc := range []struct {
		name  string
		price Price
		usage Usage
		want  int64
	}{
		// Seed 004: a 25-step run without caching.
		{"seed 004 no caching", sonnet, Usage{InputTokens: 600_000, OutputTokens: 7_500}, 1_275_000},
		// Seed 004 with caching: 42,000 written, 558,000 read, 7,500 out.
		{"seed 004 with caching", sonnet, Usage{CacheCreationTokens: 42_000, CacheReadTokens: 558_000, OutputTokens: 7_500}, 105_000 + 111_600 + 75_000},
		// Seed 004: a 6-step run without caching is $0.135 (58,500 in, 1,800 out).
		{"seed 004 six steps", sonnet, Usage{InputTokens: 58_500, OutputTokens: 1_800}, 135_000},
		{"nothing", sonnet, Usage{}, 0},
		{"one token rounds up", Price{Currency: "USD", InputPerMTok: 3}, Usage{InputTokens: 1}, 1},
		{"exact micro", Price{Currency: "USD", InputPerMTok: 1_000_000}, Usage{InputTokens: 1}, 1},
		{"one over rounds up", Price{Currency: "USD", InputPerMTok: 1_000_001}, Usage{InputTokens: 1}, 2},
		// Fractions from two kinds are summed before rounding: 0.5 + 0.5 micro.
		{"fractions summed before rounding", Price{Currency: "USD", InputPerMTok: 500_000, OutputPerMTok: 500_000}, Usage{InputTokens: 1, OutputTokens: 1}, 1},
		{"negative tokens count as zero", sonnet, Usage{InputTokens: -5, OutputTokens: 100_000}, 1_000_000},
		{"negative rate counts as zero", Price{Currency: "USD", InputPerMTok: -7, OutputPerMTok: 1_000_000}, Usage{InputTokens: 9, OutputTokens: 3}, 3},
		{"1e12 tokens each", sonnet, Usage{InputTokens: 1e12, OutputTokens: 1e12, CacheCreationTokens: 1e12, CacheReadTokens: 1e12}, 14_700_000_000_000},
		{"saturates", Price{Currency: "USD", InputPerMTok: math.MaxInt64, OutputPerMTok: math.MaxInt64}, Usage{InputTokens: math.MaxInt64, OutputTokens: math.MaxInt64}, math.MaxInt64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.price.Cost(tc.usage)
			if got.Micros != tc.want || got.Currency != tc.price.Currency {
				t.Errorf("Cost(%+v) = %v, want %d micros %s", tc.usage, got, tc.want, tc.price.Currency)
			}
		})
	}
}

// TestPriceCostMatchesBig checks the 128-bit arithmetic against math/big on
// values up to 1e12 tokens and large rates.
func TestPriceCostMatchesBig(t *testing.T) {
	tokens := []int64{0, 1, 999_999, 1_000_001, 123_456_789, 1e12 - 1, 1e12}
	rates := []int64{0, 1, 3, 200_000, 2_500_000, 999_999_999, 1e12}
	for i, in := range tokens {
		for j, rate := range rates {
			u := Usage{InputTokens: in, OutputTokens: tokens[(i+1)%len(tokens)], CacheCreationTokens: tokens[(i+3)%len(tokens)], CacheReadTokens: tokens[(i+5)%len(tokens)]}
			p := Price{Currency: "USD", InputPerMTok: rate, OutputPerMTok: rates[(j+2)%len(rates)], CacheWritePerMTok: rates[(j+4)%len(rates)], CacheReadPerMTok: rates[(j+6)%len(rates)]}
			want := bigCost(p, u)
			got := p.Cost(u)
			if !want.IsInt64() {
				t.Fatalf("reference cost %s does not fit int64; pick smaller cases", want)
			}
			if got.Micros != want.Int64() {
				t.Errorf("Cost(%+v at %+v) = %d, want %s", u, p, got.Micros, want)
			}
		}
	}
}

func bigCost(p Price, u Usage) *big.Int {
	sum := new(big.Int)
	for _, term := range [][2]int64{
		{u.InputTokens, p.InputPerMTok},
		{u.OutputTokens, p.OutputPerMTok},
		{u.CacheCreationTokens, p.CacheWritePerMTok},
		{u.CacheReadTokens, p.CacheReadPerMTok},
	} {
		sum.Add(sum, new(big.Int).Mul(big.NewInt(term[0]), big.NewInt(term[1])))
	}
	q, r := new(big.Int).QuoRem(sum, big.NewInt(1_000_000), new(big.Int))
	if r.Sign() > 0 {
		q.Add(q, big.NewInt(1))
	}
	return q
}

func TestPriceValidate(t *testing.T) {
	if err := sonnet.Validate(); err != nil {
		t.Errorf("valid price refused: %v", err)
	}
	for _, p := range []Price{
		{Currency: "usd"},
		{Currency: ""},
		{Currency: "USD", OutputPerMTok: -1},
		{Currency: "USD", CacheReadPerMTok: -1},
	} {
		if err := p.Validate(); err == nil {
			t.Errorf("Validate(%+v) accepted an invalid price", p)
		}
	}
}

func TestRatesConvert(t *testing.T) {
	rates, err := NewRates(
		Rate{From: "USD", To: "INR", Micros: 88_000_000},
		Rate{From: "EUR", To: "USD", Micros: 1_080_000},
		// Both directions given: each is used as given.
		Rate{From: "GBP", To: "USD", Micros: 1_250_000},
		Rate{From: "USD", To: "GBP", Micros: 810_000},
	)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		in      Money
		to      string
		want    Money
		wantErr string
	}{
		{in: Money{1_275_000, "USD"}, to: "INR", want: Money{112_200_000, "INR"}},
		{in: Money{291_600, "USD"}, to: "INR", want: Money{25_660_800, "INR"}},
		{in: Money{150_000_000, "INR"}, to: "INR", want: Money{150_000_000, "INR"}},
		// Inverse of USD->INR: 150/88 = 1.7045454..., rounded up.
		{in: Money{150_000_000, "INR"}, to: "USD", want: Money{1_704_546, "USD"}},
		{in: Money{88_000_000, "INR"}, to: "USD", want: Money{1_000_000, "USD"}},
		// Rounding is away from zero for negative amounts too.
		{in: Money{-150_000_000, "INR"}, to: "USD", want: Money{-1_704_546, "USD"}},
		{in: Money{1, "USD"}, to: "EUR", want: Money{1, "EUR"}},
		{in: Money{1_000_000, "USD"}, to: "GBP", want: Money{810_000, "GBP"}},
		{in: Money{1_000_000, "GBP"}, to: "USD", want: Money{1_250_000, "USD"}},
		{in: Money{1_000_000, "USD"}, to: "JPY", wantErr: "no exchange rate"},
		// Rates do not chain: EUR->INR would need EUR->USD->INR.
		{in: Money{1_000_000, "EUR"}, to: "INR", wantErr: "no exchange rate"},
		{in: Money{1_000_000, "USD"}, to: "inr", wantErr: "upper-case"},
		{in: Money{math.MaxInt64, "USD"}, to: "INR", wantErr: "overflows"},
	} {
		got, err := rates.Convert(tc.in, tc.to)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("Convert(%v, %s) = %v, %v; want error containing %q", tc.in, tc.to, got, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("Convert(%v, %s) = %v, %v; want %v", tc.in, tc.to, got, err, tc.want)
		}
	}

	var none *Rates
	if got, err := none.Convert(Money{5, "USD"}, "USD"); err != nil || got != (Money{5, "USD"}) {
		t.Errorf("nil Rates identity = %v, %v", got, err)
	}
	if _, err := none.Convert(Money{5, "USD"}, "INR"); err == nil {
		t.Error("nil Rates converted USD to INR")
	}
}

func TestNewRatesRefuses(t *testing.T) {
	for _, tc := range []struct {
		rates   []Rate
		wantErr string
	}{
		{[]Rate{{"USD", "INR", 0}}, "positive"},
		{[]Rate{{"USD", "INR", -1}}, "positive"},
		{[]Rate{{"USD", "USD", 1_000_000}}, "itself"},
		{[]Rate{{"usd", "INR", 1}}, "upper-case"},
		{[]Rate{{"USD", "RUPEE", 1}}, "upper-case"},
		{[]Rate{{"USD", "INR", 88_000_000}, {"USD", "INR", 87_000_000}}, "twice"},
	} {
		if _, err := NewRates(tc.rates...); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("NewRates(%v) error = %v, want one containing %q", tc.rates, err, tc.wantErr)
		}
	}
}

func FuzzParseMoney(f *testing.F) {
	for _, s := range []string{"150 INR", "0.0231 USD", "-2.5 EUR", "9223372036854.775807 USD", "1e3 USD", "", "+0.000001 ABC"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := ParseMoney(s)
		if err != nil {
			return
		}
		// Whatever parses prints in a form that parses back to the same value.
		again, err := ParseMoney(m.String())
		if err != nil || again != m {
			t.Fatalf("ParseMoney(%q) = %v, but ParseMoney(%q) = %v, %v", s, m, m.String(), again, err)
		}
	})
}

func ExamplePrice_Cost() {
	price := Price{Currency: "USD", InputPerMTok: 2_000_000, OutputPerMTok: 10_000_000}
	cost := price.Cost(Usage{InputTokens: 600_000, OutputTokens: 7_500})
	fmt.Println(cost)

	rates, _ := NewRates(Rate{From: "USD", To: "INR", Micros: 88_000_000})
	inr, _ := rates.Convert(cost, "INR")
	fmt.Println(inr)
	// Output:
	// 1.275000 USD
	// 112.200000 INR
}
