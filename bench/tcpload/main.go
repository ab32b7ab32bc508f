// Command tcpload is the load generator and the backend of
// bench/run-tcp.sh.
//
//	tcpload serve -listen 127.0.0.1:19101,127.0.0.1:19102
//	tcpload bulk -addr 127.0.0.1:18180 -bytes 1073741824
//	tcpload connrate -addr 127.0.0.1:18180 -c 64 -d 10s
//
// The backend speaks a one-byte protocol: a connection that starts with 'E'
// is echoed (the 'E' included); one that starts with 'S' is a sink, which
// answers, after the client's EOF, with the 8-byte big-endian count of the
// bytes that followed the 'S'. bulk sends -bytes through a sink and prints
// the throughput; connrate opens, echoes 8 bytes and closes connections
// from -c workers for -d and prints the rate. Results are one line of
// key=value pairs on stdout.
package main

import (
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "serve":
		err = serve(os.Args[2:])
	case "bulk":
		err = bulk(os.Args[2:])
	case "connrate":
		err = connrate(os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "tcpload:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: tcpload serve|bulk|connrate [flags] (-h for flags)")
	os.Exit(2)
}

func serve(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	listen := fs.String("listen", "127.0.0.1:19101", "comma-separated addresses")
	fs.Parse(args)
	var lns []net.Listener
	for _, a := range strings.Split(*listen, ",") {
		ln, err := net.Listen("tcp", a)
		if err != nil {
			return err
		}
		lns = append(lns, ln)
		go accept(ln.(*net.TCPListener))
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
	for _, ln := range lns {
		ln.Close()
	}
	return nil
}

func accept(ln *net.TCPListener) {
	for {
		c, err := ln.AcceptTCP()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		go handle(c)
	}
}

func handle(c *net.TCPConn) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Minute))
	var mode [1]byte
	if _, err := io.ReadFull(c, mode[:]); err != nil {
		return
	}
	switch mode[0] {
	case 'E':
		if _, err := c.Write(mode[:]); err != nil {
			return
		}
		io.Copy(c, c)
		c.CloseWrite()
	case 'S':
		buf := make([]byte, 1<<20)
		var n uint64
		for {
			k, err := c.Read(buf)
			n += uint64(k)
			if err == io.EOF {
				break
			}
			if err != nil {
				return
			}
		}
		c.Write(binary.BigEndian.AppendUint64(nil, n))
	}
}

func bulk(args []string) error {
	fs := flag.NewFlagSet("bulk", flag.ExitOnError)
	addr := fs.String("addr", "", "address to send to")
	total := fs.Int64("bytes", 1<<30, "bytes to send")
	timeout := fs.Duration("timeout", 2*time.Minute, "give up after")
	fs.Parse(args)
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	start := time.Now()
	c, err := net.DialTimeout("tcp", *addr, 5*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(start.Add(*timeout))
	if _, err := c.Write([]byte{'S'}); err != nil {
		return err
	}
	for left := *total; left > 0; {
		n := min(left, int64(len(buf)))
		if _, err := c.Write(buf[:n]); err != nil {
			return fmt.Errorf("after %d bytes: %w", *total-left, err)
		}
		left -= n
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		return err
	}
	var cnt [8]byte
	if _, err := io.ReadFull(c, cnt[:]); err != nil {
		return fmt.Errorf("reading the sink's count: %w", err)
	}
	secs := time.Since(start).Seconds()
	if got := binary.BigEndian.Uint64(cnt[:]); got != uint64(*total) {
		return fmt.Errorf("the sink counted %d bytes, sent %d", got, *total)
	}
	fmt.Printf("bytes=%d seconds=%.4f mib_per_s=%.1f\n", *total, secs, float64(*total)/(1<<20)/secs)
	return nil
}

func connrate(args []string) error {
	fs := flag.NewFlagSet("connrate", flag.ExitOnError)
	addr := fs.String("addr", "", "address to connect to")
	workers := fs.Int("c", 64, "concurrent clients")
	dur := fs.Duration("d", 10*time.Second, "duration")
	sources := fs.Int("sources", 1, "source addresses the clients connect from, 127.0.0.2 and on (1: the kernel's choice); more spread the clients' ports, so that connect() does not search one address's ports crowded with TIME_WAIT")
	fs.Parse(args)
	dialer := func(w int) *net.Dialer {
		d := &net.Dialer{Timeout: 5 * time.Second}
		if *sources > 1 {
			d.LocalAddr = &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(2+w%*sources))}
			d.Control = bindAddressNoPort
		}
		return d
	}
	type result struct {
		lat       []time.Duration
		errs      int
		firstErrs []string
	}
	results := make([]result, *workers)
	deadline := time.Now().Add(*dur)
	start := time.Now()
	var wg sync.WaitGroup
	for w := range *workers {
		wg.Go(func() {
			r := &results[w]
			d := dialer(w)
			msg := []byte("E1234567")
			got := make([]byte, len(msg))
			for time.Now().Before(deadline) {
				t0 := time.Now()
				err := func() error {
					c, err := d.Dial("tcp", *addr)
					if err != nil {
						return err
					}
					defer c.Close()
					c.SetDeadline(t0.Add(5 * time.Second))
					if _, err := c.Write(msg); err != nil {
						return err
					}
					if _, err := io.ReadFull(c, got); err != nil {
						return err
					}
					if string(got) != string(msg) {
						return fmt.Errorf("echo %q", got)
					}
					return nil
				}()
				if err != nil {
					r.errs++
					if len(r.firstErrs) < 3 {
						r.firstErrs = append(r.firstErrs, err.Error())
					}
					continue
				}
				r.lat = append(r.lat, time.Since(t0))
			}
		})
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	var all []time.Duration
	errs := 0
	var samples []string
	for _, r := range results {
		all = append(all, r.lat...)
		errs += r.errs
		samples = append(samples, r.firstErrs...)
	}
	slices.Sort(all)
	pct := func(p float64) float64 {
		if len(all) == 0 {
			return 0
		}
		return all[min(len(all)-1, int(p*float64(len(all))))].Seconds() * 1000
	}
	for i, s := range samples {
		if i == 5 {
			break
		}
		fmt.Fprintln(os.Stderr, "tcpload: error:", s)
	}
	fmt.Printf("conns=%d errors=%d seconds=%.3f rate=%.1f p50_ms=%.3f p99_ms=%.3f\n",
		len(all), errs, secs, float64(len(all))/secs, pct(0.50), pct(0.99))
	return nil
}
