"""The conformance kit: grades any implementation of the v0 API by the numbered rules of
SPEC.md, tier by tier (`python -m dht.conformance --help`).

- `spec.py` reads the rules and their tiers out of SPEC.md (pure);
- `plugin.py` is the pytest plugin that records each spec test's tier, rules and outcome;
- `report.py` turns those records into the Markdown report (pure);
- `__main__.py` is the command line (`dht-conformance`): it runs the suite under pytest
  with the user's node command and writes the report and a JUnit XML file;
- `suite/`, `launcher.py`, `fixtures.py`, `rules.py` and `fuzz/` are what it runs, shipped
  in the package with SPEC.md, so an installed kit needs no clone.
"""
