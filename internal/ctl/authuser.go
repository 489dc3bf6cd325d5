package ctl

import (
	"bufio"
	"errors"
	"net/http"
	"strings"
)

// notManagementReasons are the management API's refusals of a user whose
// password it accepted but whose tags do not let it use the API (brokerd's
// and RabbitMQ 3.10's texts): the login itself succeeded.
var notManagementReasons = []string{"Not management user"}

// authenticateUser: authenticate_user USER [PASSWORD] (the password from
// the first line of standard input when not given, as rabbitmqctl reads
// it). It asks GET /api/whoami as USER with PASSWORD, with no other
// credentials: the server checks the password as it checks any login (an
// AMQP login's rules, its failed-login delay and budget). A 200 is a
// success, and so is a refusal for want of a management tag, which the
// API answers only once the password was accepted; a refused login exits
// 65 with rabbitmqctl's text. A user limited to loopback connections is
// refused from elsewhere, as its AMQP login would be (rabbitmqctl checks
// the password alone).
func authenticateUser(r *run, args []string) error {
	user := args[0]
	var pass string
	if len(args) == 2 {
		pass = args[1]
	} else {
		line, err := bufio.NewReader(r.env.Stdin).ReadString('\n')
		if err != nil && line == "" {
			return failf(ExitSoftware, "Password is not provided via argument or stdin")
		}
		pass = strings.TrimRight(line, "\r\n")
	}
	r.out.info("Authenticating user \"%s\" ...", user)
	c := newClient(r.c.base, user, pass)
	_, err := c.do(r.ctx, request{method: http.MethodGet, path: apiPath("whoami")})
	var ae *apiError
	switch {
	case err == nil:
	case errors.As(err, &ae) && ae.status == http.StatusUnauthorized && containsFold(notManagementReasons, ae.reason):
	case errors.As(err, &ae) && ae.status == http.StatusUnauthorized:
		return failf(ExitDataErr, "Error: failed to authenticate user \"%s\"\nuser '%s' - invalid credentials", user, user)
	default:
		return err
	}
	if r.out.json {
		r.out.write(jsonText(map[string]any{"message": "Success"}) + "\n")
		return nil
	}
	r.out.write("Success\n")
	return nil
}

func containsFold(list []string, s string) bool {
	for _, l := range list {
		if strings.EqualFold(l, s) {
			return true
		}
	}
	return false
}
