package auth_test

import (
	"errors"
	"regexp"
	"testing"

	"github.com/brokerd/brokerd/broker/auth"
	"github.com/brokerd/brokerd/broker/base"
)

// FuzzPermission: any three patterns and any name. NewPermission never
// panics and refuses only with a *base.InvalidError, exactly the
// patterns Go's regexp refuses; a permission it makes allows exactly what
// its pattern matches (nothing for "").
func FuzzPermission(f *testing.F) {
	for _, s := range [][4]string{
		{".*", ".*", ".*", "orders"},
		{"", "^amq\\.", "^(a|b)$", "amq.default"},
		{"(", ".*", "", "x"},
		{"^$", "a**", ".*x", ""},
		{"[[:alpha:]]+", "\\p{Greek}", "(?i)ORDERS", "orders"},
	} {
		f.Add(s[0], s[1], s[2], s[3])
	}
	f.Fuzz(func(t *testing.T, configure, write, read, name string) {
		p, err := auth.NewPermission(configure, write, read)
		srcs := []string{configure, write, read}
		var compiles = true
		for _, s := range srcs {
			if s != "" {
				if _, err := regexp.Compile(s); err != nil {
					compiles = false
				}
			}
		}
		if err != nil {
			var ie *base.InvalidError
			if !errors.As(err, &ie) {
				t.Fatalf("error %v (%T), want *base.InvalidError", err, err)
			}
			if compiles {
				t.Fatalf("refused %q/%q/%q, which compile: %v", configure, write, read, err)
			}
			return
		}
		if !compiles {
			t.Fatalf("accepted %q/%q/%q, which Go's regexp refuses", configure, write, read)
		}
		for k, src := range srcs {
			want := src != "" && regexp.MustCompile(src).MatchString(name)
			if got := p.Allows(auth.Access(k), name); got != want {
				t.Fatalf("%q: %s %q allowed %v, want %v", src, auth.Access(k), name, got, want)
			}
		}
	})
}

// FuzzPasswordHash: a password hashed in any algorithm, shown as RabbitMQ
// shows it and taken back as a PasswordHash (a definitions export and
// import), matches that password and no other; any PasswordHash string is
// refused or taken without a panic, and then matches only as its bytes
// say.
func FuzzPasswordHash(f *testing.F) {
	f.Add("pw", uint8(0), "AQIDBJsPGQAmNOBwcEzrqoDBa4HefPXET3JTmdZKm3Tj4CzZ")
	f.Add("", uint8(1), "")
	f.Add("pa ss\x00é", uint8(2), "AQIDBJR91gt1SAWTmvD+VzA7MFU=")
	f.Add("test12", uint8(3), "kI3GCqW5JLMJa4iX1lo7X4D6XbYqlLgxIs30+P6tENUV2POR")
	f.Add("x", uint8(0), "!!notbase64")
	f.Fuzz(func(t *testing.T, password string, algIdx uint8, hash string) {
		algs := []string{"", auth.HashSHA256, auth.HashSHA512, auth.HashMD5}
		alg := algs[int(algIdx)%len(algs)]
		if password != "" {
			u, err := auth.NewUser(auth.UserSpec{Name: "u", Password: password, HashingAlgorithm: alg})
			if err != nil {
				t.Fatal(err)
			}
			info := u.Info()
			back, err := auth.NewUser(auth.UserSpec{Name: "u", PasswordHash: info.PasswordHash, HashingAlgorithm: info.HashingAlgorithm})
			if err != nil {
				t.Fatalf("import of %+v: %v", info, err)
			}
			if !back.CheckPassword(password) || back.CheckPassword(password+"\x00") || back.CheckPassword("") {
				t.Fatalf("%s hash %q of %q: round trip does not check as it should", alg, info.PasswordHash, password)
			}
			if back.Info().PasswordHash != info.PasswordHash {
				t.Fatalf("hash %q shown back as %q", info.PasswordHash, back.Info().PasswordHash)
			}
		}
		u, err := auth.NewUser(auth.UserSpec{Name: "u", PasswordHash: hash, HashingAlgorithm: alg})
		if err != nil {
			var ie *base.InvalidError
			if !errors.As(err, &ie) {
				t.Fatalf("error %v (%T), want *base.InvalidError", err, err)
			}
			return
		}
		u.CheckPassword(password)
		if hash != "" && u.Info().PasswordHash != hash {
			// Only canonical base64 comes back as it went in.
			if _, err := auth.NewUser(auth.UserSpec{Name: "u", PasswordHash: u.Info().PasswordHash, HashingAlgorithm: alg}); err != nil {
				t.Fatalf("hash %q shown as %q, which is refused: %v", hash, u.Info().PasswordHash, err)
			}
		}
	})
}
