// Command tcpfan is the TCP fan-out of the file benchmark (bench/files/run):
// one sender writes a file to N receivers over N TCP connections at once,
// the baseline a file-dissemination protocol is compared with.
//
//	tcpfan send -n N [-addr :7070] FILE   # accept N receivers, send FILE to each, print the seconds taken
//	tcpfan recv -addr HOST:7070 -o OUT    # receive one copy into OUT
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"
)

const usage = "usage: tcpfan send -n N [-addr :7070] FILE | tcpfan recv -addr HOST:PORT -o OUT"

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "-h", "-help", "--help", "help":
		fmt.Println(usage)
		return
	case "send":
		err = send(os.Args[2:])
	case "recv":
		err = recv(os.Args[2:])
	default:
		err = fmt.Errorf("unknown mode %q: want send or recv", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "tcpfan:", err)
		os.Exit(1)
	}
}

func send(args []string) error {
	fs := flag.NewFlagSet("send", flag.ExitOnError)
	n := fs.Int("n", 1, "receivers to wait for")
	addr := fs.String("addr", ":7070", "address to listen on")
	fs.Parse(args)
	if fs.NArg() != 1 || *n < 1 {
		return errors.New("send: want -n N (at least 1) and one FILE")
	}
	// The file first: a missing one is said before the wait for receivers.
	f, err := os.Open(fs.Arg(0))
	if err != nil {
		return fmt.Errorf("send: %w", err)
	}
	st, err := f.Stat()
	f.Close()
	if err == nil && st.IsDir() {
		return fmt.Errorf("send: %s is a directory, want a file", fs.Arg(0))
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	defer ln.Close()
	var conns []net.Conn
	for len(conns) < *n {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		conns = append(conns, c)
	}
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, len(conns))
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			f, err := os.Open(fs.Arg(0))
			if err != nil {
				errs <- err
				return
			}
			defer f.Close()
			if _, err := io.Copy(c, f); err != nil {
				errs <- err
				return
			}
			c.(*net.TCPConn).CloseWrite()
			io.Copy(io.Discard, c) // the receiver closes once it has it all
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		return err
	}
	fmt.Printf("seconds=%.3f\n", time.Since(start).Seconds())
	return nil
}

func recv(args []string) error {
	fs := flag.NewFlagSet("recv", flag.ExitOnError)
	addr := fs.String("addr", "", "the sender's HOST:PORT")
	out := fs.String("o", "", "output file")
	fs.Parse(args)
	if *addr == "" || *out == "" {
		return errors.New("recv: want -addr HOST:PORT and -o OUT")
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("recv: unexpected argument %q", fs.Arg(0))
	}
	var c net.Conn
	var err error
	for i := 0; i < 100; i++ { // the sender may not listen yet
		if c, err = net.Dial("tcp", *addr); err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		return err
	}
	defer c.Close()
	f, err := os.Create(*out)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, c); err != nil {
		return err
	}
	return f.Close()
}
