package balance

// The hashing policies need a hash that is the same in every process and
// every release, so that several switchboard instances (and restarts) send a
// key to the same endpoint. hash/maphash is seeded per process and cannot be
// used; FNV-1a 64 is stable but mixes its last bytes poorly, so its result
// goes through MurmurHash3's 64-bit finalizer.

const (
	fnvOffset64 = 14695981039346656037
	fnvPrime64  = 1099511628211
)

// hashString is FNV-1a 64 of s followed by mix64. Pinned by
// TestHashStringIsStable: changing it remaps every key of every user.
func hashString(s string) uint64 {
	h := uint64(fnvOffset64)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime64
	}
	return mix64(h)
}

// mix64 is MurmurHash3's fmix64: a bijection that spreads every input bit
// over the whole output.
func mix64(h uint64) uint64 {
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}

// pointHash is the position of an endpoint's j-th point (ring) or its
// permutation seed (maglev), from the hash of its address.
func pointHash(addrHash uint64, j int) uint64 {
	return mix64(addrHash ^ (uint64(j)+1)*0x9e3779b97f4a7c15)
}
