//go:build !race

package alarm

const raceEnabled = false
