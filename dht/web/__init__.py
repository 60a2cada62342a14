"""The HTTP edge: one port for HTTP and the replica channel, the request dispatcher, the
client API and this node's side of internal traffic, and the limits that keep a flood
out."""
