package main

import (
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// commandFlags is every command's flags, read from the FlagSet the
// command itself builds (newFlags hands it to flagSetMade) when asked
// for its help.
func commandFlags(t *testing.T) map[string]map[string]bool {
	t.Helper()
	flags := map[string]map[string]bool{}
	var made *flag.FlagSet
	flagSetMade = func(fs *flag.FlagSet) { made = fs }
	defer func() { flagSetMade = nil }()
	for name := range commands {
		made = nil
		code, out, errOut := runMain(name, "-h")
		if code != exitOK || made == nil {
			t.Fatalf("%s -h: exit %d, no FlagSet made; stderr %q", name, code, errOut)
		}
		flags[name] = map[string]bool{}
		made.VisitAll(func(f *flag.Flag) { flags[name][f.Name] = true })
		// The synopsis names real flags only.
		synopsis, _, _ := strings.Cut(out, "\n")
		for _, m := range flagToken.FindAllStringSubmatch(synopsis, -1) {
			if !flags[name][m[1]] {
				t.Errorf("rbcastd %s -h: the synopsis %q names -%s, which %s does not have", name, synopsis, m[1], name)
			}
		}
		// A command without flags does not end in an empty list.
		if len(flags[name]) == 0 && strings.Contains(out, "flags:") {
			t.Errorf("rbcastd %s -h has no flags but prints a flags: heading:\n%s", name, out)
		}
	}
	return flags
}

// flagToken is a flag named in text: "-name" not inside a word.
var flagToken = regexp.MustCompile(`(?:^|[\s\[(` + "`" + `])-([a-z][a-z0-9-]*)`)

// operatorDocs are the files an operator reads about rbcastd's commands:
// README.md and docs/*.md, without the history files (they tell of
// flags as they were).
func operatorDocs(t *testing.T) map[string]string {
	t.Helper()
	paths, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	paths = append(paths, "../../README.md")
	docs := map[string]string{}
	for _, p := range paths {
		if strings.HasSuffix(p, "-history.md") {
			continue
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		docs[filepath.Base(p)] = string(b)
	}
	return docs
}

// commandLine is "rbcastd CMD" and what follows it up to the end of its
// code span, comment, pipe or next command.
var commandLine = regexp.MustCompile("rbcastd (run|send|recv|status|bench|sendfile|recvfile|keygen|rekey)\\b([^`#|;&\\n]*)")

// The docs and the commands keep in step: every flag a doc gives an
// rbcastd command ("rbcastd recv -all ...") is one that command has, and
// every flag of every command is named in README.md or docs/ (the
// -h text is not the only place an operator can learn of it). A flag
// added, renamed or dropped fails here until the docs follow.
func TestFlagsMatchDocs(t *testing.T) {
	flags := commandFlags(t)
	docs := operatorDocs(t)
	var names []string
	for n := range docs {
		names = append(names, n)
	}
	sort.Strings(names)
	all := ""
	for _, n := range names {
		text := docs[n]
		all += text
		for i, line := range strings.Split(text, "\n") {
			for _, m := range commandLine.FindAllStringSubmatch(line, -1) {
				for _, f := range flagToken.FindAllStringSubmatch(m[2], -1) {
					if !flags[m[1]][f[1]] {
						t.Errorf("%s:%d: %q gives rbcastd %s the flag -%s, which it does not have", n, i+1, strings.TrimSpace(m[0]), m[1], f[1])
					}
				}
			}
		}
	}
	for cmd, fs := range flags {
		for f := range fs {
			if !regexp.MustCompile(`(?:^|[^a-z0-9-])-` + regexp.QuoteMeta(f) + `(?:[^a-z0-9-]|$)`).MatchString(all) {
				t.Errorf("rbcastd %s -%s is named nowhere in README.md or docs/*.md", cmd, f)
			}
		}
	}
}
