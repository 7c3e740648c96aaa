// Package e2e checks shield from the outside: its tests build the shield
// and demo-origin binaries once (TestMain), start them as real processes on
// free 127.0.0.1 ports, drive them over HTTP and signals, and read the
// origin's counters to tell what reached it.
//
// Invariants of the harness:
//   - every test gets its own origin and shield, so tests are independent
//     and may run in parallel;
//   - readiness is polled (shield GET /readyz, origin GET /__origin/stats)
//     with a deadline; nothing waits by sleeping;
//   - processes are killed by PID at cleanup, and their output is written
//     to the test log when the test failed;
//   - assertions rely on the Cache-Status "hit" versus "fwd=" distinction
//     and on origin counters, and pin exact strings only where shield's
//     contract does.
//
// `go test -short` skips the package.
package e2e
