"""Stores other than the course API's, graded by the kit's clients, faults and checkers:
each adapter starts a cluster, sends one operation to one member and records it in the
course API's terms, and acts on a member as the nemesis asks (kill -9 and restart,
pause and resume, and where it can, cut it off from the others and heal)."""
