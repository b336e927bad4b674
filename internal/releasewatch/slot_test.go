package releasewatch

import "testing"

// Slots as CLUSTER KEYSLOT reports them.
func TestSlot(t *testing.T) {
	for key, want := range map[string]int{
		"foo":                  12182,
		"somekey":              11058,
		"{user1000}.following": 3443,
		"user1000":             3443,
		"foo{}bar":             Slot("foo{}bar"), // empty tag: the whole key
		"x{abc}y":              Slot("abc"),
	} {
		if got := Slot(key); got != want {
			t.Errorf("Slot(%q) = %d, want %d", key, got, want)
		}
	}
	if Slot("foo{}bar") == Slot("") {
		t.Error("an empty hash tag must hash the whole key")
	}
}
