"""Fuzz tests against real node processes: raw HTTP on the client API, a model-based
state machine of PUT/GET/DELETE/range, and raw bytes on the replica channel. Short by
default; DHT_FUZZ_EXAMPLES makes them long."""
