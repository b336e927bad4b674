package safety

import (
	"encoding/json"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/fencelock/fencelock/fence"
)

// nemesisStore is the resource the nemesis workers protect: it takes stamped writes, checks
// each one's token with the library's own guard (fence.Memory), one resource per lock name,
// and logs them all in the order it decided them. It is safe for concurrent use.
type nemesisStore struct {
	guard fence.Memory

	mu  sync.Mutex // guards log, and orders the guard's decisions with it
	log []storedWrite
}

// nemWrite is a stamped write: who wrote, with which token, having found its lock valid at T0.
type nemWrite struct {
	Name     string `json:"name"`
	Owner    string `json:"owner"`
	Worker   int    `json:"worker"`
	Token    int64  `json:"token"`
	T0       int64  `json:"t0"`       // Unix ns, just before the writer's Valid() check
	Holder   string `json:"holder"`   // fencelock run: the command's holder ID
	Termed   bool   `json:"termed"`   // fencelock run: the command had been sent SIGTERM
	Unfenced bool   `json:"unfenced"` // a broken writer asks the store to skip the check
}

type nemWriteReply struct {
	Accepted bool `json:"accepted"`
}

// storedWrite is one write as the store decided it.
type storedWrite struct {
	nemWrite
	At       int64 // Unix ns, when the store decided
	Accepted bool
}

func (s *nemesisStore) write(w nemWrite) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	ok := w.Unfenced || s.guard.Check(w.Name, w.Token) == nil
	s.log = append(s.log, storedWrite{nemWrite: w, At: time.Now().UnixNano(), Accepted: ok})
	return ok
}

func (s *nemesisStore) writes() []storedWrite {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.log)
}

// serve serves the store on a loopback port until stop is called.
func (s *nemesisStore) serve() (url string, stop func(), err error) {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /write", func(rw http.ResponseWriter, r *http.Request) {
		var w nemWrite
		if err := json.NewDecoder(r.Body).Decode(&w); err != nil {
			http.Error(rw, err.Error(), http.StatusBadRequest)
			return
		}
		_ = json.NewEncoder(rw).Encode(nemWriteReply{Accepted: s.write(w)})
	})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	return "http://" + l.Addr().String(), func() { _ = srv.Close() }, nil
}
