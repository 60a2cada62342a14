"""Talking to other nodes and keeping replicas together: the replica channel (protocol and
connections), peers with their breakers and deadlines, hints, anti-entropy and tombstone
collection."""
