"""Every fixed limit of a node, declared once, with the relations between them asserted
below the declarations (TigerBeetle's `src/constants.zig`): a limit changed so that
another no longer holds fails at import, not in production.

A limit is a bound the node enforces or stops at: a size, a count or a deadline that
refuses, cuts, pauses or gives up. The settings an operator can change are
`dht/config.py`'s (which asserts its defaults' relations with these); what is not here
on purpose is the wire and disk formats' own numbers (field widths, versions, tree
shape: both ends must agree, so they stay with their codec) and the pacing of the
background loops (batch sizes, intervals: they change speed, not what is taken).
SPEC.md's "Limits" table names every one a client or peer can meet, and what it
answers then (`tests/unit/test_limits.py`).

This module imports nothing of dht, so every layer, the kit's included, can import it.
"""

from __future__ import annotations

KiB = 1024
MiB = 1024 * KiB

# -- the HTTP edge ---------------------------------------------------------------------------

# The longest cluster secret (an HMAC key: it never travels, SPEC.md rule 11.4; longer
# adds nothing). A longer --secret is refused at start.
MAX_SECRET_BYTES = 1024
# Method, path, other parameters and the HTTP version around the key in a request line
# (`dht.config.request_line_limit`: aiohttp answers a longer line 400).
REQUEST_LINE_OVERHEAD = 1024
# Headroom over --max-value-bytes for aiohttp's body read; client values are checked
# against the exact limit in the handler, which answers 413 with the project's reason.
BODY_OVERHEAD = 64
# A year: an expiry further out is a mistake (seconds taken for milliseconds, say): 400.
MAX_TTL_SECONDS = 365 * 24 * 3600
# The largest body of an internal request (an anti-entropy exchange, a membership step):
# both are a few KiB of JSON. A larger one is answered 413 before it is read.
MAX_INTERNAL_BODY = 1 * MiB
# How long SIGTERM waits for in-flight requests before it closes their connections.
SHUTDOWN_GRACE = 3.0

# The lean path (dht/web/lean_http.py): a request past these is not refused but handed
# to aiohttp, which takes it under its own limits (below).
# A larger PUT goes to aiohttp, which admits it against the byte budget before reading it.
LEAN_MAX_BODY = 64 * KiB
# A longer head, or more header fields, goes to aiohttp.
LEAN_MAX_HEADER_BYTES = 8000
LEAN_MAX_HEADERS = 32
# Reading pauses while more than this many bytes wait behind the request being answered
# (pipelined requests): room for two whole lean requests.
LEAN_READ_LIMIT = 2 * (LEAN_MAX_BODY + LEAN_MAX_HEADER_BYTES)
# An idle keep-alive connection is closed after this long (nginx's and Node's default;
# aiohttp's handler, which takes the connections handed to it, keeps them 3630 s).
KEEPALIVE_TIMEOUT = 75.0
# aiohttp's own limits on a request's head (its `max_field_size`, `max_headers`), which
# the node leaves at their defaults: past them it answers 400 (a test checks they are
# aiohttp's).
AIOHTTP_MAX_FIELD_SIZE = 8190
AIOHTTP_MAX_HEADERS = 128

# -- the replica channel and internal requests -------------------------------------------

# A message whose body is larger travels as several fragments, so one large value does
# not hold up the small calls multiplexed with it.
FRAGMENT_BYTES = 64 * KiB
# The largest body of a handshake message: a HELLO with the longest host name and ring
# identity fits with room to spare. A longer one closes the connection.
HANDSHAKE_BYTES = 4 * KiB
# Headroom over a value for a PUT's key length, record header and framing.
MESSAGE_OVERHEAD = 64
# Seconds from a connection's first byte to its HELLO; then it is closed.
HANDSHAKE_DEADLINE = 5.0
# Connections awaiting their HELLO at once; one more closes the oldest of them.
MAX_AWAITING_HELLO = 64
# Bytes a connection lets pile up in its transport before it stops feeding it fragments.
WRITE_HIGH_WATER = 256 * KiB
# A call carrying more than a fragment, or answered with more (counted as it arrives),
# gets its size at SLOWEST_TRANSFER bytes a second on top of --timeout, so a large but
# healthy transfer is not cut off as a time-out. It is low because a replica writes large
# values one at a time (LevelDB takes ~200 MB/s here): 16 concurrent 16 MiB writes queue
# for over a second before the last one lands.
PLAIN_CALL_BYTES = 64 * KiB
SLOWEST_TRANSFER = 8 * MiB
# How far an internal request's proof time may be from the receiver's clock, either way;
# further, the request is answered 403.
REQUEST_WINDOW_MS = 300_000
# The largest clock a peer's header may say (ms since the epoch, about the year 5138):
# past it, the header is no time at all (a 400-digit one broke the float conversions of
# /v0/status and of the fence's watch).
LATEST_CLOCK_MS = 1 << 47

# -- storage --------------------------------------------------------------------------------

# Values from this size on are written in a thread rather than on the loop (with every
# --durability, "group" writing every value there).
LARGE_WRITE = 1 * MiB
# Refused writes resume once free space is back above --disk-reserve by this much (a high
# and a low watermark, so writes do not flap at the edge).
RESUME_MARGIN = 1 * MiB

# -- coordination and membership ---------------------------------------------------------

# How many times one client write is sent again with a newer version after a replica
# kept a newer record over it (SPEC.md rule 9.13); then it is answered 504.
RESTAMPS = 3
# How long a starting node waits for its peers' steps before it serves.
FIRST_CHECK_SECONDS = 0.5
# The fastest a clock is taken to drift with no step (a bad crystal, NTP off or slewing
# at its limit): a peer's answer, and its clock's jump back seen in it, count for as long
# as this node's clock drifting so fast would move a quarter of --max-clock-drift
# (SPEC.md rule 9.13; 4 h 10 min at 60 s).
MAX_DRIFT_RATE = 0.001
# A node that does not answer the membership driver at all for this long stops the
# change (SPEC.md rule 13.8).
NO_ANSWER_DEADLINE = 10.0


# -- how they relate ------------------------------------------------------------------------

# A lean request's largest header block and body fit below the point where reading
# pauses, so the lean path does not wait for bytes it stopped reading (a request line is
# bounded by --max-key-bytes instead, and handed to aiohttp past the lean limits).
assert LEAN_READ_LIMIT >= LEAN_MAX_BODY + LEAN_MAX_HEADER_BYTES
# A request taken lean is one aiohttp would take too: handing it off never changes the
# answer from a success to a 400.
assert LEAN_MAX_HEADER_BYTES <= AIOHTTP_MAX_FIELD_SIZE
assert LEAN_MAX_HEADERS <= AIOHTTP_MAX_HEADERS
# A handshake message travels in one frame, never in fragments.
assert HANDSHAKE_BYTES <= FRAGMENT_BYTES
# "More than a fragment" is what makes a call large.
assert PLAIN_CALL_BYTES == FRAGMENT_BYTES
# The transport takes more than one fragment before it pauses, so the link stays busy
# while the next is cut; a small call waits behind at most this much of a large one.
assert WRITE_HIGH_WATER > FRAGMENT_BYTES
# Strangers before their HELLO buffer at most a MiB between them (each one handshake
# frame at most: a longer one is refused on its header).
assert MAX_AWAITING_HELLO * HANDSHAKE_BYTES <= 1 * MiB
# Any clock a peer's header may say is a float without rounding.
assert LATEST_CLOCK_MS < 2**53
# A starting node still answers /v0/status within a second (SPEC.md rule 1.1).
assert FIRST_CHECK_SECONDS < 1.0
# The furthest expiry, in ms from a clock that fits 47 bits, fits a record's u64 field.
assert LATEST_CLOCK_MS + MAX_TTL_SECONDS * 1000 < 2**64
