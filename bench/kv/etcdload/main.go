// Command etcdload is rbcast-kv's load against etcd: N puts of 128-byte
// (-size) values to keys PREFIX-i, from -c clients at once, each one put at
// a time, and the same last line as `rbcast-kv load` ("done N puts in D,
// R puts/s, p50 D p99 D, slowest D"), so bench/kv/run compares like with
// like. It is a module of its own so that rbcast's module does not depend
// on etcd's client.
//
//	etcdload -endpoints 10.77.0.1:2379,... -n N [-c CLIENTS] [-size BYTES] [-prefix P]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

func main() {
	endpoints := flag.String("endpoints", "", "etcd client endpoints, HOST:PORT,... (required)")
	n := flag.Int("n", 1000, "puts to run")
	conc := flag.Int("c", 1, "clients running at once, each with its own connection and one put at a time")
	size := flag.Int("size", 128, "value size in bytes")
	prefix := flag.String("prefix", "k", "key prefix")
	timeout := flag.Duration("timeout", 10*time.Second, "give up on a put after this long")
	flag.Parse()
	if *endpoints == "" || *conc < 1 || *n < 0 || *size < 0 || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: etcdload -endpoints HOST:PORT,... -n N [-c CLIENTS] [-size BYTES] [-prefix P]")
		os.Exit(2)
	}
	eps := strings.Split(*endpoints, ",")
	var clients []*clientv3.Client
	for k := range *conc {
		// Client k starts at endpoint k mod len: the load is spread as
		// clientv3's balancer would spread one client's requests.
		rot := append(slices.Clone(eps[k%len(eps):]), eps[:k%len(eps)]...)
		c, err := clientv3.New(clientv3.Config{Endpoints: rot, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			fmt.Fprintln(os.Stderr, "etcdload:", err)
			os.Exit(2)
		}
		defer c.Close()
		clients = append(clients, c)
	}
	value := strings.Repeat("v", *size)
	var (
		mu   sync.Mutex
		lat  []time.Duration
		fail error
		next int
		wg   sync.WaitGroup
	)
	start := time.Now()
	for _, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				i := next
				next++
				stop := fail != nil
				mu.Unlock()
				if i >= *n || stop {
					return
				}
				ctx, cancel := context.WithTimeout(context.Background(), *timeout)
				t0 := time.Now()
				_, err := c.Put(ctx, fmt.Sprintf("%s-%d", *prefix, i), value)
				d := time.Since(t0)
				cancel()
				mu.Lock()
				if err != nil {
					fail = fmt.Errorf("put %d: %w", i, err)
				} else {
					lat = append(lat, d)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if fail != nil {
		fmt.Fprintln(os.Stderr, "etcdload:", fail)
		os.Exit(2)
	}
	elapsed := time.Since(start)
	slices.Sort(lat)
	pct := func(p float64) time.Duration {
		if len(lat) == 0 {
			return 0
		}
		return lat[min(len(lat)-1, int(p*float64(len(lat))))].Round(time.Microsecond)
	}
	fmt.Printf("done %d puts in %v, %.0f puts/s, p50 %v p99 %v, slowest %v\n", *n, elapsed.Round(time.Millisecond),
		float64(*n)/elapsed.Seconds(), pct(0.5), pct(0.99), pct(1))
}
