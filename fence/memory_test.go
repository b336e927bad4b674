package fence

import (
	"errors"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestMemoryCheckTable(t *testing.T) {
	type step struct {
		resource string
		token    int64
		wantErr  error // nil, ErrStale or ErrInvalid
		latest   int64 // Latest(resource) after the step
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"first token accepted", []step{{"a", 1, nil, 1}}},
		{"increasing accepted", []step{{"a", 1, nil, 1}, {"a", 2, nil, 2}, {"a", 10, nil, 10}}},
		{"equal token accepted (reentrant holder)", []step{{"a", 5, nil, 5}, {"a", 5, nil, 5}}},
		{"older token refused", []step{{"a", 5, nil, 5}, {"a", 4, ErrStale, 5}, {"a", 1, ErrStale, 5}}},
		{"refusal does not record", []step{{"a", 5, nil, 5}, {"a", 3, ErrStale, 5}, {"a", 5, nil, 5}}},
		{"resources independent", []step{{"a", 9, nil, 9}, {"b", 1, nil, 1}, {"a", 2, ErrStale, 9}}},
		{"gap accepted", []step{{"a", 1, nil, 1}, {"a", math.MaxInt64, nil, math.MaxInt64}, {"a", math.MaxInt64 - 1, ErrStale, math.MaxInt64}}},
		{"empty resource invalid", []step{{"", 1, ErrInvalid, 0}}},
		{"zero token invalid", []step{{"a", 0, ErrInvalid, 0}}},
		{"negative token invalid", []step{{"a", 3, nil, 3}, {"a", -1, ErrInvalid, 3}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var m Memory
			for i, s := range tc.steps {
				err := m.Check(s.resource, s.token)
				if s.wantErr == nil && err != nil {
					t.Fatalf("step %d: Check(%q, %d) = %v, want nil", i, s.resource, s.token, err)
				}
				if s.wantErr != nil && !errors.Is(err, s.wantErr) {
					t.Fatalf("step %d: Check(%q, %d) = %v, want %v", i, s.resource, s.token, err, s.wantErr)
				}
				if s.wantErr == ErrStale {
					var se *StaleError
					if !errors.As(err, &se) {
						t.Fatalf("step %d: %v is not a *StaleError", i, err)
					}
					if se.Resource != s.resource || se.Token != s.token || se.Latest != s.latest {
						t.Fatalf("step %d: StaleError = %+v, want {%q %d %d}", i, *se, s.resource, s.token, s.latest)
					}
				}
				if s.wantErr == ErrInvalid && errors.Is(err, ErrStale) {
					t.Fatalf("step %d: invalid argument also matches ErrStale: %v", i, err)
				}
				if got := m.Latest(s.resource); got != s.latest {
					t.Fatalf("step %d: Latest(%q) = %d, want %d", i, s.resource, got, s.latest)
				}
			}
		})
	}
}

func TestMemoryDo(t *testing.T) {
	var m Memory
	var log []int64
	write := func(tok int64) func() error {
		return func() error { log = append(log, tok); return nil }
	}

	if err := m.Do("r", 3, write(3)); err != nil {
		t.Fatal(err)
	}
	if err := m.Do("r", 3, write(3)); err != nil {
		t.Fatalf("equal token: %v", err)
	}
	err := m.Do("r", 2, write(2))
	if !errors.Is(err, ErrStale) {
		t.Fatalf("stale Do = %v, want ErrStale", err)
	}
	if len(log) != 2 {
		t.Fatalf("write ran for a stale token: log = %v", log)
	}

	// A failing write still records its token.
	boom := errors.New("boom")
	if err := m.Do("r", 7, func() error { return boom }); err != boom {
		t.Fatalf("Do returned %v, want write's error unchanged", err)
	}
	if got := m.Latest("r"); got != 7 {
		t.Fatalf("Latest after failed write = %d, want 7", got)
	}
	if err := m.Do("r", 5, write(5)); !errors.Is(err, ErrStale) {
		t.Fatalf("token older than a failed write's token: %v, want ErrStale", err)
	}

	// A panicking write releases the guard and keeps its token recorded.
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("panic not propagated")
			}
		}()
		_ = m.Do("r", 8, func() error { panic("write panicked") })
	}()
	if err := m.Check("r", 8); err != nil {
		t.Fatalf("guard not released after panic: %v", err)
	}

	if err := m.Do("r", 9, nil); !errors.Is(err, ErrInvalid) {
		t.Fatalf("nil write: %v, want ErrInvalid", err)
	}
	if err := m.Do("", 9, write(9)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("empty resource: %v, want ErrInvalid", err)
	}
	if err := m.Do("r", 0, write(0)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("zero token: %v, want ErrInvalid", err)
	}
}

// TestMemoryDoBlocksSameResourceOnly shows that while Do runs a write, Check
// for the same resource waits, Check for another resource does not, and
// Latest does not wait.
func TestMemoryDoBlocksSameResourceOnly(t *testing.T) {
	var m Memory
	inWrite := make(chan struct{})
	release := make(chan struct{})
	doDone := make(chan error, 1)
	go func() {
		doDone <- m.Do("r", 5, func() error {
			close(inWrite)
			<-release
			return nil
		})
	}()
	<-inWrite

	if err := m.Check("other", 1); err != nil {
		t.Fatalf("other resource: %v", err)
	}
	if got := m.Latest("r"); got != 5 {
		t.Fatalf("Latest during write = %d, want 5", got)
	}

	checkDone := make(chan error, 1)
	go func() { checkDone <- m.Check("r", 6) }()
	select {
	case err := <-checkDone:
		t.Fatalf("Check on the same resource did not wait for the write (err %v)", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	if err := <-doDone; err != nil {
		t.Fatal(err)
	}
	if err := <-checkDone; err != nil {
		t.Fatal(err)
	}
	if got := m.Latest("r"); got != 6 {
		t.Fatalf("Latest = %d, want 6", got)
	}
}

// TestMemoryConcurrent runs many goroutines writing with random tokens
// (drawn from a rising shared clock minus random jitter, so that holders
// arrive out of order the way paused or slow lock holders do) and checks that the tokens whose writes happened form a non-decreasing
// sequence in write order, that every refusal was right, and that Latest
// ends at the greatest token.
func TestMemoryConcurrent(t *testing.T) {
	const (
		goroutines = 64
		perG       = 200
		resources  = 3
	)
	var m Memory
	names := []string{"r0", "r1", "r2"}
	logs := make([][]int64, resources) // logs[i] is only touched inside Do for names[i]
	maxTok := make([]int64, resources)
	var maxMu sync.Mutex
	var clock atomic.Int64

	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 42))
			for range perG {
				i := rng.IntN(resources)
				tok := max(1, clock.Add(1)-rng.Int64N(64))
				maxMu.Lock()
				maxTok[i] = max(maxTok[i], tok)
				maxMu.Unlock()
				err := m.Do(names[i], tok, func() error {
					logs[i] = append(logs[i], tok)
					return nil
				})
				if err == nil {
					continue
				}
				var se *StaleError
				if !errors.As(err, &se) || !errors.Is(err, ErrStale) {
					t.Errorf("Do(%q, %d) = %v, want nil or *StaleError", names[i], tok, err)
					return
				}
				if se.Latest <= tok || se.Token != tok || se.Resource != names[i] {
					t.Errorf("bad refusal %+v for token %d", *se, tok)
					return
				}
			}
		}()
	}
	wg.Wait()

	total := 0
	for i, log := range logs {
		total += len(log)
		for j := 1; j < len(log); j++ {
			if log[j] < log[j-1] {
				t.Fatalf("%s: token %d written after %d (position %d)", names[i], log[j], log[j-1], j)
			}
		}
		if got := m.Latest(names[i]); got != maxTok[i] {
			t.Fatalf("%s: Latest = %d, want max token %d", names[i], got, maxTok[i])
		}
		if len(log) > 0 && log[len(log)-1] != maxTok[i] {
			t.Fatalf("%s: last write %d, want max token %d", names[i], log[len(log)-1], maxTok[i])
		}
	}
	if total == 0 || total == goroutines*perG {
		t.Fatalf("%d of %d writes accepted: the test exercised no refusal or no write", total, goroutines*perG)
	}
	t.Logf("%d of %d writes accepted", total, goroutines*perG)
}

func TestStaleErrorMessage(t *testing.T) {
	err := error(&StaleError{Resource: "orders", Token: 4, Latest: 9})
	want := `fence: stale token 4 for resource "orders" (latest accepted token: 9)`
	if err.Error() != want {
		t.Fatalf("Error() = %q, want %q", err.Error(), want)
	}
	err = &StaleError{Resource: "orders", Token: 4}
	want = `fence: stale token 4 for resource "orders" (latest accepted token: unknown)`
	if err.Error() != want {
		t.Fatalf("Error() = %q, want %q", err.Error(), want)
	}
	wrapped := errors.Join(errors.New("context"), err)
	if !errors.Is(wrapped, ErrStale) {
		t.Fatal("wrapped StaleError does not match ErrStale")
	}
	if errors.Is(err, ErrInvalid) {
		t.Fatal("StaleError matches ErrInvalid")
	}
}
