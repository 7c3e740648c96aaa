package config

import "testing"

// TestCacheDiskDefaults: without cache.disk, memory only and 8MiB
// objects; with it, max_object_size defaults to 1GiB or a quarter of
// the tier, and an explicit value is kept.
func TestCacheDiskDefaults(t *testing.T) {
	base := "listen: :80\norigins: {a: {servers: [x:1]}}\nroutes: [{name: r, hosts: ['*'], origin: a}]\n"
	for _, tt := range []struct {
		cache string
		want  Size
		disk  bool
	}{
		{"", 8 * MiB, false},
		{"cache: {path: /tmp/s, disk: {path: /tmp/d, size: 512MiB}}\n", 128 * MiB, true},
		{"cache: {path: /tmp/s, disk: {path: /tmp/d, size: 100GiB}}\n", GiB, true},
		{"cache: {path: /tmp/s, max_object_size: 2MiB, disk: {path: /tmp/d, size: 100GiB}}\n", 2 * MiB, true},
	} {
		c, err := Parse("ok.yaml", []byte(base+tt.cache), noEnv)
		if err != nil {
			t.Fatalf("%q: %v", tt.cache, err)
		}
		if c.Cache.MaxObjectSize != tt.want || (c.Cache.Disk != nil) != tt.disk {
			t.Errorf("%q: max_object_size %v, disk %v; want %v, %v", tt.cache, c.Cache.MaxObjectSize, c.Cache.Disk, tt.want, tt.disk)
		}
	}
}

func TestWithin(t *testing.T) {
	for _, tt := range []struct {
		p, dir string
		want   bool
	}{
		{"/a/b", "/a", true}, {"/a", "/a/", true}, {"/a/../a/b", "/a", true},
		{"/ab", "/a", false}, {"/a", "/a/b", false}, {"/x/..y", "/x", true}, {"rel/d", "rel", true}, {"other", "rel", false},
	} {
		if got := within(tt.p, tt.dir); got != tt.want {
			t.Errorf("within(%q, %q) = %v, want %v", tt.p, tt.dir, got, tt.want)
		}
	}
}
