//go:build tools

// Package tools pins h2spec, the HTTP/2 conformance tester the e2e test
// TestH2Spec runs against shield (make h2spec builds it once per machine).
package tools

import _ "github.com/summerwind/h2spec/cmd/h2spec"
