module github.com/brokerd/brokerd

go 1.26

require (
	github.com/BurntSushi/toml v1.6.0
	github.com/rabbitmq/amqp091-go v1.16.0
)

require go.uber.org/goleak v1.3.0
