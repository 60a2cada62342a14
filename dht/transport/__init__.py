"""Talking to other nodes: the replica channel (its messages, framing and connections,
both ends), the handshake's proof, TLS, and peers with their breakers and deadlines."""
