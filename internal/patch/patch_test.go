package patch

import (
	"encoding/json"
	"testing"
)

func TestEmpty(t *testing.T) {
	type input struct {
		Name  Field[string]   `json:"name"`
		Tags  Field[[]string] `json:"tags"`
		Extra string          `json:"extra"`
	}
	tests := []struct {
		body string
		want bool
	}{
		{`{}`, true},
		{`{"name":"a"}`, false},
		{`{"name":null}`, false},
		{`{"tags":[]}`, false},
		{`{"extra":"x"}`, false},
	}
	for _, tc := range tests {
		var in input
		if err := json.Unmarshal([]byte(tc.body), &in); err != nil {
			t.Fatal(err)
		}
		if got := Empty(&in); got != tc.want {
			t.Errorf("Empty(%s) = %v, want %v", tc.body, got, tc.want)
		}
	}
}
