//go:build race

package broker

// raceEnabled: under the race detector sync.Pool drops a share of what is
// put back at random, so allocation counts do not hold.
const raceEnabled = true
