package netns

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// A record names its builder by pid and start time: this process is not
// gone, an ended child is, and so is a record whose pid now names a
// process started at another time (the pid reused).
func TestOwnerGone(t *testing.T) {
	me, err := owner()
	if err != nil {
		t.Fatal(err)
	}
	if gone, err := ownerGone(me); gone || err != nil {
		t.Errorf("ownerGone(this process %q) = %v, %v; want false", me, gone, err)
	}
	child := exec.Command("true")
	if err := child.Run(); err != nil {
		t.Fatal(err)
	}
	start, _ := startTime(os.Getpid())
	ended := fmt.Sprintf("%d %d\n", child.Process.Pid, start)
	if gone, err := ownerGone(ended); !gone || err != nil {
		t.Errorf("ownerGone(an ended child %q) = %v, %v; want true", ended, gone, err)
	}
	reused := fmt.Sprintf("%d %d\n", os.Getpid(), start+1)
	if gone, err := ownerGone(reused); !gone || err != nil {
		t.Errorf("ownerGone(this pid with another start time %q) = %v, %v; want true", reused, gone, err)
	}
	if _, err := ownerGone("nonsense"); err == nil {
		t.Error("ownerGone(\"nonsense\") gave no error")
	}
}
