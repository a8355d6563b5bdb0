package keystore

import "testing"

func TestQuietValues(t *testing.T) {
	const quiet = `"(a value of 16 characters or more)"`
	tests := []struct {
		name, msg, want string
	}{
		{"short values far apart stay",
			`policy "minute" is named by plan "gold" too: give one of them another name`,
			`policy "minute" is named by plan "gold" too: give one of them another name`},
		{"a long value goes",
			`privilege "ZZSECRETTOKEN0123456789" is unknown`,
			`privilege ` + quiet + ` is unknown`},
		{"a long value beside a short one",
			`policy "minute" is named by plan "ZZSECRETTOKEN0123456789" too`,
			`policy "minute" is named by plan ` + quiet + ` too`},
		{"fifteen characters stay, sixteen go",
			`"abcdefghijklmno" and "abcdefghijklmnop"`,
			`"abcdefghijklmno" and ` + quiet},
		{"an escaped quote inside a value, as %q writes it",
			`name "ab\"ZZSECRETTOKEN0123456789" and "x"`,
			`name ` + quiet + ` and "x"`},
		{"a quote left unpaired: every long span goes",
			`name "a"b" is "ZZSECRETTOKEN0123456789"`,
			`name "a"b" is ` + quiet},
		{"words joined by hyphens stay, however long", `plugin "rate-limiting-advanced" and "rate-limiting-Advanced"`,
			`plugin "rate-limiting-advanced" and ` + quiet},
		{"no quotes", `line 3: not JSON`, `line 3: not JSON`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := QuietValues(tt.msg); got != tt.want {
				t.Errorf("QuietValues(%s)\n got %s\nwant %s", tt.msg, got, tt.want)
			}
		})
	}
}
