"""Around the nodes: the local cluster command, its dashboard, and Toxiproxy on every link."""
