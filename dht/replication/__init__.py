"""Keeping replicas together, over the transport: hints, anti-entropy, tombstone
collection, the handoff after a membership change, and the fences that stop a node
serving from data it must not answer from."""
