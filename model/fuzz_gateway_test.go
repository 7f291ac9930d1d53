package model

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

func FuzzRetryAfter(f *testing.F) {
	for _, s := range []string{"7", "1.5", "-1", "Tue, 27 Oct 2026 09:00:30 GMT", "1e400", "NaN", "+Inf", ""} {
		f.Add(s, "")
	}
	f.Add("", "250")
	f.Fuzz(func(t *testing.T, ra, ms string) {
		h := http.Header{}
		h.Set("Retry-After", ra)
		h.Set("Retry-After-Ms", ms)
		d := RetryAfter(h, time.Date(2026, 10, 27, 9, 0, 0, 0, time.UTC))
		if d < 0 || d > 24*time.Hour {
			t.Fatalf("RetryAfter(%q, %q) = %v, outside [0, 24h]", ra, ms, d)
		}
	})
}

// Every identifier found is a whole token of the input, and scanning is
// stable: the identifiers of the identifiers are themselves.
func FuzzIdentifiers(f *testing.F) {
	f.Add("Ticket T-40127, customer c_88213, ₹12,499 on 2026-10-03; blob:9f2c.")
	f.Add(`{"txn_id":"t_771","amount_inr":12499}`)
	f.Add("a,1,2 ,3, @x@ 1@ @1 ..:: ٣٤٥٦")
	f.Fuzz(func(t *testing.T, s string) {
		ids := Identifiers(s)
		toks := tokenSet(s)
		for _, id := range ids {
			if !toks[id] {
				t.Fatalf("identifier %q is not a token of %q", id, s)
			}
		}
		again := Identifiers(strings.Join(ids, " "))
		if strings.Join(again, " ") != strings.Join(ids, " ") {
			t.Fatalf("not stable: %q then %q", ids, again)
		}
	})
}
