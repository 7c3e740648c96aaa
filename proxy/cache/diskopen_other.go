//go:build !unix

package cache

// diskOpenLimit: without a descriptor limit to read, a modest number.
func diskOpenLimit() int { return 1024 }
