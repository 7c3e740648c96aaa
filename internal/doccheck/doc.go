// Package doccheck holds the test that keeps the repository's references
// resolvable: a clone must stand alone, so every "docs/architecture.md §N"
// in code or docs names a section that exists, every other "§" reference
// names its RFC, nothing points at documents outside the repository, and
// every relative link in a Markdown file names a file that exists. A
// package doc's file list (proxy's and proxy/httpx's must have one) names
// exactly the directory's non-test .go files.
//
// Section references without an RFC number are allowed only in the stale
// package, whose doc says they are RFC 9111's.
package doccheck
