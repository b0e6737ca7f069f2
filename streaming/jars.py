"""Spark's Kafka connector jars, taken from a directory the operator names.

The job never runs Maven: ``make setup`` (or an image build) puts the jars in a directory,
and the job is pointed at it with ``--jars-dir`` or ``REBALANCE_MONITOR_JARS``. A source
checkout falls back to the directory ``make setup`` fills. ``python -m streaming.jars [DIR]``
prints the list comma-separated, the form ``spark-submit --jars`` takes.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

ENV_VAR = "REBALANCE_MONITOR_JARS"
CONNECTOR = "spark-sql-kafka-0-10"
# Where `make setup` resolves the jars in a source checkout (absent in an installed wheel).
CHECKOUT_JARS = Path(__file__).resolve().parent.parent / "build" / "jars"


class JarsNotFound(RuntimeError):
    """No usable connector jars: the message says which option or variable to set."""


def default_jars_dir() -> Path | None:
    """``$REBALANCE_MONITOR_JARS``, else the source checkout's build directory if it exists."""
    if os.environ.get(ENV_VAR):
        return Path(os.environ[ENV_VAR])
    built = CHECKOUT_JARS / f"spark-{pyspark_version()}"
    return built if built.is_dir() else None


def pyspark_version() -> str:
    import pyspark

    return pyspark.__version__


def connector_jars(jars_dir: Path | None) -> list[Path]:
    """The connector and the jars it needs that pyspark does not already ship.

    ``jars_dir`` None means the default above. Raises ``JarsNotFound`` when the directory is
    missing or holds no connector matching the installed pyspark.
    """
    folder = jars_dir or default_jars_dir()
    hint = f"pass --jars-dir DIR or set {ENV_VAR} to a directory holding Spark's Kafka connector jars"
    if folder is None:
        raise JarsNotFound(f"no Spark Kafka connector jars configured: {hint} (make setup fills build/jars)")
    if not folder.is_dir():
        raise JarsNotFound(f"jars directory {folder} does not exist: {hint}")
    version = pyspark_version()
    jars = sorted(folder.glob("*.jar"))
    connectors = [p.name for p in jars if p.name.startswith(f"{CONNECTOR}_")]
    if not any(name.endswith(f"-{version}.jar") for name in connectors):
        found = ", ".join(connectors) or "none"
        raise JarsNotFound(f"{folder} has no {CONNECTOR} jar for Spark {version} (found: {found}): {hint}")
    shipped = {artifact(p.name) for p in pyspark_jars().glob("*.jar")}
    return [p for p in jars if artifact(p.name) not in shipped]


def pyspark_jars() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "jars"


def artifact(jar_name: str) -> str:
    """Artifact id of a jar file name: ``kafka-clients-3.9.0.jar`` -> ``kafka-clients``."""
    return re.sub(r"-\d[\w.\-]*\.jar$", "", jar_name)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        jars = connector_jars(Path(argv[0]) if argv else None)
    except JarsNotFound as exc:
        print(f"streaming.jars: {exc}", file=sys.stderr)
        return 1
    print(",".join(str(p) for p in jars))
    return 0


if __name__ == "__main__":
    sys.exit(main())
