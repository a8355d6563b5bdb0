package command_test

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/keygate/keygate/internal/openapi"
)

// TestOpenAPICommand: `caddy webapi openapi` prints either document, as
// JSON with the server asked for, or as its YAML source, with no gateway
// running.
func TestOpenAPICommand(t *testing.T) {
	tests := []struct {
		name   string
		args   []string
		want   []byte // the document printed, before indenting
		server string
		fails  bool
	}{
		{"web API", []string{"openapi"}, openapi.WebAPI(), "/", false},
		{"web API with a server", []string{"openapi", "--server", "https://gw.example.com"}, nil, "https://gw.example.com", false},
		{"admin, on the --address", []string{"openapi", "--admin"}, nil, "http://localhost:", false},
		{"web API as YAML", []string{"openapi", "--yaml"}, openapi.WebAPIYAML(), "", false},
		{"admin as YAML", []string{"openapi", "--admin", "--yaml"}, openapi.AdminYAML(), "", false},
		{"YAML with a server", []string{"openapi", "--yaml", "--server", "https://x"}, nil, "", true},
		{"an argument", []string{"openapi", "extra"}, nil, "", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, _, err := runCLI(t, tc.args...)
			if tc.fails {
				if err == nil {
					t.Fatalf("no error; printed %.80s", out)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.server == "" {
				if out != string(tc.want) {
					t.Fatalf("printed %.80s, not the YAML source", out)
				}
				return
			}
			var doc struct {
				OpenAPI string `json:"openapi"`
				Info    struct {
					Title string `json:"title"`
				} `json:"info"`
				Servers []struct {
					URL string `json:"url"`
				} `json:"servers"`
			}
			if err := json.Unmarshal([]byte(out), &doc); err != nil {
				t.Fatalf("%v: %.200s", err, out)
			}
			if doc.OpenAPI != "3.1.0" || len(doc.Servers) != 1 || !strings.HasPrefix(doc.Servers[0].URL, tc.server) {
				t.Fatalf("openapi %q servers %+v, want %s", doc.OpenAPI, doc.Servers, tc.server)
			}
			admin := strings.Contains(doc.Info.Title, "administration")
			if admin != slices.Contains(tc.args, "--admin") {
				t.Fatalf("title %q for %v", doc.Info.Title, tc.args)
			}
			if tc.want != nil {
				var compact bytes.Buffer
				if err := json.Compact(&compact, []byte(out)); err != nil || !bytes.Equal(compact.Bytes(), tc.want) {
					t.Fatalf("printed another document (%v)", err)
				}
			}
		})
	}
}
