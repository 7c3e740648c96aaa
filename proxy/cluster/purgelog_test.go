package cluster

import (
	"testing"
	"time"
)

// TestPurgeLogPositions: a peer asking from a position gets what came
// after it, and is told when the ring dropped some of that.
func TestPurgeLogPositions(t *testing.T) {
	l := NewPurgeLog(time.Now())
	for i := range 3 {
		l.Add(PurgeRecord{ID: uint64(i + 1), Args: "url=x"})
	}
	recs, complete, next := l.fromSeq(2)
	if len(recs) != 2 || !complete || next != 4 || recs[0].ID != 2 {
		t.Fatalf("fromSeq(2) = %d records (first %v), complete %v, next %d; want 2 from id 2, complete, next 4", len(recs), recs, complete, next)
	}
	if recs, complete, _ := l.fromSeq(next); len(recs) != 0 || !complete {
		t.Errorf("fromSeq(next) = %d records, complete %v; want none, complete", len(recs), complete)
	}
	if l.Add(PurgeRecord{ID: 2}) {
		t.Error("a record added twice was taken twice")
	}
	mid := time.Now().UnixNano()
	for i := range purgeLogSize + 5 { // the last 5 push out records added after mid
		l.Add(PurgeRecord{ID: uint64(100 + i), Args: "url=y"})
	}
	if _, complete, _ := l.fromSeq(2); complete {
		t.Error("fromSeq from a position the ring dropped says complete")
	}
	if _, complete, _ := l.addedSince(mid); complete {
		t.Error("addedSince an instant after which records were dropped says complete")
	}
	if recs, complete, _ := l.addedSince(time.Now().UnixNano()); len(recs) != 0 || !complete {
		t.Errorf("addedSince(now) = %d records, complete %v; want none, complete", len(recs), complete)
	}
}
