package fallback

import (
	"container/list"
	"net/http"
	"sync"
	"time"
)

// Defaults for the zero fields of CacheConfig.
const (
	DefaultMaxEntries       = 1000
	DefaultMaxBytes         = 16 << 20
	DefaultMaxResponseBytes = 1 << 20
)

// CacheConfig bounds the stale step's cache. The yaml tags are the keys of
// a route's fallback cache: block. A zero field takes its default.
type CacheConfig struct {
	// MaxEntries bounds how many responses are kept. Default 1000.
	MaxEntries int `yaml:"max_entries"`
	// MaxBytes bounds the total size of the kept responses (bodies, header
	// names and values, and keys). Default 16 MiB.
	MaxBytes int64 `yaml:"max_bytes"`
	// MaxResponseBytes is the largest single response kept; a larger one is
	// not stored, so that one big download cannot evict everything else.
	// Default 1 MiB.
	MaxResponseBytes int64 `yaml:"max_response_bytes"`
}

func (c CacheConfig) withDefaults() CacheConfig {
	if c.MaxEntries == 0 {
		c.MaxEntries = DefaultMaxEntries
	}
	if c.MaxBytes == 0 {
		c.MaxBytes = DefaultMaxBytes
	}
	if c.MaxResponseBytes == 0 {
		c.MaxResponseBytes = DefaultMaxResponseBytes
	}
	return c
}

// Entry is a stored response. Its fields are shared by every reader and
// must not be modified.
type Entry struct {
	Status int
	Header http.Header
	Body   []byte
	Stored time.Time
}

type cacheItem struct {
	key   string
	entry *Entry
	size  int64
}

// Cache is a bounded LRU cache of good responses, by key: at most
// MaxEntries entries and MaxBytes bytes; the least recently used go first.
// Its methods take the current time. It is safe for concurrent use.
type Cache struct {
	cfg   CacheConfig
	mu    sync.Mutex
	lru   *list.List // of *cacheItem, most recent at the front
	items map[string]*list.Element
	bytes int64
}

// NewCache returns an empty cache with cfg's limits (defaults for zero
// fields).
func NewCache(cfg CacheConfig) *Cache {
	return &Cache{cfg: cfg.withDefaults(), lru: list.New(), items: make(map[string]*list.Element)}
}

func entrySize(key string, header http.Header, body []byte) int64 {
	n := int64(len(key) + len(body))
	for k, vs := range header {
		n += int64(len(k))
		for _, v := range vs {
			n += int64(len(v))
		}
	}
	return n
}

// Store records a good response for key at now, replacing the one before.
// It copies header and body. It reports false, and forgets any older entry
// for key, when the response is larger than MaxResponseBytes: serving an
// older body than the latest good one would mislead more than serving none.
func (c *Cache) Store(key string, status int, header http.Header, body []byte, now time.Time) bool {
	size := entrySize(key, header, body)
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[key]; ok {
		c.remove(el)
	}
	if size > c.cfg.MaxResponseBytes || size > c.cfg.MaxBytes {
		return false
	}
	e := &Entry{Status: status, Header: header.Clone(), Body: append([]byte(nil), body...), Stored: now}
	c.items[key] = c.lru.PushFront(&cacheItem{key: key, entry: e, size: size})
	c.bytes += size
	for c.lru.Len() > c.cfg.MaxEntries || c.bytes > c.cfg.MaxBytes {
		c.remove(c.lru.Back())
	}
	return true
}

// Get returns the entry for key if it is younger than maxAge at now, and
// marks it recently used. An older entry is dropped.
func (c *Cache) Get(key string, maxAge time.Duration, now time.Time) (*Entry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.items[key]
	if !ok {
		return nil, false
	}
	it := el.Value.(*cacheItem)
	if now.Sub(it.entry.Stored) >= maxAge {
		c.remove(el)
		return nil, false
	}
	c.lru.MoveToFront(el)
	return it.entry, true
}

// Len returns the number of entries and their total size in bytes.
func (c *Cache) Len() (entries int, bytes int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len(), c.bytes
}

func (c *Cache) remove(el *list.Element) {
	it := c.lru.Remove(el).(*cacheItem)
	delete(c.items, it.key)
	c.bytes -= it.size
}
