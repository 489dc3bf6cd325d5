package auth

import "github.com/brokerd/brokerd/broker/base"

// invalidf is the package's only error: see doc.go's Errors.
func invalidf(format string, args ...any) error { return base.Invalidf(format, args...) }
