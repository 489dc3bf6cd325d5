// Tests of the bound on a transaction's size.

package broker_test

import (
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerd/brokerd/broker"
	"github.com/brokerd/brokerd/broker/brokertest"
)

// A transaction's commit is one store record, which the write-ahead log
// bounds (1 GiB): a publish that would take a transaction past
// MaxTxBytes is refused with 406 and closes the channel, and nothing of
// that transaction is committed. A commit or a rollback starts the count
// again.
func TestTxTooLargeRefused(t *testing.T) {
	const max = 64 << 10
	b := brokertest.Start(t, brokertest.Config{Broker: broker.Options{MaxTxBytes: max}})
	tx := b.Session(t, brokertest.NoConfirm)
	c := tx.Conn
	q := tx.Declare("txq", nil)
	watcher := brokertest.NewSession(t, c, brokertest.NoConfirm)
	if err := tx.Tx(); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, 10<<10)
	publish := func(n int) {
		t.Helper()
		for range n {
			tx.Publish("", q, amqp091.Publishing{Body: body})
		}
	}
	// Each publish counts 10 KiB + 3 bytes of key + 256: six fit in 64 KiB.
	publish(5)
	if err := tx.TxCommit(); err != nil {
		t.Fatal(err)
	}
	publish(6)
	if err := tx.TxRollback(); err != nil {
		t.Fatal(err)
	}
	publish(6)
	closed := tx.NotifyClose(make(chan *amqp091.Error, 1))
	publish(1) // the seventh would take the transaction past 64 KiB
	select {
	case err := <-closed:
		dvWantErr(t, err, 406, "PRECONDITION_FAILED - transaction too large: its publishes would hold more than 65536 bytes; commit in smaller transactions")
	case <-brokertest.Context(t).Done():
		t.Fatal("the channel was not closed")
	}
	watcher.WantReady(q, 5) // the first commit only
}
