package access

import "testing"

func TestMatchPattern(t *testing.T) {
	tests := []struct {
		pattern, path string
		want          bool
	}{
		{"/a/b", "/a/b", true},
		{"/a/b", "/a/b/", false},
		{"/a/b", "/a", false},
		{"/a/b", "/a/bc", false},
		{"/a/{id}", "/a/x", true},
		{"/a/{id}", "/a/", false},
		{"/a/{id}", "/a/x/y", false},
		{"/a/{id}/c/{d}", "/a/x/c/y", true},
		{"/a/{id}/c/{d}", "/a/x/d/y", false},
		{"/a/{id}/c/{d}", "/a//c/y", false},
		{"/a/b", "a/b", true},
		{"/", "", true},
	}
	for _, tt := range tests {
		if got := MatchPattern(tt.pattern, tt.path); got != tt.want {
			t.Errorf("MatchPattern(%q, %q) = %v, want %v", tt.pattern, tt.path, got, tt.want)
		}
		// Match counts segments first: a match needs as many.
		if tt.want && segments(tt.pattern) != segments(tt.path) {
			t.Errorf("segments(%q) = %d, segments(%q) = %d", tt.pattern, segments(tt.pattern), tt.path, segments(tt.path))
		}
	}
}

func TestIdentityContext(t *testing.T) {
	if IdentityFrom(t.Context()) != nil {
		t.Fatal("identity in a bare context")
	}
	id := &Identity{KeyID: "k", AdminProjects: []string{"p1"}}
	if got := IdentityFrom(WithIdentity(t.Context(), id)); got != id {
		t.Fatalf("IdentityFrom = %v, want %v", got, id)
	}
	tests := []struct {
		projects []string
		project  string
		admin    bool
		all      bool
	}{
		{nil, "p1", false, false},
		{[]string{"p1"}, "p1", true, false},
		{[]string{"p1"}, "p2", false, false},
		{[]string{"p1"}, "", false, false},
		{[]string{"p1", "*"}, "p2", true, true},
		{[]string{"*"}, "", true, true},
	}
	for _, tt := range tests {
		id := &Identity{AdminProjects: tt.projects}
		if got := id.AdminOf(tt.project); got != tt.admin {
			t.Errorf("%v AdminOf(%q) = %v, want %v", tt.projects, tt.project, got, tt.admin)
		}
		if got := id.AdminOfAll(); got != tt.all {
			t.Errorf("%v AdminOfAll() = %v, want %v", tt.projects, got, tt.all)
		}
	}
}
