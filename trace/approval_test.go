package trace

import "testing"

func TestApprovalRoundIDs(t *testing.T) {
	for _, tc := range []struct {
		run         string
		step, index int
		round       int
	}{{"run_abc", 3, 1, 1}, {"run_abc", 3, 1, 2}, {"run_a.b", 12, 0, 1}, {"run_a.b_c", 1, 7, 8}} {
		id := ApprovalRoundID(tc.run, tc.step, tc.index, tc.round)
		run, step, index, err := ParseApprovalID(id)
		if err != nil || run != tc.run || step != tc.step || index != tc.index {
			t.Errorf("%s: %q %d %d %v", id, run, step, index, err)
		}
	}
	if ApprovalRoundID("r", 1, 0, 1) != ApprovalID("r", 1, 0) {
		t.Error("round 1 is not the plain approval id")
	}
	for _, bad := range []string{"apr_run_1_0.1", "apr_run_1_0.02", "apr_run_1_0.x", "apr_run_1_0.", "apr_run_1_0.-2"} {
		if _, _, _, err := ParseApprovalID(bad); err == nil {
			t.Errorf("%s parsed", bad)
		}
	}
}

func TestEditSummary(t *testing.T) {
	got := EditSummary([]byte(`{"a":1,"b":"x","c":true}`), []byte(`{"a":2,"b":"x","d":null}`))
	if want := `a: 1 -> 2; c: true -> (removed); d: (none) -> null`; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	if got := EditSummary([]byte(`{"a":1}`), []byte(`{"a":1}`)); got != "no argument changed" {
		t.Fatal(got)
	}
}
