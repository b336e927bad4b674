package fence_test

import (
	"errors"
	"fmt"

	"github.com/fencelock/fencelock/fence"
)

func ExampleMemory() {
	var guard fence.Memory // the zero value is ready

	fmt.Println(guard.Check("invoice-42", 33)) // holder with token 33 writes
	fmt.Println(guard.Check("invoice-42", 34)) // lock moved on: token 34 writes
	fmt.Println(guard.Check("invoice-42", 34)) // same holder again: accepted

	// The holder of token 33 wakes from a long GC pause and tries again.
	err := guard.Check("invoice-42", 33)
	fmt.Println(errors.Is(err, fence.ErrStale))
	fmt.Println(err)
	fmt.Println(guard.Latest("invoice-42"))
	// Output:
	// <nil>
	// <nil>
	// <nil>
	// true
	// fence: stale token 33 for resource "invoice-42" (latest accepted token: 34)
	// 34
}

func ExampleMemory_Do() {
	var guard fence.Memory
	stock := 10

	setStock := func(token int64, n int) error {
		// The write runs while the guard for "stock" is held, so no older
		// holder can slip in between the check and the write.
		return guard.Do("stock", token, func() error {
			stock = n
			return nil
		})
	}

	fmt.Println(setStock(7, 9), stock)
	err := setStock(6, 100) // stale holder: refused, write not run
	var stale *fence.StaleError
	if errors.As(err, &stale) {
		fmt.Println("refused token", stale.Token, "latest", stale.Latest, "stock", stock)
	}
	// Output:
	// <nil> 9
	// refused token 6 latest 7 stock 9
}

func ExampleStaleError() {
	var guard fence.Memory
	_ = guard.Check("doc", 12)
	err := fmt.Errorf("saving doc: %w", guard.Check("doc", 11))

	var stale *fence.StaleError
	fmt.Println(errors.Is(err, fence.ErrStale), errors.As(err, &stale), stale.Latest)
	fmt.Println(errors.Is(guard.Check("doc", 0), fence.ErrInvalid))
	// Output:
	// true true 12
	// true
}
