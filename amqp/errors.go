package amqp

import (
	"fmt"
	"strconv"
)

// Error is an AMQP exception: a reply code and text, plus the method that
// caused it. It is what connection.close and channel.close carry, so a broker
// can send it as is: Hard tells which of the two.
//
// By convention Text starts with the reply name ("NOT_FOUND - no queue 'q' in
// vhost '/'"), as RabbitMQ's texts do; Errorf builds it that way. Every
// decoding error in this package is an *Error with Code FrameError, except an
// unknown method, which is CommandInvalid.
type Error struct {
	Code     uint16
	Text     string
	ClassID  uint16 // class of the method that failed, or 0
	MethodID uint16 // method that failed, or 0
}

// Error returns "amqp: <code> <text>", e.g.
// "amqp: 404 NOT_FOUND - no queue 'q' in vhost '/'".
func (e *Error) Error() string {
	text := e.Text
	if text == "" {
		text = ReplyName(e.Code)
	}
	return "amqp: " + strconv.Itoa(int(e.Code)) + " " + text
}

// Hard reports whether the error closes the connection (a connection
// exception) rather than only the channel.
func (e *Error) Hard() bool { return IsHardError(e.Code) }

// Errorf returns an *Error whose Text is the reply name, " - ", and the
// formatted message: Errorf(NotFound, "no queue '%s' in vhost '%s'", q, v).
// A code without a name is written as its number.
func Errorf(code uint16, format string, args ...any) *Error {
	name := ReplyName(code)
	if name == "" {
		name = strconv.Itoa(int(code))
	}
	return &Error{Code: code, Text: name + " - " + fmt.Sprintf(format, args...)}
}
