package main

import (
	"encoding/json"
	"net/http"
	"strings"
)

// fetchPage is an HTML page whose script fetches src (a path on this
// origin, through whatever proxy served the page) and writes what the
// browser decoded into the DOM: status, Content-Encoding and the length
// of the decoded text. It lets a browser test show that a coded answer
// (gzip, br) decodes to the origin's bytes.
const fetchPage = `<!doctype html>
<html><head><meta charset="utf-8"><title>demo-origin fetch</title></head>
<body><p id="result">pending</p>
<script>
fetch(SRC).then(async (r) => {
  const text = await r.text();
  document.getElementById("result").textContent =
    "status=" + r.status + " ce=" + (r.headers.get("content-encoding") || "identity") + " len=" + text.length;
}).catch((e) => { document.getElementById("result").textContent = "error " + e; });
</script></body></html>
`

// servePage answers ?page=fetch&src=/path: fetchPage for src, cacheable
// like any resource. src must be a path on this origin.
func servePage(w http.ResponseWriter, r *http.Request) {
	src := r.URL.Query().Get("src")
	if !strings.HasPrefix(src, "/") || strings.HasPrefix(src, "//") {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "demo-origin: src must be a path on this origin"})
		return
	}
	js, _ := json.Marshal(src) // a JS string literal; < and > are escaped
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", defaultCacheControl)
	_, _ = w.Write([]byte(strings.Replace(fetchPage, "SRC", string(js), 1)))
}
