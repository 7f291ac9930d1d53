package tool

import (
	"crypto/sha256"
	"sync"
)

// A ManifestCache starts over past maxCachedManifests entries or
// maxCachedBytes of manifest JSON (parsed manifests take a few times that).
const (
	maxCachedManifests = 4096
	maxCachedBytes     = 32 << 20
)

// ManifestCache keeps manifests parsed from stored JSON, keyed by the
// sha256 of those exact bytes. Stored manifests never change, and parsing
// one compiles its JSON Schema, which is most of what loading the tools for
// a run start or a resume costs. Safe for concurrent use. The manifests it
// returns are shared: nothing may modify them (nothing in agentplane does);
// their Hash is computed once, here.
type ManifestCache struct {
	mu    sync.Mutex
	m     map[[32]byte]*Manifest
	bytes int
}

// FromJSON is ManifestFromJSON, parsing each distinct input once.
func (c *ManifestCache) FromJSON(data []byte) (*Manifest, error) {
	sum := sha256.Sum256(data)
	c.mu.Lock()
	m, ok := c.m[sum]
	c.mu.Unlock()
	if ok {
		return m, nil
	}
	m, err := ManifestFromJSON(data)
	if err != nil {
		return nil, err // errors are not cached: the input is refused each time
	}
	m.pin = &manifestPin{m: m, sum: m.Hash()}
	c.mu.Lock()
	if c.m == nil || len(c.m) >= maxCachedManifests || c.bytes+len(data) > maxCachedBytes {
		c.m, c.bytes = make(map[[32]byte]*Manifest), 0
	}
	c.m[sum] = m
	c.bytes += len(data)
	c.mu.Unlock()
	return m, nil
}
