"""Histories of client operations under faults, and their verdict: what a run recorded
(`operation`, `run`, `run_folder`), the checker that finds lost acknowledged writes,
stale reads and resurrected deletes in it (`checker`, `verdict`), and the Jepsen-style
plot of a run (`plot` and its panels). Pure functions of a history: nothing here talks
to a node, so the chaos scenarios, the conformance kit and the cockpit share it.
"""
