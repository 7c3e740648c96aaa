//go:build !unix

package cache

// diskOpenLimit: without a descriptor limit to read, a modest number.
func diskOpenLimit() int { return 1024 }

// fileGone: without fstat's link count, a kept file is taken as present.
func fileGone(int) bool { return false }
