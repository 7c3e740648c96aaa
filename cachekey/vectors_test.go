package cachekey

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/vectors.json from vectorInputs (go test ./cachekey -run Vectors -update)")

const vectorsFile = "vectors.json"

// vectorInput is one pinned case: rules, parts and Vary dimensions, in a form
// another implementation can read from JSON.
type vectorInput struct {
	Name        string   `json:"name"`
	IgnoreQuery []string `json:"ignore_query,omitempty"`
	KeyHeaders  []string `json:"key_headers,omitempty"`
	Namespace   uint32   `json:"namespace"`
	Route       string   `json:"route"`
	Scheme      string   `json:"scheme"`
	Host        string   `json:"host"`
	Path        string   `json:"path"`
	Query       string   `json:"query"`
	Tenant      string   `json:"tenant"`
	Headers     []string `json:"headers,omitempty"` // "" = absent
	// Vary dimensions appended with AppendVary, in order; a null value means
	// the header is absent.
	Vary []vectorVary `json:"vary,omitempty"`
}

type vectorVary struct {
	Name  string  `json:"name"`
	Value *string `json:"value"`
}

// vectorFile is the JSON document in testdata/vectors.json.
type vectorFile struct {
	About   []string `json:"about"`
	Vectors []vector `json:"vectors"`
}

// vectorsAbout explains the file to readers of the JSON alone.
var vectorsAbout = []string{
	"Pinned cache keys of github.com/shield-proxy/shield/cachekey; the layout is in the package doc (doc.go).",
	"key = Append(nil, NewRules(ignore_query, key_headers), parts) then AppendVary(key, name, value) for each vary entry in order.",
	"headers are values for the key headers in sorted lower-case name order (Rules.KeyHeaders), not config order; \"\" = absent.",
	"vary value null = header absent (nil), \"\" = present and empty.",
	"key is hex; digest is xxhash64 (seed 0) of the key bytes, 16 hex digits.",
	"Regenerate with: go test ./cachekey -run Vectors -update (a changed key needs a Version bump).",
}

// vector is a vectorInput with its expected outputs.
type vector struct {
	vectorInput
	Key    string `json:"key"`    // hex of the key bytes
	Digest string `json:"digest"` // Digest(key) as 16 hex digits
}

func strp(s string) *string { return &s }

// vectorInputs are the pinned cases. Edit them, then run with -update and
// review the diff of testdata/vectors.json: any change to an existing key is
// a layout change and needs a Version bump.
var vectorInputs = []vectorInput{
	{Name: "minimal", Route: "r", Scheme: "http", Host: "a", Path: "/"},
	{Name: "typical", Namespace: 1, Route: "api", Scheme: "https", Host: "api.example.com",
		Path: "/v1/items/42", Query: "page=2&lang=en"},
	{Name: "host normalised", Route: "api", Scheme: "HTTPS", Host: "API.Example.COM.:443", Path: "/"},
	{Name: "http port 443 kept", Route: "api", Scheme: "http", Host: "example.com:443", Path: "/"},
	{Name: "ipv6 literal", Route: "api", Scheme: "http", Host: "[2001:DB8::1]:80", Path: "/"},
	{Name: "raw path", Route: "api", Scheme: "https", Host: "example.com",
		Path: "/a/../b%2Fc/%7Euser/./x"},
	{Name: "query sorted and dropped", IgnoreQuery: []string{"utm_source", "fbclid"}, Route: "api",
		Scheme: "https", Host: "example.com", Path: "/s",
		Query: "z=1&utm_source=news&a=2&&fbclid=abc&m"},
	{Name: "query duplicates stable", Route: "api", Scheme: "https", Host: "example.com", Path: "/s",
		Query: "tag=b&id=7&tag=a"},
	{Name: "query only ignored", IgnoreQuery: []string{"utm_source"}, Route: "api", Scheme: "https",
		Host: "example.com", Path: "/s", Query: "utm_source=x"},
	{Name: "tenant", Namespace: 7, Route: "tenant-api", Scheme: "https", Host: "example.com",
		Path: "/me", Tenant: "acme"},
	{Name: "key headers", KeyHeaders: []string{"X-Device", "Accept-Language"}, Route: "api",
		Scheme: "https", Host: "example.com", Path: "/", Headers: []string{" en-GB , fr ", ""}},
	{Name: "vary present", Route: "r", Scheme: "http", Host: "a", Path: "/",
		Vary: []vectorVary{{Name: "Accept-Encoding", Value: strp("gzip,  br")}}},
	{Name: "vary absent and empty", Route: "r", Scheme: "http", Host: "a", Path: "/",
		Vary: []vectorVary{{Name: "accept-encoding", Value: nil}, {Name: "accept-language", Value: strp("")}}},
	{Name: "long path", Route: "api", Scheme: "https", Host: "example.com",
		Path: "/" + strings.Repeat("p", 199)},
	{Name: "max namespace", Namespace: 0xFFFFFFFF, Route: "api", Scheme: "https", Host: "example.com",
		Path: "/", Query: "b=2&a=1", Tenant: "t",
		KeyHeaders: []string{"x-device"}, Headers: []string{"tablet"},
		Vary: []vectorVary{{Name: "accept", Value: strp("application/json")}}},
}

// compute builds the key of one input with the package under test.
func (in *vectorInput) compute(t *testing.T) []byte {
	t.Helper()
	r, err := NewRules(in.IgnoreQuery, in.KeyHeaders)
	if err != nil {
		t.Fatalf("%s: NewRules: %v", in.Name, err)
	}
	p := Parts{
		Namespace: in.Namespace,
		Route:     in.Route,
		Scheme:    []byte(in.Scheme),
		Host:      []byte(in.Host),
		Path:      []byte(in.Path),
		Query:     []byte(in.Query),
		Tenant:    []byte(in.Tenant),
	}
	for _, h := range in.Headers {
		p.Headers = append(p.Headers, []byte(h))
	}
	key := Append(nil, r, &p)
	for _, d := range in.Vary {
		var v []byte
		if d.Value != nil {
			v = []byte(*d.Value)
		}
		key = AppendVary(key, []byte(d.Name), v)
	}
	return key
}

// reference builds the key of one input with the slow reference of
// reference_test.go.
func (in *vectorInput) reference() []byte {
	p := Parts{
		Namespace: in.Namespace, Route: in.Route, Scheme: []byte(in.Scheme), Host: []byte(in.Host),
		Path: []byte(in.Path), Query: []byte(in.Query), Tenant: []byte(in.Tenant),
	}
	for _, h := range in.Headers {
		p.Headers = append(p.Headers, []byte(h))
	}
	var vary []refVary
	for _, d := range in.Vary {
		vary = append(vary, refVary{d.Name, d.Value})
	}
	return refKey(in.IgnoreQuery, in.KeyHeaders, &p, vary)
}

func TestVectors(t *testing.T) {
	path := filepath.Join("testdata", vectorsFile)
	if *update {
		var out []vector
		for i := range vectorInputs {
			in := vectorInputs[i]
			key := in.compute(t)
			out = append(out, vector{vectorInput: in, Key: hex.EncodeToString(key), Digest: fmt.Sprintf("%016x", Digest(key))})
		}
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false) // keep '&' readable in queries
		enc.SetIndent("", "  ")
		if err := enc.Encode(vectorFile{About: vectorsAbout, Vectors: out}); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %d vectors to %s", len(out), path)
	}

	vectors := loadVectors(t)
	if len(vectors) != len(vectorInputs) {
		t.Fatalf("%s holds %d vectors, vectorInputs %d: run with -update", path, len(vectors), len(vectorInputs))
	}
	for i, v := range vectors {
		t.Run(v.Name, func(t *testing.T) {
			if !reflect.DeepEqual(v.vectorInput, vectorInputs[i]) {
				t.Fatalf("inputs in %s differ from vectorInputs[%d]: run with -update", path, i)
			}
			key := v.compute(t)
			if got := hex.EncodeToString(key); got != v.Key {
				t.Errorf("key = %s, want %s", got, v.Key)
			}
			if got := fmt.Sprintf("%016x", Digest(key)); got != v.Digest {
				t.Errorf("digest = %s, want %s", got, v.Digest)
			}
			if ref := v.reference(); !bytes.Equal(key, ref) {
				t.Errorf("key = %x, reference implementation %x", key, ref)
			}
		})
	}
}

func loadVectors(t *testing.T) []vector {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", vectorsFile))
	if err != nil {
		t.Fatal(err)
	}
	var f vectorFile
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		t.Fatalf("decode %s: %v", vectorsFile, err)
	}
	return f.Vectors
}

// TestVectorsHandChecked spells out two pinned keys byte by byte, derived by
// hand from the layout in doc.go rather than by running Append, so that
// -update cannot silently pin a wrong layout.
func TestVectorsHandChecked(t *testing.T) {
	want := map[string][]byte{
		// minimal: Route "r", scheme "http", host "a", path "/".
		"minimal": {
			Version,                // Version
			0x00, 0x00, 0x00, 0x00, // namespace 0, big-endian
			0x01, 'r', // field(route)
			0x04, 'h', 't', 't', 'p', // field(scheme)
			0x01, 'a', // field(host)
			0x01, '/', // field(path)
			0x00, // field(query): empty
			0x00, // field(tenant): empty
			0x00, // no key headers
		},
		// max namespace: namespace 0xFFFFFFFF, query "b=2&a=1" sorted to
		// "a=1&b=2", tenant "t", one key header x-device=tablet, and one Vary
		// dimension accept=application/json.
		"max namespace": append(append(append([]byte{
			Version,                // Version
			0xFF, 0xFF, 0xFF, 0xFF, // namespace
			0x03, 'a', 'p', 'i', // field(route)
			0x05, 'h', 't', 't', 'p', 's', // field(scheme)
			0x0b}, "example.com"...), // field(host), 11 bytes
			0x01, '/', // field(path)
			0x07, 'a', '=', '1', '&', 'b', '=', '2', // field(query), sorted
			0x01, 't', // field(tenant)
			0x01,                                         // one key header
			0x08, 'x', '-', 'd', 'e', 'v', 'i', 'c', 'e', // field(name)
			0x06, 't', 'a', 'b', 'l', 'e', 't', // field(value)
			'V',                                // vary tag
			0x06, 'a', 'c', 'c', 'e', 'p', 't', // field(vary name)
			0x01,                          // present
			0x10), "application/json"...), // field(value), 16 bytes
		// long path: the 200-byte path takes a two-byte uvarint,
		// 200 = 0b1_1001000 → 0xC8 0x01.
		"long path": append(append(append([]byte{
			Version, 0x00, 0x00, 0x00, 0x00,
			0x03, 'a', 'p', 'i',
			0x05, 'h', 't', 't', 'p', 's',
			0x0b}, "example.com"...),
			0xC8, 0x01, '/'), append([]byte(strings.Repeat("p", 199)), 0x00, 0x00, 0x00)...),
	}
	vectors := loadVectors(t)
	found := 0
	for _, v := range vectors {
		w, ok := want[v.Name]
		if !ok {
			continue
		}
		found++
		if got := hex.EncodeToString(w); got != v.Key {
			t.Errorf("%s: pinned key %s, hand-derived %s", v.Name, v.Key, got)
		}
		if got := v.compute(t); !bytes.Equal(got, w) {
			t.Errorf("%s: Append = %x, hand-derived %x", v.Name, got, w)
		}
	}
	if found != len(want) {
		t.Errorf("found %d of %d hand-checked vectors in %s", found, len(want), vectorsFile)
	}
}
