package mgmt

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
)

// Request bodies are read only once admitBody has bounded them, and
// decoded so that what they cost in memory stays near their size: JSON
// decoded into interface values (arguments, a policy's definition, a
// publish's headers) takes some 20 to 35 times its text (a 60 MiB array
// of zeros took 3 GiB), so a body may hold at most one JSON value per
// bytesPerValue bytes of its limit, counted before decoding. A definitions
// import, up to 64 MiB, is decoded one object at a time (decodeImport).

// bytesPerValue is how many bytes of a body's limit allow one JSON value
// in it: 16384 values in the default 1 MiB.
const bytesPerValue = 64

// readJSON decodes the request body into v; a body that is not JSON is
// refused as RabbitMQ does. An empty body leaves v as it is.
func readJSON(r *http.Request, v any) error {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return err
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return nil
	}
	maxValues := 1 << 20 / bytesPerValue
	if b, ok := r.Body.(*bodyReader); ok && b.limit > 0 {
		maxValues = int(b.limit / bytesPerValue)
	}
	if n := jsonValues(body); n > maxValues {
		return badRequest("request body holds over %d JSON values (%d), more than any request needs", maxValues, n)
	}
	return decodeJSON(body, v)
}

// decodeJSON decodes one JSON value, numbers as json.Number.
func decodeJSON(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return fieldError(err)
	}
	return nil
}

// jsonValues is an upper bound on the number of values in the JSON text b
// (array elements and object members at any depth, and the outermost
// value), which bounds what decoding it allocates. It reads b once and
// allocates nothing; it does not check that b is JSON.
func jsonValues(b []byte) int {
	n := 1
	inString, escaped := false, false
	for _, c := range b {
		if inString {
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case ',', '[', '{':
			n++
		}
	}
	return n
}

// budgetReader counts what a json.Decoder reads for one object of a
// stream and fails the read that takes it past its budget, so no object
// is buffered whole beyond it. Reads are cut to readChunk bytes, so the
// decoder reads ahead of the object it decodes by less than that: the
// count is the object's size within readChunk either way.
type budgetReader struct {
	r      io.Reader
	left   int64
	over   bool
	budget int64
}

const readChunk = 32 << 10

func (b *budgetReader) reset(budget int64) { b.left, b.budget, b.over = budget, budget, false }

func (b *budgetReader) Read(p []byte) (int, error) {
	if b.left <= 0 {
		b.over = true
		return 0, errObjectTooLarge
	}
	p = p[:min(len(p), readChunk, int(b.left))]
	n, err := b.r.Read(p)
	b.left -= int64(n)
	return n, err
}

var errObjectTooLarge = errors.New("mgmt: object over its budget")

// importDecoder reads a definitions file one object at a time: each list
// element is buffered alone (at most elemMax bytes, at most maxValues JSON
// values), decoded into its compact import form (importdefs.go), and
// counted against the memory the whole import may hold (held, at most
// maxHeld: an element's bytes and elemOverhead each).
type importDecoder struct {
	dec       *json.Decoder
	br        *budgetReader
	elemMax   int64
	maxValues int
	held      int64
	maxHeld   int64
}

// elemOverhead is what an imported object costs beyond its JSON text:
// its struct and slice slot, some strings' headers.
const elemOverhead = 256

// failedToParse is RabbitMQ's refusal of a definitions file that is not
// JSON.
func failedToParse() error { return badRequest("failed_to_parse_json") }

func newImportDecoder(r io.Reader, elemMax int64, maxValues int, maxHeld int64) *importDecoder {
	br := &budgetReader{r: r}
	br.reset(elemMax)
	dec := json.NewDecoder(br)
	dec.UseNumber()
	return &importDecoder{dec: dec, br: br, elemMax: elemMax, maxValues: maxValues, maxHeld: maxHeld}
}

// token reads the next token, within one object's budget.
func (d *importDecoder) token() (json.Token, error) {
	d.br.reset(d.elemMax)
	t, err := d.dec.Token()
	if err != nil {
		return nil, d.readErr("a key or value", err)
	}
	return t, nil
}

func (d *importDecoder) readErr(what string, err error) error {
	var he *httpError
	var tl *bodyTooLarge
	var bt *bodyTimeout
	switch {
	case errors.As(err, &he), errors.As(err, &tl), errors.As(err, &bt):
		return err
	case d.br.over:
		return badRequest("definitions: %s is over %d bytes", what, d.elemMax)
	}
	return failedToParse()
}

// object reads the next value whole (one list element, one top-level
// string) and decodes it into v.
func (d *importDecoder) object(what string, v any) error {
	d.br.reset(d.elemMax)
	var raw json.RawMessage
	if err := d.dec.Decode(&raw); err != nil {
		return d.readErr(what, err)
	}
	if n := jsonValues(raw); n > d.maxValues {
		return badRequest("definitions: %s holds over %d JSON values (%d)", what, d.maxValues, n)
	}
	d.held += int64(len(raw)) + elemOverhead
	if d.held > d.maxHeld {
		return badRequest("definitions: over %d bytes of objects", d.maxHeld)
	}
	if err := decodeJSON(raw, v); err != nil {
		var he *httpError
		if errors.As(err, &he) && he.reason != "not_json" {
			return &elemProblem{what + ": " + he.reason}
		}
		return failedToParse()
	}
	return nil
}

// elemProblem is an element of a definitions file that is JSON but holds a
// field of the wrong form: reported with the file's other problems, the
// element skipped (decodeList).
type elemProblem struct{ text string }

func (e *elemProblem) Error() string { return e.text }

// decodeList reads the list key into dst, an element at a time; an
// element with a field of the wrong form is named in problems instead.
func decodeList[T any](d *importDecoder, key string, dst *[]T, problems *[]string) error {
	return d.list(key, func(i int) error {
		var v T
		err := d.object(elemName(key, i), &v)
		if ep, ok := err.(*elemProblem); ok {
			*problems = append(*problems, ep.text)
			return nil
		}
		if err != nil {
			return err
		}
		*dst = append(*dst, v)
		return nil
	})
}

// list reads a JSON array (null: empty), calling each for every element's
// index.
func (d *importDecoder) list(key string, each func(i int) error) error {
	t, err := d.token()
	if err != nil {
		return err
	}
	if t == nil {
		return nil
	}
	if t != json.Delim('[') {
		return badRequest("definitions: %s must be a list", key)
	}
	for i := 0; d.more(); i++ {
		if err := each(i); err != nil {
			return err
		}
	}
	if t, err = d.token(); err == nil && t != json.Delim(']') {
		return failedToParse()
	}
	return err
}

// more reports whether the list or object being read has another element
// (a read error shows at the next token).
func (d *importDecoder) more() bool {
	d.br.reset(d.elemMax)
	return d.dec.More()
}

// skip reads past a value of a key brokerd does not read, a token at a
// time, so that its size costs no memory.
func (d *importDecoder) skip() error {
	depth := 0
	for {
		t, err := d.token()
		if err != nil {
			return err
		}
		switch t {
		case json.Delim('['), json.Delim('{'):
			depth++
		case json.Delim(']'), json.Delim('}'):
			depth--
		}
		if depth == 0 {
			return nil
		}
	}
}

// end checks that nothing but white space follows the file's object.
func (d *importDecoder) end() error {
	d.br.reset(d.elemMax)
	if _, err := d.dec.Token(); err != io.EOF {
		if err == nil {
			return failedToParse()
		}
		return d.readErr("the end", err)
	}
	return nil
}

func elemName(list string, i int) string { return fmt.Sprintf("%s[%d]", list, i) }
