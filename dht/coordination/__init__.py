"""One client request's path: the coordinator that places it on its replica sets, fans
it out and merges the answers (quorums, versions and the ring are the model's), a
write's rounds sent again past a newer record, read repair, and the cluster-wide
range."""
