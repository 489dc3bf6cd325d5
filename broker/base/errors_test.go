package base_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/brokerd/brokerd/broker/base"
)

// An *InvalidError is found through wrapping, with its text unchanged;
// ErrNotFound is one value, found with errors.Is.
func TestErrors(t *testing.T) {
	err := fmt.Errorf("set policy: %w", base.Invalidf("%q is not a valid apply-to value", "x"))
	var ie *base.InvalidError
	if !errors.As(err, &ie) || ie.Msg != `"x" is not a valid apply-to value` || ie.Error() != ie.Msg {
		t.Errorf("errors.As(%v) = %v, %+v", err, errors.As(err, &ie), ie)
	}
	nf := fmt.Errorf("no vhost 'v': %w", base.ErrNotFound)
	if !errors.Is(nf, base.ErrNotFound) || errors.As(nf, &ie) {
		t.Errorf("%v: Is ErrNotFound %v, As InvalidError %v", nf, errors.Is(nf, base.ErrNotFound), errors.As(nf, &ie))
	}
	if base.ErrNotFound.Error() != "broker: not found" {
		t.Errorf("ErrNotFound = %q", base.ErrNotFound)
	}
}
