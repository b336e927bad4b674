package main

import (
	"encoding/json"
	"net"
	"net/http"
	"sync"
	"syscall"
	"time"
)

// demoStore is the shop's database in the demo: one product's stock, and a record of every
// write. Workers reach it over HTTP on loopback, as separate processes reach a real database.
// In fenced mode it refuses a write whose fencing token is older than one it accepted — the
// store side of fencing. In pause mode it stops the writer of chosen writes (SIGSTOP) for
// longer than the lock's TTL before applying them: the holder's lock expires meanwhile, another
// worker takes it, and the paused write arrives late, as after a GC pause or a slow network.
type demoStore struct {
	mu sync.Mutex // guards everything below

	stock, version int64
	orders, taken  int
	fenced         bool
	lastToken      int64
	pauses         map[int]bool // write numbers whose writer is paused
	pause          time.Duration
	writes         int

	sold, lostUpdates, staleRefused, paused int
}

type demoResult struct {
	Mode          string  `json:"mode"`
	Sold          int     `json:"sold"`
	FinalStock    int64   `json:"final_stock"`
	Oversold      int     `json:"oversold"`
	LostUpdates   int     `json:"lost_updates"`
	StaleRefused  int     `json:"stale_writes_refused"`
	PausedWriters int     `json:"paused_writers"`
	Seconds       float64 `json:"seconds"`
}

func (s *demoStore) reset(stock int64, orders int, fenced bool, pauses []int, pause time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stock, s.version, s.orders, s.taken = stock, 0, orders, 0
	s.fenced, s.lastToken, s.pauses, s.pause, s.writes = fenced, 0, map[int]bool{}, pause, 0
	s.sold, s.lostUpdates, s.staleRefused, s.paused = 0, 0, 0, 0
	for _, p := range pauses {
		s.pauses[p] = true
	}
}

func (s *demoStore) progress() (taken, orders int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.taken, s.orders
}

func (s *demoStore) result(mode string, initial int64, took time.Duration) demoResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	return demoResult{
		Mode: mode, Sold: s.sold, FinalStock: s.stock, Oversold: max(0, s.sold-int(initial)),
		LostUpdates: s.lostUpdates, StaleRefused: s.staleRefused, PausedWriters: s.paused, Seconds: took.Seconds(),
	}
}

type (
	orderReply struct {
		Done bool `json:"done"`
	}
	readReply struct {
		Stock   int64 `json:"stock"`
		Version int64 `json:"version"`
	}
	writeRequest struct {
		PID     int   `json:"pid"`
		Token   int64 `json:"token"`
		Stock   int64 `json:"stock"`
		Version int64 `json:"version"` // the version the worker read
	}
	writeReply struct {
		OK    bool `json:"ok"`
		Stale bool `json:"stale"`
	}
)

func (s *demoStore) serve() (string, func(), error) {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /order", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		done := s.taken >= s.orders
		if !done {
			s.taken++
		}
		s.mu.Unlock()
		_ = json.NewEncoder(w).Encode(orderReply{Done: done})
	})
	mux.HandleFunc("POST /read", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		reply := readReply{Stock: s.stock, Version: s.version}
		s.mu.Unlock()
		_ = json.NewEncoder(w).Encode(reply)
	})
	mux.HandleFunc("POST /write", func(w http.ResponseWriter, r *http.Request) {
		var req writeRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		s.writes++
		pause := s.pauses[s.writes]
		d := s.pause
		if pause {
			s.paused++
		}
		s.mu.Unlock()
		if pause {
			// The writer stops dead, as in a long GC pause: no renewals, no keep-alives.
			_ = syscall.Kill(req.PID, syscall.SIGSTOP)
			time.Sleep(d)
			_ = syscall.Kill(req.PID, syscall.SIGCONT)
		}
		_ = json.NewEncoder(w).Encode(s.write(req))
	})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	return "http://" + l.Addr().String(), func() { _ = srv.Close() }, nil
}

func (s *demoStore) write(req writeRequest) writeReply {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fenced {
		// Tokens are unique per holder, so "not older than the newest accepted" is "from the
		// current holder or a newer one".
		if req.Token < s.lastToken {
			s.staleRefused++
			return writeReply{Stale: true}
		}
		s.lastToken = req.Token
	}
	if req.Version != s.version {
		s.lostUpdates++ // it overwrites a write it never saw
	}
	s.stock = req.Stock
	s.version++
	s.sold++
	return writeReply{OK: true}
}
