package fencelock_test

import (
	"os"
	"regexp"
	"slices"
	"testing"
)

// README.zh-CN.md tells the same things as README.md to the readers this project started from:
// the two have the same code blocks, in the same order, the same sections, every figure of
// the English one, and every command and code span that looks like one. An edit to one that
// the other misses fails here.
func TestReadmesAgree(t *testing.T) {
	en, zh := readFile(t, "README.md"), readFile(t, "README.zh-CN.md")
	block := regexp.MustCompile("(?ms)^```[^\n]*\n.*?^```$")
	if b, c := block.FindAllString(en, -1), block.FindAllString(zh, -1); !slices.Equal(b, c) {
		for i := range max(len(b), len(c)) {
			if i >= len(b) || i >= len(c) || b[i] != c[i] {
				t.Fatalf("code block %d differs (README.md has %d blocks, README.zh-CN.md %d):\n%s", i, len(b), len(c), at(b, i)+"\n---\n"+at(c, i))
			}
		}
	}
	heading := regexp.MustCompile(`(?m)^#{1,3} `)
	if a, b := len(heading.FindAllString(en, -1)), len(heading.FindAllString(zh, -1)); a != b {
		t.Errorf("README.md has %d sections, README.zh-CN.md %d", a, b)
	}
	// Outside the code blocks: every figure with its unit, and every code span.
	enText, zhText := block.ReplaceAllString(en, ""), block.ReplaceAllString(zh, "")
	figure := regexp.MustCompile(`\d[\d,.]*(?:\s?(?:µs|ms|s\b|/s|×|%|h\b|m\d+s))`)
	span := regexp.MustCompile("`[^`\n]+`")
	for _, re := range []*regexp.Regexp{figure, span} {
		for _, f := range unique(re.FindAllString(enText, -1)) {
			if !regexp.MustCompile(regexp.QuoteMeta(f)).MatchString(zhText) {
				t.Errorf("README.zh-CN.md lacks %q", f)
			}
		}
	}
	if !regexp.MustCompile(`\(README\.zh-CN\.md\)`).MatchString(en) || !regexp.MustCompile(`\(README\.md\)`).MatchString(zh) {
		t.Error("each README must link the other at its top")
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func at(s []string, i int) string {
	if i < len(s) {
		return s[i]
	}
	return "(none)"
}

func unique(s []string) []string {
	slices.Sort(s)
	return slices.Compact(s)
}
