package openapitest

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func BenchmarkCheckShare(b *testing.B) {
	v, _ := Default()
	body := `{"type":"ISSUE","issueId":"OLD-1","password":"pw","expiration":1900000000000}`
	for i := 0; i < b.N; i++ {
		req := httptest.NewRequest("POST", "http://x/webapi/share", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		resp := &http.Response{StatusCode: 201, Header: secure(http.Header{"Content-Type": {"application/json"}, "Location": {"/webapi/share/" + shareUUID}})}
		if err := v.Check(req, []byte(body), resp, []byte(share)); err != nil {
			b.Fatal(err)
		}
	}
}
