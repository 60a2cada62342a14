"""Changing the cluster's membership: the operator's driver that takes every node through
the steps of a change (`driver.py`), each node's `/v0/admin/topology` that takes a step
(`api.py`), and the rebalance that moves records to their new owners after one
(`rebalance.py`). The steps themselves are pure model (`dht.model.topology`), and the
step a node is at is saved with its data (`dht.storage.membership`): layers below this
one read both."""
