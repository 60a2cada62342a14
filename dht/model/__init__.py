"""The pure model at the bottom of dht: keys, records and versions, the clock, the ring,
replica counts, topology steps, record digests and their hash trees, the rate-limited
log. Plain values in, plain values out: no sockets, no event loop, no disk."""
