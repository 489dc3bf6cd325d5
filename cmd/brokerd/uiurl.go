package main

import (
	"net"
	"strconv"
)

// uiURL is the web UI's address on the management listener addr, as a
// browser on this machine opens it: a listener on every interface
// (0.0.0.0, ::) is reached as localhost, which the API's Host check
// allows.
func uiURL(addr net.Addr, https bool) string {
	scheme := "http"
	if https {
		scheme = "https"
	}
	host, port := addr.String(), ""
	if ta, ok := addr.(*net.TCPAddr); ok {
		host, port = ta.IP.String(), strconv.Itoa(ta.Port)
		if ta.IP == nil || ta.IP.IsUnspecified() {
			host = "localhost"
		}
		host = net.JoinHostPort(host, port)
	}
	return scheme + "://" + host + "/"
}
