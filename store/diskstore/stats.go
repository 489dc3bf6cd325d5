package diskstore

import (
	"time"

	"github.com/brokerd/brokerd/internal/histogram"
	"github.com/brokerd/brokerd/wal"
)

// CheckpointDurationBounds are the bucket bounds (seconds) of
// Stats.CheckpointDuration.
var CheckpointDurationBounds = []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

// Stats are the store's counters, for export as metrics.
type Stats struct {
	// WAL is the write-ahead log's: files, bytes, fsyncs, fsync latency
	// and group-commit sizes since Open.
	WAL wal.Stats
	// SegmentFiles and SegmentBytes are the segment files on disk and
	// their size.
	SegmentFiles int
	SegmentBytes int64
	// CheckpointDuration is the distribution of checkpoint durations
	// (seconds) since Open, counting checkpoints that moved something.
	CheckpointDuration histogram.Snapshot
	// Recovery is how long Open took: the index, the segments and the WAL
	// replayed.
	Recovery time.Duration
	// CheckpointFailures counts checkpoint attempts that failed and were
	// retried (out of descriptors or space, say) since Open.
	CheckpointFailures uint64
}

// Stats returns the store's counters. Safe for concurrent use; each part
// is read on its own, so the whole is not one instant.
func (s *Store) Stats() Stats {
	st := Stats{WAL: s.wal.Stats(), CheckpointDuration: s.cpDuration.Snapshot(), Recovery: s.recovery,
		CheckpointFailures: s.cpFailures.Load()}
	for _, si := range s.segs.List() {
		st.SegmentFiles++
		st.SegmentBytes += si.Size
	}
	return st
}
