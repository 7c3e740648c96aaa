//go:build !linux

package cache

// provisionChunks leaves fastcache's chunks to fastcache where there are
// no transparent huge pages to ask for (hugepages_linux.go).
func provisionChunks(int) error { return nil }

// thpMode: no transparent huge pages here.
func thpMode() string { return "unsupported" }
