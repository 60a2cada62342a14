"""A deterministic simulation of a whole dht cluster (issue 43): N nodes of dht's own
coordinator, replica service, hints, anti-entropy, collection, fence and clock in one
process, on one event loop with virtual time (`loop`), an in-memory network (`network`)
and an in-memory store (`disk`), faults drawn from a seed (`faults`), the history judged
by `dht.history`'s checker (`run`). Nothing of the node imports it."""
