package auth

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"slices"
)

// User is an account. A User is never changed once made: broker replaces
// a user's record (PutUser), so a *User may be read from any goroutine
// without a lock.
type User struct {
	name string
	alg  *hashAlg
	hash []byte // salt ++ digest; empty: no password, no password login
	tags []string
}

// UserInfo describes a user as RabbitMQ's HTTP API and definitions show
// it: the password only as its hash (base64, "" when the user has none)
// and the algorithm that made it.
type UserInfo struct {
	Name, PasswordHash, HashingAlgorithm string
	Tags                                 []string
}

// UserSpec creates or replaces a user. At most one of Password (hashed
// here with HashingAlgorithm) and PasswordHash (base64 of salt ++ digest,
// as RabbitMQ exports it, made with HashingAlgorithm) is set; "" is
// SHA-256 (HashSHA256);
// with neither the user has no password and cannot log in with one, as
// RabbitMQ allows. Tags are free-form, as in RabbitMQ (administrator,
// monitoring, policymaker, management, impersonator mean something).
type UserSpec struct {
	Name, Password, PasswordHash, HashingAlgorithm string
	Tags                                           []string
}

// NewUser validates spec and makes its record. An invalid spec (no name,
// both a password and a hash, an unknown algorithm, a hash that is not
// base64) is a *base.InvalidError with RabbitMQ's text where it has one.
func NewUser(spec UserSpec) (*User, error) {
	if spec.Name == "" {
		return nil, invalidf("user name must not be empty")
	}
	if spec.Password != "" && spec.PasswordHash != "" {
		return nil, invalidf("both_password_and_password_hash_are_provided")
	}
	alg := hashAlgorithm(spec.HashingAlgorithm)
	if alg == nil {
		return nil, invalidf("unknown password hashing algorithm '%s': want one of %s, %s, %s",
			spec.HashingAlgorithm, HashSHA256, HashSHA512, HashMD5)
	}
	u := &User{name: spec.Name, alg: alg}
	switch {
	case spec.Password != "":
		u.hash = alg.salted(newSalt(), spec.Password)
	case spec.PasswordHash != "":
		h, err := base64.StdEncoding.DecodeString(spec.PasswordHash)
		if err != nil {
			return nil, invalidf("not_base64: password_hash '%s' of user '%s' is not base64", spec.PasswordHash, spec.Name)
		}
		// RabbitMQ takes a hash of any length; one shorter than a salt
		// and digest just never matches a password.
		u.hash = h
	}
	for _, t := range spec.Tags {
		if t != "" && !slices.Contains(u.tags, t) {
			u.tags = append(u.tags, t)
		}
	}
	return u, nil
}

// StoredUser rebuilds a user from its stored record: the algorithm's name
// (one KnownAlgorithm accepts; the stored record's decoder checks it), the
// raw salt ++ digest and the tags. The User keeps hash and tags: the
// caller must not change them after.
func StoredUser(name, algorithm string, hash []byte, tags []string) *User {
	return &User{name: name, alg: hashAlgorithm(algorithm), hash: hash, tags: tags}
}

// Name is the user's name.
func (u *User) Name() string { return u.name }

// Algorithm is the name of the algorithm that made the user's hash
// (HashSHA256 for a user without a password).
func (u *User) Algorithm() string { return u.alg.name }

// Hash is the user's salt ++ digest, empty for a user without a password.
// It is the User's own: the caller must not change it.
func (u *User) Hash() []byte { return u.hash }

// Tags are the user's tags, without duplicates, in the order given. They
// are the User's own: the caller must not change them.
func (u *User) Tags() []string { return u.tags }

// CheckPassword reports whether password matches the stored hash, in time
// independent of where they differ. A user without a hash matches nothing.
func (u *User) CheckPassword(password string) bool {
	if len(u.hash) < saltLen {
		return false
	}
	want := u.alg.salted(u.hash[:saltLen], password)
	return subtle.ConstantTimeCompare(want, u.hash) == 1
}

// SpendCheck does the work of checking password against a SHA-256 hash
// and matches nothing, so that refusing an unknown user takes as long as
// refusing a wrong password and does not tell whether the user exists.
func SpendCheck(password string) {
	(&User{alg: hashAlgs[0], hash: make([]byte, saltLen+sha256.Size)}).CheckPassword(password)
}

// HasTag reports whether the user has tag.
func (u *User) HasTag(tag string) bool { return slices.Contains(u.tags, tag) }

// Info describes the user; its Tags are a copy.
func (u *User) Info() UserInfo {
	ui := UserInfo{Name: u.name, HashingAlgorithm: u.alg.name, Tags: slices.Clone(u.tags)}
	if len(u.hash) > 0 {
		ui.PasswordHash = base64.StdEncoding.EncodeToString(u.hash)
	}
	return ui
}
