package testenv

import "testing"

func TestInCI(t *testing.T) {
	for _, c := range []struct {
		v    string
		want bool
	}{{"", false}, {"0", false}, {"false", false}, {"true", true}, {"1", true}, {"yes", true}} {
		t.Setenv("CI", c.v)
		if got := InCI(); got != c.want {
			t.Errorf("CI=%q: InCI() = %v, want %v", c.v, got, c.want)
		}
	}
}

// recorder stands in for *testing.T to see which way Missing went.
type recorder struct {
	testing.TB
	fatal, skip bool
}

func (r *recorder) Helper()               {}
func (r *recorder) Fatalf(string, ...any) { r.fatal = true }
func (r *recorder) Skipf(string, ...any)  { r.skip = true }

func TestMissingFailsInCI(t *testing.T) {
	t.Setenv("CI", "true")
	r := &recorder{TB: t}
	Missing(r, "no %s", "thing")
	if !r.fatal || r.skip {
		t.Fatalf("under CI: fatal=%v skip=%v, want a failure", r.fatal, r.skip)
	}
}

func TestMissingSkipsLocally(t *testing.T) {
	t.Setenv("CI", "")
	r := &recorder{TB: t}
	Missing(r, "no %s", "thing")
	if r.fatal || !r.skip {
		t.Fatalf("locally: fatal=%v skip=%v, want a skip", r.fatal, r.skip)
	}
}
