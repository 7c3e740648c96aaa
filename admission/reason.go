package admission

// Reason says why a request or fetch was refused. Its String is the value
// of the metrics label "reason".
type Reason uint8

const (
	// None means admitted: a slot was taken and must be given back.
	None Reason = iota
	// Rate means the token bucket is empty.
	Rate
	// Concurrency means the in-flight limit is reached.
	Concurrency
	// OriginShare means the tenant already holds its share of the origin.
	OriginShare
	// Shed means the origin budget has room only for fetches of a higher
	// priority (see Priority).
	Shed
	// QueueTimeout means no slot came free within the origin's
	// QueueTimeout.
	QueueTimeout

	// NumReasons sizes arrays indexed by Reason.
	NumReasons = int(QueueTimeout) + 1
)

var reasonNames = [NumReasons]string{
	None:         "none",
	Rate:         "rate",
	Concurrency:  "concurrency",
	OriginShare:  "origin_share",
	Shed:         "shed",
	QueueTimeout: "queue_timeout",
}

// String returns the metric label value: none, rate, concurrency,
// origin_share, shed or queue_timeout.
func (r Reason) String() string {
	if int(r) < NumReasons {
		return reasonNames[r]
	}
	return "unknown"
}

// ReasonCounts counts refusals, indexed by Reason (index None is unused).
type ReasonCounts [NumReasons]uint64
