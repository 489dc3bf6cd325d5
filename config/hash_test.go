package config

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
)

// checkRabbitHash reports whether hash is RabbitMQ's SHA-256 hash of password.
func checkRabbitHash(hash, password string) bool {
	b, err := base64.StdEncoding.DecodeString(hash)
	if err != nil || len(b) != passwordHashLen {
		return false
	}
	sum := sha256.Sum256(append(append([]byte{}, b[:4]...), password...))
	return bytes.Equal(b[4:], sum[:])
}
