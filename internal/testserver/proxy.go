package testserver

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Proxy forwards TCP connections from Addr to a target and injects faults:
// cut connections, a silent partition, and latency.
type Proxy struct {
	Addr   string // "127.0.0.1:port" to point clients at
	Target string

	ln    net.Listener
	delay atomic.Int64 // time.Duration added to every forwarded chunk

	mu    sync.Mutex
	cut   bool
	open  chan struct{} // closed while forwarding is allowed; blocks writers during Blackhole
	links map[*link]struct{}
	done  bool

	wg sync.WaitGroup
}

// StartProxy starts a proxy to target and closes it when the test ends.
func StartProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	p, err := NewProxy(target)
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// NewProxy is StartProxy without a testing.TB; the caller must Close it.
func NewProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("testserver: proxy listen: %w", err)
	}
	open := make(chan struct{})
	close(open)
	p := &Proxy{
		Addr:   ln.Addr().String(),
		Target: target,
		ln:     ln,
		open:   open,
		links:  make(map[*link]struct{}),
	}
	p.wg.Add(1)
	go p.acceptLoop()
	return p, nil
}

func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Transient errors (e.g. EMFILE) must not end the proxy.
			time.Sleep(10 * time.Millisecond)
			continue
		}
		p.mu.Lock()
		refuse := p.cut || p.done
		p.mu.Unlock()
		if refuse {
			// Accept-then-close looks like a server that drops connections,
			// which is what a client sees when a node goes away.
			c.Close()
			continue
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	server, err := net.DialTimeout("tcp", p.Target, 5*time.Second)
	if err != nil {
		client.Close()
		return
	}
	l := &link{client: client, server: server, closed: make(chan struct{})}
	p.mu.Lock()
	if p.cut || p.done {
		p.mu.Unlock()
		l.close()
		return
	}
	p.links[l] = struct{}{}
	p.mu.Unlock()

	var pipes sync.WaitGroup
	pipes.Add(2)
	go func() { defer pipes.Done(); p.pipe(l, client, server) }()
	go func() { defer pipes.Done(); p.pipe(l, server, client) }()
	pipes.Wait()
	l.close()
	p.mu.Lock()
	delete(p.links, l)
	p.mu.Unlock()
}

// link is one proxied connection pair.
type link struct {
	client, server net.Conn
	once           sync.Once
	closed         chan struct{}
}

func (l *link) close() {
	l.once.Do(func() {
		close(l.closed)
		l.client.Close()
		l.server.Close()
	})
}

type chunk struct {
	data []byte
	read time.Time
}

// pipe copies src to dst. Reading and writing run separately so a delay is
// added latency (each chunk leaves delay after it arrived) rather than a
// throughput limit, and a blackholed direction keeps the reader parked instead
// of losing data: after Restore the bytes flow again, as TCP retransmission
// would deliver them once a real partition heals.
func (p *Proxy) pipe(l *link, src, dst net.Conn) {
	chunks := make(chan chunk, 64)
	readerDone := make(chan struct{})
	// Returning only after the reader has, so Close leaves no goroutines
	// behind (leak checkers in other packages' tests would flag them). The
	// reader ends promptly: src hits EOF or is closed by l.close.
	defer func() { <-readerDone }()
	go func() {
		defer close(readerDone)
		defer close(chunks)
		// One read buffer, and each chunk copied at its own size: a fresh 32 KiB buffer for
		// every few-byte Redis reply cost the race-instrumented tests most of the proxy's
		// CPU, and on a 2-core machine that starved the clients behind it.
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				select {
				case chunks <- chunk{data: append([]byte(nil), buf[:n]...), read: time.Now()}:
				case <-l.closed:
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	for {
		var c chunk
		var ok bool
		select {
		case c, ok = <-chunks:
		case <-l.closed:
			return
		}
		if !ok {
			// Source finished sending: pass the half-close on so the peer
			// sees EOF but can still answer.
			if tc, isTCP := dst.(*net.TCPConn); isTCP {
				_ = tc.CloseWrite()
			}
			return
		}
		if !p.waitForward(l, c.read) {
			return
		}
		if _, err := dst.Write(c.data); err != nil {
			l.close()
			return
		}
	}
}

// waitForward blocks while the proxy is blackholed and until the chunk's
// delay has elapsed; it reports false when the link closed meanwhile.
func (p *Proxy) waitForward(l *link, read time.Time) bool {
	for {
		p.mu.Lock()
		open := p.open
		p.mu.Unlock()
		select {
		case <-open:
		case <-l.closed:
			return false
		}
		wait := time.Until(read.Add(time.Duration(p.delay.Load())))
		if wait <= 0 {
			return true
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-l.closed:
			t.Stop()
			return false
		}
		// A Blackhole may have started while sleeping; check again.
	}
}

// Cut closes every open connection and refuses new ones (accepting and
// closing them at once) until Restore.
func (p *Proxy) Cut() {
	p.mu.Lock()
	p.cut = true
	links := make([]*link, 0, len(p.links))
	for l := range p.links {
		links = append(links, l)
	}
	p.mu.Unlock()
	for _, l := range links {
		l.close()
	}
}

// Blackhole keeps connections open but stops forwarding in both directions
// until Restore: like a network partition, peers see silence, not a reset.
// New connections are accepted but get no data through either.
func (p *Proxy) Blackhole() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if isClosed(p.open) {
		p.open = make(chan struct{})
	}
}

// Restore ends Cut and Blackhole; data held during a blackhole is delivered.
func (p *Proxy) Restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
	if !isClosed(p.open) {
		close(p.open)
	}
}

// SetDelay adds d of latency to each chunk forwarded, in each direction (a
// request-response round trip gets at least 2*d). Zero removes it.
func (p *Proxy) SetDelay(d time.Duration) {
	p.delay.Store(int64(d))
}

// Close stops accepting, closes every connection and waits for the
// forwarding goroutines. It is idempotent.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.done {
		p.mu.Unlock()
		return nil
	}
	p.done = true
	links := make([]*link, 0, len(p.links))
	for l := range p.links {
		links = append(links, l)
	}
	p.mu.Unlock()
	err := p.ln.Close()
	for _, l := range links {
		l.close()
	}
	p.wg.Wait()
	return err
}
