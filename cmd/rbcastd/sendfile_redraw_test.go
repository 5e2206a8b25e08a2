package main

import (
	"bytes"
	"path/filepath"
	"sync"
	"testing"
)

// eraseLine is what fileProgress writes to erase one of its lines.
const eraseLine = "\x1b[1A\x1b[2K"

// hookTerminal records what is written to it and, before the first
// write that starts with at, runs hook (in the writer's goroutine, at
// that very point: what hook writes comes before it).
type hookTerminal struct {
	mu   sync.Mutex
	b    bytes.Buffer
	at   string
	hook func()
}

func (w *hookTerminal) Write(p []byte) (int, error) {
	w.mu.Lock()
	var hook func()
	if w.hook != nil && bytes.HasPrefix(p, []byte(w.at)) {
		hook, w.hook = w.hook, nil
	}
	w.mu.Unlock()
	if hook != nil {
		hook()
	}
	w.mu.Lock()
	w.b.Write(p)
	w.mu.Unlock()
	return len(p), nil
}

func (w *hookTerminal) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// A redraw of the progress that falls between erasing its lines and the
// refusal printed in their place draws nothing: the refusal stands where
// the lines stood, and the next redraw draws below it. The redraw is
// injected there, just before the refusal is written. Before, the lines were
// erased (clear) and the refusal printed after as two steps, and a
// redraw between them drew its lines above the refusal; the redraw
// after erased as many lines up from below it, the refusal with them,
// leaving a progress line standing.
func TestSendFilesRedrawBetweenClearAndRefusal(t *testing.T) {
	c, bad := fakeSendFiles(t, 1, 0, func(int) string { return "filestore: open /x/f000: permission denied" })
	term := &hookTerminal{}
	term.b.WriteString("f000: sending\n  member 1: ...\n")
	prog := &fileProgress{sf: &socketFlags{socket: filepath.Join(t.TempDir(), "none")}, w: term, ids: make(chan [2]int64, 8), quit: make(chan struct{}), ended: make(chan struct{}), lines: 2}
	term.at, term.hook = "rbcastd sendfile: ", func() { prog.draw([]string{"f000: sending", "  member 1: 10 %"}) }
	go prog.run()
	paths, names := manyNames(1)
	var out bytes.Buffer
	ok := sendFiles(c, nil, 0, paths, paths, names, &out, term, prog)
	prog.stop()
	c.Close()
	if s := <-bad; s != "" {
		t.Fatal(s)
	}
	if want := "f000: sending\n  member 1: ...\n" + eraseLine + eraseLine + "rbcastd sendfile: /x/f000: refused: filestore: open /x/f000: permission denied\n"; ok || term.String() != want {
		t.Errorf("sendFiles = %v, the terminal got %q, want false, %q", ok, term.String(), want)
	}
	// And a redraw after draws below the refusal, and erases only its
	// own lines.
	prog.draw([]string{"f001: sending"})
	prog.print(func() {})
	if want := "rbcastd sendfile: /x/f000: refused: filestore: open /x/f000: permission denied\nf001: sending\n" + eraseLine; !bytes.HasSuffix([]byte(term.String()), []byte(want)) {
		t.Errorf("after a redraw and a clear the terminal got %q, want it to end %q", term.String(), want)
	}
}
