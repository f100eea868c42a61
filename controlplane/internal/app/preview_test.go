package app

import (
	"context"
	"testing"
	"time"
)

// TestPreviewSlots: previewsPerAgent previews at once on one agent (the
// next waits, another agent's does not), previewsAtOnce in all; a wait
// ends with its context.
func TestPreviewSlots(t *testing.T) {
	p := newPreviewSlots()
	ctx := context.Background()
	var held []func()
	for range previewsPerAgent {
		release, err := p.take(ctx, "a")
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, release)
	}
	// full says whether a take on agent waits past a short while.
	full := func(agent string) bool {
		short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		release, err := p.take(short, agent)
		if err == nil {
			release()
		}
		return err != nil
	}
	if !full("a") {
		t.Fatal("a slot past previewsPerAgent on one agent")
	}
	for i := range previewsAtOnce - previewsPerAgent {
		release, err := p.take(ctx, string(rune('b'+i)))
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, release)
	}
	if !full("z") {
		t.Fatal("a slot past previewsAtOnce")
	}
	held[0]() // one of agent a's
	release, err := p.take(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	release()
	for _, r := range held[1:] {
		r()
	}
	if len(p.all) != 0 {
		t.Fatalf("%d slots still held", len(p.all))
	}
}
