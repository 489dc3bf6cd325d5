//go:build race

package mgmt_test

// raceEnabled: the race detector's shadow memory is resident and never
// freed with the heap, so tests of resident memory do not hold under it.
const raceEnabled = true
