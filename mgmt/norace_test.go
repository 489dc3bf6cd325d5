//go:build !race

package mgmt_test

const raceEnabled = false
