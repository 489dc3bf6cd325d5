package defs

import "github.com/brokerd/brokerd/store"

// Batch collects the records of one definition change, in order, for one
// store.Batch's Meta. The zero Batch is empty and ready to use; it is not
// safe for concurrent use (its owner builds it under the lock of what it
// describes, as the broker does).
type Batch struct{ Ops []store.MetaOp }

// Put adds a record (an EncodeX result).
func (b *Batch) Put(op store.MetaOp) { b.Ops = append(b.Ops, op) }

// Delete adds the deletion of the record under key (an XKey result).
func (b *Batch) Delete(key string) { b.Ops = append(b.Ops, store.MetaOp{Key: key}) }
