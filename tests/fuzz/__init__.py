"""Fuzz tests against real node processes: raw HTTP on the client API, and a model-based
state machine of PUT/GET/DELETE/range. Short by default; DHT_FUZZ_EXAMPLES makes them long."""
