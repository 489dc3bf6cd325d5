package amqp

// spec_gen.go is committed; regenerate it only when the protocol definition
// changes. The definition is kept in internal/gen/testdata (a copy of the
// project's shared/amqp one, which a test compares it with), so a plain
// clone checks that spec_gen.go is current.
//go:generate go run ./internal/gen -spec internal/gen/testdata/amqp-rabbitmq-0.9.1.json -out spec_gen.go
