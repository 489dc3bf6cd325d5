package segment

import "sync"

// CacheStats are counters of the block cache since Open.
type CacheStats struct {
	Hits   int64 // block lookups answered from the cache (or by a load already under way)
	Misses int64 // block lookups that read and decoded the block
	Bytes  int64 // decompressed bytes held now
}

// blockKey names a block: its segment and file offset.
type blockKey struct {
	seg ID
	off uint32
}

// cacheEntry is a block in the cache, or one being loaded (ready open).
type cacheEntry struct {
	key   blockKey
	blk   block
	err   error
	ready chan struct{} // closed once blk or err is set
	size  int64

	prev, next *cacheEntry // LRU list; nil while loading or after removal
}

// blockCache is an LRU of decoded blocks bounded by their decompressed
// bytes. Safe for concurrent use. Concurrent misses on one block load it
// once: the first caller loads, the others wait for it.
//
// A cached block is never written to or recycled, so a block a caller got
// stays valid after its eviction; eviction only drops the cache's reference.
type blockCache struct {
	max int64

	mu     sync.Mutex
	m      map[blockKey]*cacheEntry
	lru    cacheEntry // sentinel: lru.next is the most recently used
	bytes  int64
	hits   int64
	misses int64
}

func newBlockCache(max int64) *blockCache {
	c := &blockCache{max: max, m: make(map[blockKey]*cacheEntry)}
	c.lru.next, c.lru.prev = &c.lru, &c.lru
	return c
}

// get returns the block at key, from the cache or by calling load (once
// for all concurrent callers). A load error is returned to the callers
// that waited for it and not cached.
func (c *blockCache) get(key blockKey, load func() (block, error)) (block, error) {
	c.mu.Lock()
	if e, ok := c.m[key]; ok {
		c.hits++
		if e.prev != nil {
			c.unlinkLocked(e)
			c.pushFrontLocked(e)
			blk := e.blk
			c.mu.Unlock()
			return blk, nil
		}
		c.mu.Unlock()
		<-e.ready
		return e.blk, e.err
	}
	c.misses++
	e := &cacheEntry{key: key, ready: make(chan struct{})}
	c.m[key] = e
	c.mu.Unlock()

	e.blk, e.err = load()
	e.size = int64(cap(e.blk.raw))

	c.mu.Lock()
	switch {
	case c.m[key] != e:
		// Dropped while loading: the segment was removed.
	case e.err != nil || e.size > c.max:
		delete(c.m, key)
	default:
		c.pushFrontLocked(e)
		c.bytes += e.size
		for c.bytes > c.max {
			c.removeLocked(c.lru.prev)
		}
	}
	c.mu.Unlock()
	close(e.ready)
	return e.blk, e.err
}

// drop forgets every block of seg, loaded or loading.
func (c *blockCache) drop(seg ID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, e := range c.m {
		if k.seg == seg {
			if e.prev != nil {
				c.removeLocked(e)
			} else {
				delete(c.m, k)
			}
		}
	}
}

func (c *blockCache) stats() CacheStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return CacheStats{Hits: c.hits, Misses: c.misses, Bytes: c.bytes}
}

// removeLocked takes a linked entry out of the list, the map and the byte
// count.
func (c *blockCache) removeLocked(e *cacheEntry) {
	c.unlinkLocked(e)
	delete(c.m, e.key)
	c.bytes -= e.size
}

func (c *blockCache) unlinkLocked(e *cacheEntry) {
	e.prev.next = e.next
	e.next.prev = e.prev
	e.prev, e.next = nil, nil
}

func (c *blockCache) pushFrontLocked(e *cacheEntry) {
	e.prev = &c.lru
	e.next = c.lru.next
	c.lru.next.prev = e
	c.lru.next = e
}
