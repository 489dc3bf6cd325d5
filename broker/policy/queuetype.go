package policy

// Queue types, as x-queue-type and a vhost's default queue type name
// them. They live here, below the queue engine and the AMQP layer that
// both name them, because which queues a policy applies to depends on the
// type (AppliesToQueue).
const (
	QueueClassic = "classic"
	QueueQuorum  = "quorum"
	QueueStream  = "stream"
)

// RabbitTypeName is how RabbitMQ names a queue type in error texts.
func RabbitTypeName(t string) string { return "rabbit_" + t + "_queue" }
