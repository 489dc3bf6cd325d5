package mgmt

import (
	"encoding/json"
	"strings"

	"github.com/brokerd/brokerd/amqp"
	"github.com/brokerd/brokerd/broker"
)

// What the API stores is bounded as AMQP bounds what a client declares:
// a queue.declare, exchange.declare or a bind travels in one method frame
// of at most frame_max bytes (131072 unless amqp.frame_max says
// otherwise), with its names and routing key in short strings (255
// bytes). The API refuses, with a 400 naming the object and nothing
// stored, a declaration or binding that could not be sent so, and a
// policy, user, vhost or permission larger than a frame: every one of
// them is kept in memory, written to the store, loaded at every start and
// listed in full.

// shortstr is the most an AMQP short string holds.
const shortstr = 255

// checkMethod refuses a declaration or binding (the method a request runs,
// or a definitions import declares) that could not travel over AMQP: a
// name or routing key over 255 bytes, arguments no field table can hold
// (a key over 255 bytes), or a method frame over Options.FrameMax.
func (s *Server) checkMethod(m amqp.Method) error {
	var names [][2]string
	var args amqp.Table
	switch m := m.(type) {
	case *amqp.QueueDeclare:
		names, args = [][2]string{{"queue name", m.Queue}}, m.Arguments
	case *amqp.ExchangeDeclare:
		names, args = [][2]string{{"exchange name", m.Exchange}, {"exchange type", m.Type}}, m.Arguments
	case *amqp.QueueBind:
		names, args = [][2]string{{"queue name", m.Queue}, {"exchange name", m.Exchange}, {"routing key", m.RoutingKey}}, m.Arguments
	case *amqp.ExchangeBind:
		names, args = [][2]string{{"destination name", m.Destination}, {"source name", m.Source}, {"routing key", m.RoutingKey}}, m.Arguments
	}
	for _, n := range names {
		if len(n[1]) > shortstr {
			return badRequest("%s is %d bytes, over the %d of an AMQP short string", n[0], len(n[1]), shortstr)
		}
	}
	table, err := amqp.AppendTable(nil, args)
	if err != nil {
		return badRequest("arguments: %s", amqpErrText(err))
	}
	if n := len(amqp.AppendMethodFrame(nil, 1, m)); n > s.opts.FrameMax {
		return badRequest("arguments take %d bytes as an AMQP field table: the %s would be a %d-byte frame, over frame_max (%d bytes)",
			len(table), m.Name(), n, s.opts.FrameMax)
	}
	return nil
}

// amqpErrText is an error's text without the reply name an *amqp.Error
// starts with.
func amqpErrText(err error) string {
	if ae, ok := err.(*amqp.Error); ok {
		if _, rest, ok := strings.Cut(ae.Text, " - "); ok {
			return rest
		}
		return ae.Text
	}
	return err.Error()
}

// checkStored refuses a definition (described by what) of size bytes over
// a frame.
func (s *Server) checkStored(what string, size int) error {
	if size > s.opts.FrameMax {
		return badRequest("%s take %d bytes, over the %d a definition may take (frame_max)", what, size, s.opts.FrameMax)
	}
	return nil
}

func (s *Server) checkUser(u broker.UserSpec) error {
	n := len(u.Name) + len(u.Password) + len(u.PasswordHash) + len(u.HashingAlgorithm)
	for _, t := range u.Tags {
		n += len(t)
	}
	return s.checkStored("the user's name, password and tags", n)
}

// checkVHost also holds a vhost's name to a short string: a client names
// the vhost in connection.open, as one.
func (s *Server) checkVHost(v broker.VHostInfo) error {
	if len(v.Name) > shortstr {
		return badRequest("vhost name is %d bytes, over the %d of an AMQP short string (connection.open could not name it)", len(v.Name), shortstr)
	}
	n := len(v.Name) + len(v.Description) + len(v.DefaultQueueType)
	for _, t := range v.Tags {
		n += len(t)
	}
	return s.checkStored("the vhost's name, description and tags", n)
}

func (s *Server) checkPolicy(p broker.Policy) error {
	def, err := json.Marshal(p.Definition)
	if err != nil {
		return badRequest("definition: %s", err)
	}
	return s.checkStored("the policy's name, pattern and definition", len(p.Name)+len(p.Pattern)+len(p.ApplyTo)+len(def))
}

// checkShort refuses a field over a short string (a name a redrive is
// given).
func checkShort(field, v string) error {
	if len(v) > shortstr {
		return badRequest("%s is %d bytes, over the %d of an AMQP short string", field, len(v), shortstr)
	}
	return nil
}
