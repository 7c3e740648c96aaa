package main

import (
	"strings"
	"testing"
)

const stream = `{"Action":"start","Package":"p"}
{"Action":"run","Package":"p","Test":"TestA"}
{"Action":"output","Package":"p","Test":"TestA","Output":"=== RUN   TestA\n"}
{"Action":"output","Package":"p","Test":"TestA","Output":"--- PASS: TestA (0.00s)\n"}
{"Action":"pass","Package":"p","Test":"TestA"}
{"Action":"run","Package":"p","Test":"TestB"}
{"Action":"output","Package":"p","Test":"TestB","Output":"=== RUN   TestB\n"}
{"Action":"output","Package":"p","Test":"TestB","Output":"    b_test.go:9: no consul agent\n"}
{"Action":"output","Package":"p","Test":"TestB","Output":"--- SKIP: TestB (0.00s)\n"}
{"Action":"skip","Package":"p","Test":"TestB"}
{"Action":"run","Package":"p","Test":"TestC"}
{"Action":"output","Package":"p","Test":"TestC","Output":"    c_test.go:3: got 1, want 2\n"}
{"Action":"output","Package":"p","Test":"TestC","Output":"--- FAIL: TestC (0.00s)\n"}
{"Action":"fail","Package":"p","Test":"TestC"}
{"Action":"output","Package":"p","Output":"FAIL\tp\t0.01s\n"}
{"Action":"fail","Package":"p"}
`

func run(in string, maxSkips int) (string, int) {
	var out strings.Builder
	r := newReport(&out)
	for _, l := range strings.Split(strings.TrimSuffix(in, "\n"), "\n") {
		r.add([]byte(l))
	}
	code := r.summary("t", maxSkips)
	return out.String(), code
}

func TestReportCountsAndShowsFailures(t *testing.T) {
	out, code := run(stream, -1)
	if code != 1 {
		t.Errorf("exit %d with a failing test, want 1", code)
	}
	for _, want := range []string{"t: 1 passed, 1 failed, 1 skipped", "got 1, want 2", "skipped: p TestB: b_test.go:9: no consul agent", "FAIL\tp"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "--- PASS: TestA") {
		t.Errorf("a passing test's output was printed:\n%s", out)
	}
}

func TestReportSkipLimit(t *testing.T) {
	passSkip := strings.Join(strings.Split(stream, "\n")[:10], "\n") + "\n"
	if _, code := run(passSkip, -1); code != 0 {
		t.Errorf("no limit: exit %d, want 0", code)
	}
	out, code := run(passSkip, 0)
	if code != 1 || !strings.Contains(out, "1 skipped tests, at most 0 allowed") {
		t.Errorf("limit 0 with one skip: exit %d, want 1:\n%s", code, out)
	}
}

func TestReportPassesThroughNonJSON(t *testing.T) {
	out, _ := run("# p\n./x.go:1:1: undefined: y\n", -1)
	if !strings.Contains(out, "undefined: y") {
		t.Errorf("a build error was lost:\n%s", out)
	}
}
