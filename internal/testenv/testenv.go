// Package testenv decides what a test does when something outside the
// repository that it needs (a Consul agent, promtool, network namespaces,
// Chromium, nginx) is missing.
//
// On a developer's machine the test skips, saying what to install. Under
// CI (CI set to anything but "", "0" or "false") the same gap fails the
// test: a CI run that passes must have run everything, so a prerequisite
// that .ci/run forgot to install cannot hide behind a skip.
package testenv

import (
	"os"
	"testing"
)

// InCI reports whether the tests run under CI, where nothing may skip.
func InCI() bool {
	switch os.Getenv("CI") {
	case "", "0", "false":
		return false
	}
	return true
}

// Missing ends t because a prerequisite is missing: a skip locally, a
// failure under CI. The message should say what is missing and how to
// get it.
func Missing(t testing.TB, format string, args ...any) {
	t.Helper()
	if InCI() {
		t.Fatalf("missing prerequisite (a failure under CI=true): "+format, args...)
		return // Fatalf does not return on a real *testing.T
	}
	t.Skipf(format, args...)
}
