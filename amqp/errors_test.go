package amqp

import (
	"errors"
	"fmt"
	"testing"
)

func TestErrorFormat(t *testing.T) {
	e := Errorf(NotFound, "no queue '%s' in vhost '%s'", "q", "/")
	if e.Text != "NOT_FOUND - no queue 'q' in vhost '/'" {
		t.Fatalf("Text %q", e.Text)
	}
	if e.Error() != "amqp: 404 NOT_FOUND - no queue 'q' in vhost '/'" {
		t.Fatalf("Error() %q", e.Error())
	}
	if e.Hard() {
		t.Fatal("404 is a channel error")
	}
	if !Errorf(FrameError, "x").Hard() {
		t.Fatal("501 is a connection error")
	}
	if got := (&Error{Code: AccessRefused}).Error(); got != "amqp: 403 ACCESS_REFUSED" {
		t.Fatalf("empty text: %q", got)
	}
	if got := Errorf(599, "odd").Text; got != "599 - odd" {
		t.Fatalf("unknown code: %q", got)
	}
	var target *Error
	if !errors.As(fmt.Errorf("handle queue.declare: %w", e), &target) || target.Code != NotFound {
		t.Fatal("*Error not found through wrapping")
	}
}

func TestReplyCodes(t *testing.T) {
	cases := []struct {
		code uint16
		name string
		hard bool
	}{
		{ReplySuccess, "REPLY_SUCCESS", false},
		{ContentTooLarge, "CONTENT_TOO_LARGE", false},
		{NoRoute, "NO_ROUTE", false},
		{NoConsumers, "NO_CONSUMERS", false},
		{ConnectionForced, "CONNECTION_FORCED", true},
		{InvalidPath, "INVALID_PATH", true},
		{AccessRefused, "ACCESS_REFUSED", false},
		{NotFound, "NOT_FOUND", false},
		{ResourceLocked, "RESOURCE_LOCKED", false},
		{PreconditionFailed, "PRECONDITION_FAILED", false},
		{FrameError, "FRAME_ERROR", true},
		{SyntaxError, "SYNTAX_ERROR", true},
		{CommandInvalid, "COMMAND_INVALID", true},
		{ChannelError, "CHANNEL_ERROR", true},
		{UnexpectedFrame, "UNEXPECTED_FRAME", true},
		{ResourceError, "RESOURCE_ERROR", true},
		{NotAllowed, "NOT_ALLOWED", true},
		{NotImplemented, "NOT_IMPLEMENTED", true},
		{InternalError, "INTERNAL_ERROR", true},
	}
	want := map[uint16]int{200: 0, 311: 0, 312: 0, 313: 0, 320: 0, 402: 0, 403: 0, 404: 0, 405: 0, 406: 0,
		501: 0, 502: 0, 503: 0, 504: 0, 505: 0, 506: 0, 530: 0, 540: 0, 541: 0}
	for _, c := range cases {
		if _, ok := want[c.code]; !ok {
			t.Errorf("%s has code %d", c.name, c.code)
		}
		if ReplyName(c.code) != c.name {
			t.Errorf("ReplyName(%d) = %q, want %q", c.code, ReplyName(c.code), c.name)
		}
		if IsHardError(c.code) != c.hard {
			t.Errorf("IsHardError(%d) = %v", c.code, IsHardError(c.code))
		}
	}
	// Frame constants share the numbering space but are not reply codes.
	if ReplyName(FrameEnd) != "" || IsHardError(FrameEnd) {
		t.Error("FrameEnd (206) treated as a reply code")
	}
	if FrameMethod != 1 || FrameHeader != 2 || FrameBody != 3 || FrameHeartbeat != 8 || FrameMinSize != 4096 || FrameEnd != 206 {
		t.Error("frame constants changed")
	}
}
