package proxy

import (
	"errors"
	"testing"

	"github.com/valyala/fasthttp"
)

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

// Requests fasthttp cannot read are answered 408, 413, 431 or 400, never
// cached.
func TestRequestError(t *testing.T) {
	for _, tc := range []struct {
		err  error
		code int
	}{
		{timeoutErr{}, 408},
		{fasthttp.ErrBodyTooLarge, 413},
		{&fasthttp.ErrSmallBuffer{}, 431},
		{errors.New("garbage"), 400},
	} {
		var ctx fasthttp.RequestCtx
		requestError(&ctx, tc.err)
		if ctx.Response.StatusCode() != tc.code || string(ctx.Response.Header.Peek("Cache-Control")) != "no-store" || !ctx.Response.ConnectionClose() {
			t.Errorf("%v: %d %q close=%v, want %d no-store close", tc.err, ctx.Response.StatusCode(), ctx.Response.Header.Peek("Cache-Control"), ctx.Response.ConnectionClose(), tc.code)
		}
	}
}
