//go:build !race

package httpx

import (
	"testing"

	"github.com/valyala/fasthttp"
)

// TestSetDateAllocs: setting Date allocates nothing — every hit calls it.
// (The race detector makes sync.Pool drop items, so not under -race.)
func TestSetDateAllocs(t *testing.T) {
	var h fasthttp.ResponseHeader
	date := []byte(testDate)
	if n := testing.AllocsPerRun(100, func() { SetDate(&h, date) }); n != 0 {
		t.Errorf("SetDate allocates %v times", n)
	}
}
