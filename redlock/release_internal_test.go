package redlock

import "testing"

func TestDecidedRelease(t *testing.T) {
	for _, tc := range []struct {
		counts           []int // by node; 0 for those that have not answered
		unknown, notHeld int
		want             bool
	}{
		{[]int{0, 0, 0, 0, 0}, 2, 0, true},    // three agree: released
		{[]int{1, 1, 1, 0, 0}, 2, 0, true},    // three agree: one hold left
		{[]int{1, 0, 0, 0, 0}, 2, 0, false},   // 1, 0, 0: two more 1s would leave a hold
		{[]int{1, 1, 0, 0, 0}, 1, 0, false},   // 1, 1, 0, 0: one more 1 would leave a hold
		{[]int{1, 1, 0, 0, 0}, 0, 0, true},    // all answered
		{[]int{-1, -1, -1, 0, 0}, 2, 3, true}, // a majority says not held
		{[]int{-1, -1, 0, 0, 0}, 2, 2, false}, // two more -1 would make it not held
		{[]int{-1, 0, 0, 0, 0}, 1, 1, true},   // 0, 0, 0 and at most two not held
		{[]int{2, 2, 2, 1, 0}, 1, 0, true},    // the unknown node cannot lift the third 2
		{[]int{2, 2, 1, 0, 0}, 2, 0, false},
	} {
		if got := decidedRelease(tc.counts, tc.unknown, tc.notHeld, 3); got != tc.want {
			t.Errorf("decidedRelease(%v, unknown %d, notHeld %d) = %v, want %v", tc.counts, tc.unknown, tc.notHeld, got, tc.want)
		}
	}
}
