"""One client request's path: the ring and the replica sets, quorums, versions from the
hybrid clock, and the coordinator that fans a request out and merges the answers."""
