// Package importrules holds the test that keeps the arrows between
// packages those docs/architecture.md §2 draws: proxy is being split into
// rooms (proxy/httpx today; proxy/cache, proxy/upstream, proxy/cluster to
// come), and a room that imports what it must not would tie the tangle
// again without anyone noticing. The test reads every package's imports
// (go/parser over the non-test .go files, so it needs no toolchain call)
// and fails on a forbidden arrow, naming the file and the chain of
// imports that makes it.
//
// Rules for packages that do not exist yet are kept: they hold from the
// commit that creates the package.
package importrules
