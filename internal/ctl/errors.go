package ctl

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// Exit codes, rabbitmqctl's (RabbitMQ.CLI.Core.ExitCodes, from sysexits.h)
// plus EX_NOPERM for refused credentials. See doc.go for which error gets
// which.
const (
	ExitOK          = 0
	ExitUsage       = 64 // EX_USAGE
	ExitDataErr     = 65 // EX_DATAERR
	ExitNoUser      = 67 // EX_NOUSER
	ExitUnavailable = 69 // EX_UNAVAILABLE
	ExitSoftware    = 70 // EX_SOFTWARE
	ExitTempFail    = 75 // EX_TEMPFAIL
	ExitNoPerm      = 77 // EX_NOPERM
)

// cliError is an error that ends the run with code, printing msg after
// "Error:".
type cliError struct {
	code int
	msg  string
}

func (e *cliError) Error() string { return e.msg }

func failf(code int, format string, args ...any) error {
	return &cliError{code: code, msg: fmt.Sprintf(format, args...)}
}

// usageError is a command line brokerctl cannot run: it prints msg, the
// arguments given and the verb's usage, and exits 64.
type usageError struct {
	verb string // "" for the general usage
	msg  string
}

func (e *usageError) Error() string { return e.msg }

func usagef(verb, format string, args ...any) error {
	return &usageError{verb: verb, msg: fmt.Sprintf(format, args...)}
}

// vhostMissing and userMissing are rabbitmqctl's errors (and exit codes)
// for a missing virtual host and user.
func vhostMissing(vhost string) error {
	return failf(ExitDataErr, "Virtual host '%s' does not exist", vhost)
}

func userMissing(user string) error {
	return failf(ExitNoUser, "User \"%s\" does not exist", user)
}

// apiError is an HTTP answer of the management API other than 2xx.
type apiError struct {
	method, path string // the request, path relative to the base URL
	status       int
	reason       string // the body's "reason" field, or its text
	body         []byte // the whole body
}

func (e *apiError) Error() string {
	s := fmt.Sprintf("%s %s: %d %s", e.method, e.path, e.status, http.StatusText(e.status))
	if e.reason != "" {
		s += ": " + e.reason
	}
	return s
}

// isAPIStatus reports whether err is an apiError with one of the statuses.
func isAPIStatus(err error, statuses ...int) bool {
	var ae *apiError
	if !errors.As(err, &ae) {
		return false
	}
	for _, s := range statuses {
		if ae.status == s {
			return true
		}
	}
	return false
}

// genericReasons are the texts of a 404 that say nothing about what is
// missing; RabbitMQ answers every missing object with them.
var genericReasons = []string{"", "Not Found", "not_found", "Object Not Found"}

// specificReason returns the API's reason of err when it says more than
// "not found", else "".
func specificReason(err error) string {
	var ae *apiError
	if !errors.As(err, &ae) {
		return ""
	}
	for _, g := range genericReasons {
		if strings.EqualFold(ae.reason, g) {
			return ""
		}
	}
	return ae.reason
}

// transportError is a request that got no HTTP answer.
type transportError struct {
	url     string // base URL, without credentials
	err     error
	timeout bool
}

func (e *transportError) Error() string {
	if e.timeout {
		return fmt.Sprintf("the management API at %s did not answer in time: %v", e.url, e.err)
	}
	return fmt.Sprintf("unable to reach the management API at %s: %v", e.url, e.err)
}

func (e *transportError) Unwrap() error { return e.err }

// exitCode is the code err ends the run with, and the message to print
// after "Error:".
func exitCode(err error, user string) (int, string) {
	var ce *cliError
	var ae *apiError
	var te *transportError
	switch {
	case errors.As(err, &ce):
		return ce.code, ce.msg
	case errors.As(err, &te):
		if te.timeout {
			return ExitTempFail, te.Error()
		}
		return ExitUnavailable, te.Error()
	case errors.As(err, &ae):
		switch {
		case ae.status == http.StatusUnauthorized || ae.status == http.StatusForbidden:
			return ExitNoPerm, fmt.Sprintf("the management API refused user %q (HTTP %d): %s", user, ae.status, ae.reason)
		case ae.status >= 500:
			return ExitSoftware, fmt.Sprintf("the management API failed: %v", ae)
		case ae.status >= 400:
			if ae.reason != "" && specificReason(ae) != "" {
				return ExitUnavailable, ae.reason
			}
			return ExitUnavailable, ae.Error()
		}
		return ExitSoftware, ae.Error()
	}
	return ExitSoftware, err.Error()
}
