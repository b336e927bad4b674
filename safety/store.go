package safety

import (
	"encoding/json"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"
)

// Store is the protected resource of the lock-set workload: a set of integers, written whole.
// Every write is logged. It is safe for concurrent use.
type Store struct {
	fenced bool

	mu        sync.Mutex // guards everything below
	set       []int
	lastToken int64
	log       []Write
}

// Write is one write the store received.
type Write struct {
	Worker   int
	Token    int64
	Added    int // the element the write added
	Accepted bool
	At       time.Time
}

// NewStore returns an empty store; fenced says whether it checks fencing tokens.
func NewStore(fenced bool) *Store { return &Store{fenced: fenced} }

type readReply struct {
	Set []int `json:"set"`
}

type writeRequest struct {
	Worker int   `json:"worker"`
	Token  int64 `json:"token"`
	Set    []int `json:"set"`
	Added  int   `json:"added"`
}

type writeReply struct {
	Accepted bool `json:"accepted"`
}

func (s *Store) read() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.set)
}

func (s *Store) write(r writeRequest) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	ok := !s.fenced || r.Token >= s.lastToken
	if ok {
		s.set = slices.Clone(r.Set)
		s.lastToken = max(s.lastToken, r.Token)
	}
	s.log = append(s.log, Write{Worker: r.Worker, Token: r.Token, Added: r.Added, Accepted: ok, At: time.Now()})
	return ok
}

// Final returns the set as it ended, and the log of writes.
func (s *Store) Final() ([]int, []Write) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.set), slices.Clone(s.log)
}

// Serve serves the store over HTTP on a loopback port until stop is called.
func (s *Store) Serve() (url string, stop func(), err error) {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /read", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(readReply{Set: s.read()})
	})
	mux.HandleFunc("POST /write", func(w http.ResponseWriter, r *http.Request) {
		var req writeRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		_ = json.NewEncoder(w).Encode(writeReply{Accepted: s.write(req)})
	})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	return "http://" + l.Addr().String(), func() { _ = srv.Close() }, nil
}
