"""What the source and decode stage read: the topic, where a new checkpoint starts, which groups."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from streaming.settings import Config, flag, not_negative, positive, setting

# The job's own Kafka source consumer has a group id under this prefix; it joins that group only when
# it subscribes (a topic not there yet at the query's start; see source_options). Excluded from the
# metrics by default.
JOB_GROUP_PREFIX = "rebalance-monitor-"
DEFAULT_EXCLUDE = f"^{re.escape(JOB_GROUP_PREFIX)}"
STARTING_OFFSETS = ("earliest", "latest")
# Python-only regex syntax: Spark's rlike compiles with java.util.regex, which rejects or
# reads these differently. Caught before any JVM starts; the source checks the rest in the JVM.
PYTHON_ONLY_REGEX = {
    "(?P<": "Java names groups (?<name>...)",
    "(?P=": "Java back-references a named group as \\k<name>",
    "(?#": "Java has no inline comments",
    "\\Z": "Java's \\Z also matches before a final line break; use \\z",
}


@dataclass(frozen=True)
class SourceConfig(Config):
    topic: str = field(default="__consumer_offsets", metadata=setting(
        "topic to read; any topic carrying records in the __consumer_offsets format (replays, synthetic load)"))
    starting_offsets: str = field(default="earliest", metadata=setting(
        "where a NEW checkpoint starts; earliest rebuilds every group's latest state from the compacted topic",
        choices=STARTING_OFFSETS))
    include_groups: str = field(default=".*", metadata=setting(
        "Java regex (Spark rlike): only groups matching it"))
    exclude_groups: str = field(default=DEFAULT_EXCLUDE, metadata=setting(
        "Java regex (Spark rlike): groups to leave out; the default leaves out the job's own consumer group"))
    max_offsets_per_trigger: int | None = field(default=None, metadata=setting(
        "cap records per micro-batch (catching up on a large topic)", type=int))
    dead_letter_max: int = field(default=1000, metadata=setting(
        "undecodable records kept as a sample for inspection", type=int))

    def problems(self) -> list[str]:
        problems = [*positive(self, "max_offsets_per_trigger"), *not_negative(self, "dead_letter_max")]
        if self.starting_offsets not in STARTING_OFFSETS:
            problems.append(f"{flag(self, 'starting_offsets')} must be one of {', '.join(STARTING_OFFSETS)}")
        problems += [f"{flag(self, name)} {pattern!r}: {why}" for name in ("include_groups", "exclude_groups")
                     for pattern in [getattr(self, name)]
                     for construct, why in PYTHON_ONLY_REGEX.items() if construct in pattern]
        return problems
