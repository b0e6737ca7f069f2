"""docs/operations.md and the README name every option the commands have, and no option they lack."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from streaming.advisor.command import advise_parser
from streaming.cli import dead_letters_parser, history_parser
from streaming.options import build_parser

ROOT = Path(__file__).resolve().parents[2]
OPERATIONS = ROOT / "docs" / "operations.md"
DOCS = [OPERATIONS, ROOT / "README.md"]
# Flags these documents name that belong to other tools, each with the reason it is there.
OTHER_TOOLS = {
    "--command-config": "Kafka's CLI tools (kafka-consumer-groups, kafka-acls): their client settings file",
    "--describe": "kafka-consumer-groups --describe, the tool the job's lag is checked against",
    "--group": "kafka-consumer-groups and kafka-acls; also history's and advise's own (checked below)",
    "--add": "kafka-acls, the ACLs the job's principal needs",
    "--allow-principal": "kafka-acls",
    "--operation": "kafka-acls",
    "--resource-pattern-type": "kafka-acls",
    "--set": "helm install --set, the chart's values",
    "--api-versions": "helm template --api-versions, for the Prometheus Operator's objects",
    "--from-file": "kubectl create secret --from-file, the Kafka client settings' Secret",
    **dict.fromkeys(("--workloads", "--fresh-repeats", "--no-baselines", "--fresh-driver-memory", "--fresh-job-args"),
                    "python -m benchmarks.job_bench, the command beside the sizing figures"),
}
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*(?:\.[a-z0-9.-]*[a-z0-9])?")


def long_options(*parsers: argparse.ArgumentParser, hidden: bool = True) -> set[str]:
    return {o for parser in parsers for a in parser._actions for o in a.option_strings
            if o.startswith("--") and (hidden or a.help != argparse.SUPPRESS)}


def test_every_run_option_is_in_the_options_table() -> None:
    table = {m.group(1) for m in re.finditer(r"^\| `(--[a-z0-9.-]+)` \|", OPERATIONS.read_text(), re.M)}
    options = long_options(build_parser(), hidden=False) - {"--help", "--version"}  # deprecated ones are hidden
    assert options - table == set(), "options missing from docs/operations.md's table"
    assert table - options == set(), "rows of docs/operations.md's table that are no option"


def test_every_flag_the_docs_name_exists() -> None:
    known = long_options(build_parser(), history_parser({}), dead_letters_parser({}), advise_parser())
    named = {(m.group(0), doc.name) for doc in DOCS for text in [doc.read_text()] for m in FLAG.finditer(text)
             if text[m.end():m.end() + 1] != "." and not m.group(0).startswith("--kafka.")}  # --kafka.<name>: any
    unknown = {(flag, doc) for flag, doc in named if flag not in known and flag not in OTHER_TOOLS}
    assert unknown == set()
    assert {flag for flag, _ in named} >= set(OTHER_TOOLS), "a reason kept for a flag no doc names any more"
