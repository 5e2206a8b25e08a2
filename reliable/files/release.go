package files

// Release gives back everything the core holds open, for a runtime that
// stops for good (a daemon leaving, or starting again as a new
// incarnation): the sources of files queued or open here are closed, and
// the partial copies of transfers under way are kept for a resume
// (SinkFile.Abort(true)). It reports nothing, and the core must not be
// used after it.
func (c *Core) Release() {
	for _, f := range c.queue {
		f.src.Close()
	}
	for _, f := range c.open {
		f.src.Close()
	}
	c.queue, c.open = nil, nil
	for _, t := range c.in {
		if t.file != nil {
			t.file.Abort(true)
			t.file, t.summed = nil, nil
			c.opened--
		}
	}
}
