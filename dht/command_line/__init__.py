"""The command line of `python -m dht`: its parser, and the node's flags made from the
settings declared in dht/config.py."""
