//go:build race

package alarm

// raceEnabled: the race detector's shadow memory is resident and never
// freed with the heap, so tests of resident memory do not hold under it.
const raceEnabled = true
