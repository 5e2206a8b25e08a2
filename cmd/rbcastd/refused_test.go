package main

import (
	"bytes"
	"testing"

	"github.com/rbcast/rbcast/internal/localapi"
)

// sendfile names each refusal's limit from its cause alone: the causes
// of 2026-12-01 (12: larger than the receiver's file system allows a
// file to be; 13: a name that is not a local file path there) print
// their own line, not "does not hold it: reason(N)".
func TestSendFileRefusedTexts(t *testing.T) {
	q := &localapi.FileQueued{ID: 3, Size: 5 << 30, Name: "disk.img"}
	for cause, want := range map[uint8]string{
		localapi.FileCauseTooBigForFS: "rbcastd sendfile: disk.img: member 2 refused it: larger than its file system allows a file to be (5368709120 bytes; its log names the limit)\n",
		localapi.FileCauseBadName:     "rbcastd sendfile: disk.img: member 2 refused it: name not a local file path there (\"disk.img\": absolute, climbing out with \"..\", the directory itself, or under .rbcast-partial)\n",
	} {
		var stdout, stderr bytes.Buffer
		v := &localapi.FileVerdict{ID: 3, Done: []uint16{1}, Missing: []localapi.FileMiss{{Member: 2, Cause: cause, Blocks: 3667}}}
		if verdictOK(q, v, &stdout, &stderr, nil) {
			t.Errorf("cause %d: the verdict is ok", cause)
		}
		if stderr.String() != want {
			t.Errorf("cause %d: stderr %q, want %q", cause, stderr.String(), want)
		}
	}
}
