// Package auth is the pure half of brokerd's users and permissions, as
// RabbitMQ's internal authentication backend has them: password hashing
// in RabbitMQ's formats (rabbit_password: base64(salt ++ H(salt ++
// password)) with a 4-byte salt, SHA-256 by default, SHA-512 and MD5 for
// hashes imported from RabbitMQ), the user record with its tags, the
// loopback rule, and the configure/write/read permission patterns.
//
// It owns no registry: package broker keeps the users and permissions,
// persists them, installs them on open connections and checks logins and
// access (Broker.Login, Broker.CheckAccess, a connection's checkPerm).
// Nothing here does I/O beyond crypto/rand's salts or reads a clock.
//
// # Files
//
//	password.go    the hashing algorithms, HashPassword
//	user.go        User (immutable), NewUser, StoredUser, CheckPassword, UserInfo, UserSpec
//	permission.go  Permission (immutable), NewPermission, Access, Allows, PermissionInfo
//	topic.go       TopicPermission (immutable), NewTopicPermission, TopicVars, TopicPermissionInfo
//	loopback.go    IsLoopback, SourceName
//
// # Concurrency
//
// The package takes no locks and starts no goroutines. A *User and a
// *Permission are never changed once made (broker replaces them, in
// atomic pointers on each connection), so their methods may be called
// from any goroutine. Allows costs no regexp for a ".*" pattern
// (RabbitMQ's default), which is what most publishes meet.
//
// # Errors
//
// Two calls fail, both with a *base.InvalidError (broker.InvalidError)
// whose Msg is RabbitMQ's text where RabbitMQ has one: NewUser for a spec
// without a name, with both a password and a hash, with an unknown
// algorithm or with a hash that is not base64; NewPermission for a
// pattern that does not compile.
package auth
