"""The rules of SPEC.md, read from the document itself: the kit and the spec tests'
collection check (tests/spec/conftest.py) share this one reading, so a rule number in a
test, in the report and in the spec can never drift apart.

A rule is a list item that opens with its anchor and number,
`- <a id="rule-3.5"></a>**3.5** Quorums that overlap ...`; its section is the number
before the dot; sections 1 to 5 and 14 on are the tiers of part one, every other one
`dht`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

# Each tier, and what its section of SPEC.md covers (the pytest marker's description).
TIER_DESCRIPTIONS = {
    "core": "SPEC.md section 1, one node's client API",
    "range": "SPEC.md section 2, /v0/entities on one node",
    "replication": "SPEC.md section 3, replicas=ack/from on 2 and 3 nodes",
    "durability": "SPEC.md section 4, kill -9, restart and graceful stop",
    "robustness": "SPEC.md section 5, bad input, slow and idle clients, bursts",
    "faults": "SPEC.md section 14, kill -9, pause, crash-restart, slow and cut links",
    "convergence": "SPEC.md section 15, a missed write reaches its replica unasked",
    "strict": "SPEC.md section 16, stricter than the course: large values and keys, "
    "any key's encoding, UTF-8 order, replicas the course never sends",
    "power": "SPEC.md section 17, one node's and every node's power cut under load",
    "partition": "SPEC.md section 18, partitions with clients on both sides: a node cut "
    "off, a bridge, one-way cuts",
    "clock": "SPEC.md section 19, one node's wall clock behind, ahead, stepped back, "
    "strobing, behind after a 2/2 write, two ahead then a restart: the later acknowledged "
    "write wins",
    "disk": "SPEC.md section 20, one node's volume filled to the last byte under load, then freed",
    "nemesis": "SPEC.md section 21, a seeded random schedule of every fault, one node at a "
    "time; a failing run shrunk to its smallest failing schedule",
    "dht": "SPEC.md sections 6 to 13, dht's own rules",
}
TIERS = tuple(TIER_DESCRIPTIONS)
# The tiers any implementation of the v0 API is graded on, the kit's choice; dht's own
# rules are checked by the repository's tests (tests/spec), not by the kit.
PART_ONE_TIERS = TIERS[:-1]
# The tiers that ask exactly what the course's own tests ask: the course's contract,
# which the report's first line judges.
COURSE_TIERS = ("core", "range", "replication")
# Sections 1-5 of SPEC.md are the first tiers of part one, in this order; from 14 on came
# later and are numbered after part two (6-13, dht's own).
_SECTION_TIERS = dict(
    zip((1, 2, 3, 4, 5, 14, 15, 16, 17, 18, 19, 20, 21), PART_ONE_TIERS, strict=True)
)
# The package carries the spec it grades by (package data; in a clone, a link to the
# repository's SPEC.md), so an installed kit needs no clone.
SPEC_PATH = Path(__file__).resolve().parent / "SPEC.md"

_RULE = re.compile(r'^- <a id="rule-(?P<number>\d+\.\d+)"></a>\*\*(?P=number)\*\* (?P<text>.*)$')
_SUMMARY_LENGTH = 110


@dataclass(frozen=True, slots=True)
class Rule:
    number: str  # "3.5"
    tier: str
    summary: str  # the rule's opening words, for a report line

    @property
    def anchor(self) -> str:
        return f"rule-{self.number}"


def tier_of(number: str) -> str:
    return _SECTION_TIERS.get(int(number.split(".")[0]), "dht")


def read_rules(text: str) -> dict[str, Rule]:
    """Every rule in a SPEC.md text, by number; raises ValueError on a number given twice."""
    rules: dict[str, Rule] = {}
    lines = text.splitlines()
    for index, line in enumerate(lines):
        match = _RULE.match(line)
        if match is None:
            continue
        number = match["number"]
        if number in rules:
            raise ValueError(f"rule {number} is numbered twice in SPEC.md")
        # The item's text goes on over its indented continuation lines.
        words = [match["text"]]
        for following in lines[index + 1 :]:
            if not following.startswith("  ") or following.lstrip().startswith("- "):
                break
            words.append(following.strip())
        rules[number] = Rule(number, tier_of(number), summarize(" ".join(words)))
    return rules


def summarize(text: str) -> str:
    """The first sentence, cut to a report line's length."""
    text = re.sub(r"</?[a-zA-Z][^<>]*>|\*\*", "", text)
    sentence = re.split(r"(?<=\.)\s+(?=[A-Z`])", text, maxsplit=1)[0]
    if len(sentence) <= _SUMMARY_LENGTH:
        return sentence
    return sentence[: _SUMMARY_LENGTH - 1].rsplit(" ", 1)[0] + "…"


def load_rules(path: Path = SPEC_PATH) -> dict[str, Rule]:
    return read_rules(path.read_text(encoding="utf-8"))
