// TestMain: the package fails if a goroutine outlives the tests.

package broker_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if any goroutine outlives the tests: every
// broker, server, connection and scheduler started by a test must be shut
// down by it.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
