package auth_test

import (
	"crypto/md5"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"errors"
	"slices"
	"testing"

	"github.com/brokerd/brokerd/broker/auth"
	"github.com/brokerd/brokerd/broker/base"
)

// Tests of the pure user functions. Logins, loopback users and deletion
// are tested through AMQP and the Broker in package broker (users_test.go).

// RabbitMQ's hash format, base64(salt ++ H(salt ++ password)), for each
// algorithm: hashes RabbitMQ 3.10.8 made (salt 01020304) and the example
// of RabbitMQ's password documentation (salt 908DC60A, "test12"), checked
// against the password and against a wrong one, and shown as they came.
func TestRabbitMQHashes(t *testing.T) {
	for _, tc := range []struct {
		alg, hash, password string
	}{
		{auth.HashMD5, "AQIDBJR91gt1SAWTmvD+VzA7MFU=", "pw"},
		{auth.HashSHA256, "AQIDBJsPGQAmNOBwcEzrqoDBa4HefPXET3JTmdZKm3Tj4CzZ", "pw"},
		{"", "AQIDBJsPGQAmNOBwcEzrqoDBa4HefPXET3JTmdZKm3Tj4CzZ", "pw"},
		{auth.HashSHA512, "AQIDBFEKgg91QUjXOoEuIijrYjDJqmh1G3gQJEpEZS2FiDEOS23JGoN2eht5cR6qAC4KAE7kqph8wGA/9reOn6y+bcw=", "pw"},
		{auth.HashSHA256, "GP2IDdextvwuCU4roI2DO3sUgFtvUjCEbFTM46Joz8LK5meC", "s3cret"},
		{auth.HashSHA256, "kI3GCqW5JLMJa4iX1lo7X4D6XbYqlLgxIs30+P6tENUV2POR", "test12"},
	} {
		u, err := auth.NewUser(auth.UserSpec{Name: "u", PasswordHash: tc.hash, HashingAlgorithm: tc.alg})
		if err != nil {
			t.Fatalf("%s %s: %v", tc.alg, tc.hash, err)
		}
		if !u.CheckPassword(tc.password) {
			t.Errorf("%s %s: %q does not match", tc.alg, tc.hash, tc.password)
		}
		for _, wrong := range []string{"", tc.password + "x", tc.password[1:]} {
			if u.CheckPassword(wrong) {
				t.Errorf("%s %s: %q matches", tc.alg, tc.hash, wrong)
			}
		}
		wantAlg := tc.alg
		if wantAlg == "" {
			wantAlg = auth.HashSHA256
		}
		if i := u.Info(); i.PasswordHash != tc.hash || i.HashingAlgorithm != wantAlg || i.Name != "u" {
			t.Errorf("%s %s: shown as %+v", tc.alg, tc.hash, i)
		}
	}
}

// A password given in clear is hashed with a fresh salt in the named
// algorithm's format: a hash made here by hand from that salt matches.
func TestPasswordHashed(t *testing.T) {
	sums := map[string]func([]byte) []byte{
		auth.HashSHA256: func(b []byte) []byte { h := sha256.Sum256(b); return h[:] },
		auth.HashSHA512: func(b []byte) []byte { h := sha512.Sum512(b); return h[:] },
		auth.HashMD5:    func(b []byte) []byte { h := md5.Sum(b); return h[:] },
	}
	for _, alg := range []string{"", auth.HashSHA256, auth.HashSHA512, auth.HashMD5} {
		u, err := auth.NewUser(auth.UserSpec{Name: "u", Password: "pa ss", HashingAlgorithm: alg})
		if err != nil {
			t.Fatal(err)
		}
		name := alg
		if name == "" {
			name = auth.HashSHA256
		}
		raw := u.Hash()
		salt := raw[:4]
		want := append(slices.Clone(salt), sums[name](append(slices.Clone(salt), "pa ss"...))...)
		if !slices.Equal(raw, want) || u.Algorithm() != name {
			t.Errorf("%q: hash %x (%s), want %x (%s)", alg, raw, u.Algorithm(), want, name)
		}
		if got := u.Info().PasswordHash; got != base64.StdEncoding.EncodeToString(want) {
			t.Errorf("%q: shown as %q", alg, got)
		}
	}
	// HashPassword: SHA-256, base64, a new salt each time.
	h1, h2 := auth.HashPassword("pw"), auth.HashPassword("pw")
	if h1 == h2 {
		t.Errorf("two hashes of one password are equal: %q", h1)
	}
	raw, err := base64.StdEncoding.DecodeString(h1)
	if err != nil || len(raw) != 4+sha256.Size {
		t.Fatalf("HashPassword: %q decodes to %d bytes (%v)", h1, len(raw), err)
	}
	if u, err := auth.NewUser(auth.UserSpec{Name: "u", PasswordHash: h2}); err != nil || !u.CheckPassword("pw") {
		t.Errorf("HashPassword's hash %q: user %v, error %v", h2, u, err)
	}
}

// NewUser refuses what RabbitMQ refuses, with *base.InvalidError and its
// texts; tags lose duplicates and empty ones.
func TestNewUser(t *testing.T) {
	for _, tc := range []struct {
		spec auth.UserSpec
		err  string
	}{
		{auth.UserSpec{Password: "pw"}, "user name must not be empty"},
		{auth.UserSpec{Name: "u", Password: "pw", PasswordHash: "AQIDBJR91gt1SAWTmvD+VzA7MFU="}, "both_password_and_password_hash_are_provided"},
		{auth.UserSpec{Name: "u", PasswordHash: "!!notbase64"}, "not_base64: password_hash '!!notbase64' of user 'u' is not base64"},
		{auth.UserSpec{Name: "u", Password: "pw", HashingAlgorithm: "rabbit_password_hashing_foo"},
			"unknown password hashing algorithm 'rabbit_password_hashing_foo': want one of rabbit_password_hashing_sha256, rabbit_password_hashing_sha512, rabbit_password_hashing_md5"},
		{auth.UserSpec{Name: "u", HashingAlgorithm: "sha256"},
			"unknown password hashing algorithm 'sha256': want one of rabbit_password_hashing_sha256, rabbit_password_hashing_sha512, rabbit_password_hashing_md5"},
	} {
		_, err := auth.NewUser(tc.spec)
		var ie *base.InvalidError
		if !errors.As(err, &ie) || ie.Msg != tc.err {
			t.Errorf("%+v: error %v (%T), want *base.InvalidError %q", tc.spec, err, err, tc.err)
		}
	}
	u, err := auth.NewUser(auth.UserSpec{Name: "u", Tags: []string{"management", "", "impersonator", "management"}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(u.Tags(), []string{"management", "impersonator"}) || !u.HasTag("impersonator") || u.HasTag("administrator") || u.HasTag("") {
		t.Errorf("tags %q", u.Tags())
	}
	// Info's tags are a copy.
	i := u.Info()
	i.Tags[0] = "administrator"
	if u.HasTag("administrator") {
		t.Error("a change to Info's tags changed the user")
	}
}

// A user without a password, or with a hash shorter than a salt and a
// digest (RabbitMQ takes any length), matches no password.
func TestNoPasswordMatches(t *testing.T) {
	for _, spec := range []auth.UserSpec{
		{Name: "u"},
		{Name: "u", PasswordHash: "AQID"},     // 3 bytes
		{Name: "u", PasswordHash: "AQIDBA=="}, // a salt alone
		{Name: "u", PasswordHash: "AQIDBJR91g==", HashingAlgorithm: auth.HashMD5}, // a short digest
	} {
		u, err := auth.NewUser(spec)
		if err != nil {
			t.Fatal(err)
		}
		for _, pw := range []string{"", "pw", "\x00"} {
			if u.CheckPassword(pw) {
				t.Errorf("%+v: %q matches", spec, pw)
			}
		}
	}
	u, _ := auth.NewUser(auth.UserSpec{Name: "u"})
	if i := u.Info(); i.PasswordHash != "" || i.HashingAlgorithm != auth.HashSHA256 || len(i.Tags) != 0 {
		t.Errorf("user without a password shown as %+v", i)
	}
	auth.SpendCheck("pw") // matches nothing, panics on nothing
}

// StoredUser rebuilds what Name, Algorithm, Hash and Tags give.
func TestStoredUser(t *testing.T) {
	for _, alg := range []string{auth.HashSHA256, auth.HashSHA512, auth.HashMD5} {
		u, err := auth.NewUser(auth.UserSpec{Name: "u", Password: "pw", HashingAlgorithm: alg, Tags: []string{"a", "b"}})
		if err != nil {
			t.Fatal(err)
		}
		s := auth.StoredUser(u.Name(), u.Algorithm(), u.Hash(), u.Tags())
		if a, b := u.Info(), s.Info(); a.Name != b.Name || a.PasswordHash != b.PasswordHash || a.HashingAlgorithm != b.HashingAlgorithm || !slices.Equal(a.Tags, b.Tags) {
			t.Errorf("%s: stored %+v, was %+v", alg, b, a)
		}
		if !s.CheckPassword("pw") || s.CheckPassword("px") {
			t.Errorf("%s: the stored user's password check differs", alg)
		}
	}
	if s := auth.StoredUser("brokerd", "", nil, nil); s.Algorithm() != auth.HashSHA256 || s.CheckPassword("") || len(s.Tags()) != 0 {
		t.Errorf("user without a record: %+v", s.Info())
	}
}

func TestKnownAlgorithm(t *testing.T) {
	for name, want := range map[string]bool{
		"": true, auth.HashSHA256: true, auth.HashSHA512: true, auth.HashMD5: true,
		"rabbit_password_hashing_sha1": false, "sha256": false, "RABBIT_PASSWORD_HASHING_SHA256": false,
	} {
		if got := auth.KnownAlgorithm(name); got != want {
			t.Errorf("KnownAlgorithm(%q) = %v, want %v", name, got, want)
		}
	}
}
