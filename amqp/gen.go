package amqp

// spec_gen.go is committed; regenerate it only when the protocol definition
// in shared/amqp changes. The path is relative to this directory in a
// checkout where shared/ sits beside the repository.
//go:generate go run ./internal/gen -spec ../../shared/amqp/amqp-rabbitmq-0.9.1.json -out spec_gen.go
