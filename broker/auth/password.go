package auth

import (
	"crypto/md5"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"fmt"
)

// Password hashing algorithms, by the names RabbitMQ gives them (its
// definitions files and HTTP API carry them as hashing_algorithm). A hash
// is base64(salt ++ H(salt ++ password)) with a 4-byte random salt, as
// rabbit_password does.
const (
	HashSHA256 = "rabbit_password_hashing_sha256" // the default
	HashSHA512 = "rabbit_password_hashing_sha512"
	HashMD5    = "rabbit_password_hashing_md5"
)

const saltLen = 4

type hashAlg struct {
	name string
	sum  func([]byte) []byte
}

var hashAlgs = []*hashAlg{
	{HashSHA256, func(b []byte) []byte { h := sha256.Sum256(b); return h[:] }},
	{HashSHA512, func(b []byte) []byte { h := sha512.Sum512(b); return h[:] }},
	{HashMD5, func(b []byte) []byte { h := md5.Sum(b); return h[:] }},
}

// hashAlgorithm returns the algorithm named name ("" is the default,
// SHA-256), or nil.
func hashAlgorithm(name string) *hashAlg {
	if name == "" {
		return hashAlgs[0]
	}
	for _, a := range hashAlgs {
		if a.name == name {
			return a
		}
	}
	return nil
}

// KnownAlgorithm reports whether name is one of the hashing algorithms
// (HashSHA256, HashSHA512, HashMD5, or "" for SHA-256).
func KnownAlgorithm(name string) bool { return hashAlgorithm(name) != nil }

func (a *hashAlg) salted(salt []byte, password string) []byte {
	return append(append([]byte(nil), salt...), a.sum(append(append([]byte(nil), salt...), password...))...)
}

// HashPassword returns a RabbitMQ-compatible SHA-256 password hash of
// password with a fresh random salt, in base64 as RabbitMQ's definitions
// files and `rabbitmqctl hash_password` carry it.
func HashPassword(password string) string {
	return base64.StdEncoding.EncodeToString(hashAlgs[0].salted(newSalt(), password))
}

func newSalt() []byte {
	salt := make([]byte, saltLen)
	if _, err := rand.Read(salt); err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err)) // never fails on supported platforms
	}
	return salt
}
