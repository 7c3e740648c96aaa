package admission

import (
	"sync"
	"testing"
	"time"
)

// TestPrioritySlots pins the documented caps: low 50 %, normal 80 % when
// the origin reserves for high (else 100 %), high 100 %, floored, at
// least 1.
func TestPrioritySlots(t *testing.T) {
	tests := []struct {
		limit            int
		reserve          bool
		low, normal, hig int
	}{
		{4, true, 2, 3, 4},
		{4, false, 2, 4, 4},
		{10, true, 5, 8, 10},
		{256, true, 128, 204, 256},
		{1, true, 1, 1, 1},
		{3, true, 1, 2, 3},
	}
	for _, tt := range tests {
		got := [3]int{prioritySlots(Low, tt.limit, tt.reserve), prioritySlots(Normal, tt.limit, tt.reserve), prioritySlots(High, tt.limit, tt.reserve)}
		if want := [3]int{tt.low, tt.normal, tt.hig}; got != want {
			t.Errorf("limit %d reserve %v: low, normal, high = %v, want %v", tt.limit, tt.reserve, got, want)
		}
	}
	for _, s := range []string{"low", "normal", "high", ""} {
		p, err := ParsePriority(s)
		if err != nil || (s != "" && p.String() != s) || (s == "" && p != Normal) {
			t.Errorf("ParsePriority(%q) = %v, %v", s, p, err)
		}
	}
	if _, err := ParsePriority("urgent"); err == nil {
		t.Error(`ParsePriority("urgent") succeeded`)
	}
}

// TestAcquireWaitPriority: with a budget of 4 reserving for high, low
// gets 2 slots, normal 3, high 4, and a refusal below the full budget is
// Shed (no waiting configured), at the full budget Concurrency.
func TestAcquireWaitPriority(t *testing.T) {
	o := mustOrigin(t, OriginLimits{MaxConcurrency: 4})
	o.SetReserveHigh(true)
	steps := []struct {
		p    Priority
		want Reason
	}{
		{Low, None}, {Low, None}, {Low, Shed},
		{Normal, None}, {Normal, Shed},
		{High, None}, {High, Concurrency}, {Low, Concurrency},
	}
	for i, s := range steps {
		if r, ra := o.AcquireWait(t0, nil, s.p); r != s.want || (r != None && ra != time.Second) {
			t.Fatalf("step %d: AcquireWait(%v) = %v, %v; want %v, 1s", i, s.p, r, ra, s.want)
		}
	}
	if st := o.Stats(t0); st.Rejected[Shed] != 2 || st.Rejected[Concurrency] != 2 || st.InFlight != 4 {
		t.Fatalf("stats %+v: want 2 shed, 2 concurrency, 4 in flight", st)
	}
	// Without the reservation normal takes the whole budget.
	o.SetReserveHigh(false)
	o.Release(nil)
	if r, _ := o.AcquireWait(t0, nil, Normal); r != None {
		t.Fatalf("normal without reservation at 3/4: %v", r)
	}
}

// TestAcquireWaitQueueTimeout: a fetch that finds the budget full waits
// up to QueueTimeout: it gets a slot released within it, and is refused
// for QueueTimeout (after about that long, not longer) when none is; a
// low fetch waiting on its cap is refused as Shed. QueueTimeout 0 is
// refused at once.
func TestAcquireWaitQueueTimeout(t *testing.T) {
	const wait = 100 * time.Millisecond
	o := mustOrigin(t, OriginLimits{MaxConcurrency: 2, QueueTimeout: wait})
	for range 2 {
		if r, _ := o.AcquireWait(time.Now(), nil, High); r != None {
			t.Fatalf("free slot: %v", r)
		}
	}
	start := time.Now()
	r, ra := o.AcquireWait(start, nil, Normal)
	el := time.Since(start)
	if r != QueueTimeout || ra != time.Second {
		t.Fatalf("full budget: %v, %v; want queue_timeout, 1s", r, ra)
	}
	if el < wait || el > wait+400*time.Millisecond {
		t.Fatalf("refused after %v, want about %v", el, wait)
	}

	// A release within the wait hands the slot over.
	var wg sync.WaitGroup
	wg.Go(func() {
		time.Sleep(20 * time.Millisecond)
		o.Release(nil)
	})
	if r, _ := o.AcquireWait(time.Now(), nil, Normal); r != None {
		t.Fatalf("slot released during the wait: %v, want it taken", r)
	}
	wg.Wait()

	// Low's cap is 1 of 2: with one slot free it waits, then is shed.
	o.Release(nil)
	start = time.Now()
	if r, _ := o.AcquireWait(start, nil, Low); r != Shed {
		t.Fatalf("low over its cap: %v, want shed", r)
	}
	if el := time.Since(start); el < wait {
		t.Fatalf("low refused after %v, want the queue timeout %v", el, wait)
	}
	if o.InFlight() != 1 {
		t.Fatalf("in flight %d, want 1", o.InFlight())
	}

	// No waiting: refused at once, as Concurrency.
	z := mustOrigin(t, OriginLimits{MaxConcurrency: 1})
	z.AcquireWait(time.Now(), nil, Normal)
	start = time.Now()
	if r, _ := z.AcquireWait(start, nil, Normal); r != Concurrency {
		t.Fatalf("queue_timeout 0, full: %v, want concurrency", r)
	}
	if el := time.Since(start); el > 50*time.Millisecond {
		t.Fatalf("queue_timeout 0 refused after %v", el)
	}
}

// TestAcquireWaitManyWaiters: 20 waiters on a budget of 2, slots released
// one by one: each release lets exactly one more in, none is lost, and
// the counts end balanced.
func TestAcquireWaitManyWaiters(t *testing.T) {
	o := mustOrigin(t, OriginLimits{MaxConcurrency: 2, QueueTimeout: 5 * time.Second})
	var wg sync.WaitGroup
	var mu sync.Mutex
	got := 0
	for range 20 {
		wg.Go(func() {
			if r, _ := o.AcquireWait(time.Now(), nil, Normal); r != None {
				t.Errorf("waiter refused: %v", r)
				return
			}
			time.Sleep(time.Millisecond)
			mu.Lock()
			got++
			mu.Unlock()
			o.Release(nil)
		})
	}
	wg.Wait()
	if got != 20 || o.InFlight() != 0 {
		t.Fatalf("%d of 20 got a slot, %d in flight at the end", got, o.InFlight())
	}
}
