package gvisor

import "testing"

func TestLostControl(t *testing.T) {
	for _, c := range []struct {
		exit   int
		stderr string
		want   bool
	}{
		{128, "running container: urpc method \"containerManager.WaitPID\" failed: EOF", true},
		{128, "the program itself exited 128", false},
		{1, "urpc method in the program's own output", false},
		{137, "", false},
	} {
		if got := lostControl(c.exit, []byte(c.stderr)); got != c.want {
			t.Errorf("lostControl(%d, %q) = %v, want %v", c.exit, c.stderr, got, c.want)
		}
	}
}
