package testserver

import (
	"bufio"
	"bytes"
	"context"
	"net"
	"strings"
	"testing"
	"time"
)

func TestProxyForwards(t *testing.T) {
	t.Parallel()
	r := StartRedis(t)
	p := StartProxy(t, r.Addr)
	c := directClient(t, p.Addr)
	ctx := context.Background()
	// Larger than one read buffer, so chunking and reassembly are exercised.
	big := strings.Repeat("fencelock", 200_000)
	if err := c.Set(ctx, "big", big, 0).Err(); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Get(ctx, "big").Result(); err != nil || got != big {
		t.Fatalf("GET through the proxy: %d bytes, %v; want %d bytes", len(got), err, len(big))
	}
}

func TestProxyCutRestore(t *testing.T) {
	t.Parallel()
	r := StartRedis(t)
	p := StartProxy(t, r.Addr)
	c := directClient(t, p.Addr)
	ctx := context.Background()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	p.Cut()
	// Both the pooled connection and a fresh one must fail.
	for i := 0; i < 2; i++ {
		if err := c.Ping(ctx).Err(); err == nil {
			t.Fatalf("PING %d succeeded through a cut proxy", i+1)
		}
	}
	conn, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Fatalf("read on a new connection through a cut proxy: got %v, want it closed", err)
	}
	p.Restore()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after Restore: %v", err)
	}
}

func TestProxyBlackhole(t *testing.T) {
	t.Parallel()
	r := StartRedis(t)
	p := StartProxy(t, r.Addr)
	c := directClient(t, p.Addr)
	if err := c.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	// A raw connection shows the partition is silence, not a reset.
	raw, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	br := bufio.NewReader(raw)

	p.Blackhole()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	err = c.Ping(ctx).Err()
	cancel()
	if !isTimeout(err) {
		t.Fatalf("PING through a blackhole: got %v, want a timeout", err)
	}
	if _, err := raw.Write([]byte("PING\r\n")); err != nil {
		t.Fatal(err)
	}
	_ = raw.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := br.ReadByte(); !isTimeout(err) {
		t.Fatalf("raw read through a blackhole: got %v, want a timeout", err)
	}

	p.Restore()
	// Bytes held during the partition arrive afterwards, as with TCP.
	_ = raw.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := br.ReadString('\n')
	if err != nil || line != "+PONG\r\n" {
		t.Fatalf("held PING after Restore: %q, %v", line, err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after Restore: %v", err)
	}
}

func TestProxyDelay(t *testing.T) {
	t.Parallel()
	r := StartRedis(t)
	p := StartProxy(t, r.Addr)
	c := directClient(t, p.Addr)
	ctx := context.Background()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	const delay = 100 * time.Millisecond
	p.SetDelay(delay)
	start := time.Now()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	// Each direction is delayed, so a round trip takes at least 2*delay.
	if rtt := time.Since(start); rtt < 2*delay {
		t.Fatalf("round trip with %v delay took only %v", delay, rtt)
	}
	p.SetDelay(0)
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
}

func TestProxyClose(t *testing.T) {
	t.Parallel()
	r := StartRedis(t)
	p, err := NewProxy(r.Addr)
	if err != nil {
		t.Fatal(err)
	}
	c := directClient(t, p.Addr)
	if err := c.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	p.Blackhole() // Close must not hang on held data
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if conn, err := net.DialTimeout("tcp", p.Addr, time.Second); err == nil {
		conn.Close()
		t.Fatal("proxy still accepts after Close")
	}
}

// TestProxyHalfClose checks a client that shuts down its sending side still
// gets the reply, as with a direct connection.
func TestProxyHalfClose(t *testing.T) {
	t.Parallel()
	r := StartRedis(t)
	p := StartProxy(t, r.Addr)
	conn, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		t.Fatal(err)
	}
	if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(conn); err != nil {
		t.Fatal(err)
	}
	if buf.String() != "+PONG\r\n" {
		t.Fatalf("reply after half-close: %q", buf.String())
	}
}
