package script

// The scripts' hashes are computed ahead of time, not when the package
// starts: EVALSHA names a script by the SHA-1 of its source, and a program
// run with GODEBUG=fips140=only (FIPS 140-3 mode, as FedRAMP deployments
// run) panics on any use of crypto/sha1. So gen reads the sources and
// writes their hashes to hashes_gen.go, keyed by an FNV-1a fingerprint of
// the source (not a cryptographic hash: allowed in FIPS mode, and the file
// does not repeat the Lua), and newScript only looks the fingerprint up. TestHashes fails when a source changed and its hash was not
// written again.
//
// A source missing from hashes_gen.go (its hash not generated yet) gets no
// hash: EVALSHA "" is refused with NOSCRIPT, and the lane sends the script
// again with its source (EVAL), so the script still runs, the new source,
// never the one an outdated hash would name, at the cost of a round trip.

//go:generate go run ./gen
