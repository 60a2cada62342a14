"""Keeping replicas together, over the transport: hints, anti-entropy, tombstone
collection, which of those loops run when, and the fences that stop a node serving from
data it must not answer from. (The rebalance after a membership change is
`dht.membership.rebalance`.)"""
