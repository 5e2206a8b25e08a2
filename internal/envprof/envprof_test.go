package envprof

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Each kind writes a non-empty file named by the variable plus the rank
// (the path itself for rank -1); a path that cannot be created is an
// error naming the variable; unset, nothing is written.
func TestStart(t *testing.T) {
	for _, k := range []struct {
		name  string
		start func(string, int) (func(), error)
	}{{"trace", Trace}, {"cpu", CPU}} {
		t.Run(k.name, func(t *testing.T) {
			dir := t.TempDir()
			const env = "RBCAST_ENVPROF_TEST"
			t.Setenv(env, filepath.Join(dir, "p"))
			for _, c := range []struct {
				rank int
				file string
			}{{2, "p.2"}, {-1, "p"}} {
				stop, err := k.start(env, c.rank)
				if err != nil {
					t.Fatal(err)
				}
				stop()
				if fi, err := os.Stat(filepath.Join(dir, c.file)); err != nil || fi.Size() == 0 {
					t.Errorf("rank %d: %v, %v; want a non-empty %s", c.rank, fi, err, c.file)
				}
			}
			t.Setenv(env, filepath.Join(dir, "missing", "p"))
			if _, err := k.start(env, 0); err == nil || !strings.HasPrefix(err.Error(), env+": ") {
				t.Errorf("uncreatable path: error %v, want one starting %s:", err, env)
			}
			t.Setenv(env, "")
			stop, err := k.start(env, 0)
			if err != nil {
				t.Fatal(err)
			}
			stop()
			if entries, _ := os.ReadDir(dir); len(entries) != 2 {
				t.Errorf("unset: %d files in the directory, want the 2 written before", len(entries))
			}
		})
	}
}
