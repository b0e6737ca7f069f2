"""deploy/Dockerfile and deploy/image/base.sh as text: what the image holds (make test builds it with
``make image`` and tests/scenarios/test_image.py runs it; make bench-image measures it)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = (ROOT / "deploy" / "Dockerfile").read_text()


def stages() -> dict[str, str]:
    """Each stage's text by name (the last one, the image itself, as "final")."""
    parts = re.split(r"^FROM ", DOCKERFILE, flags=re.M)[1:]
    named = {}
    for part in parts:
        header = part.splitlines()[0].split()
        named[header[2] if len(header) == 3 else "final"] = part
    return named


def apt_packages(stage: str) -> set[str]:
    installs = re.findall(r"apt-get install -y --no-install-recommends ((?:[^&\\]|\\\n)+)", stage)
    return {word for install in installs for word in install.replace("\\\n", " ").split()}


def test_image_holds_what_the_job_and_the_runbooks_need() -> None:
    final = stages()["final"]
    assert {"openjdk-17-jre-headless", "python3", "procps", "curl", "ca-certificates", "krb5-user",
            "libgssapi-krb5-2"} <= apt_packages(final)
    assert not {"gcc", "libkrb5-dev", "python3-dev", "maven"} & apt_packages(final), "build tools stay in stages"
    assert "COPY --from=venv /opt/rebalance-monitor/venv" in final and "COPY --from=jars /jars" in final
    assert re.search(r'pip install [^\n]*\. "gssapi==\$\{GSSAPI_VERSION\}"', stages()["venv"])


def test_image_stays_restricted_and_read_only_friendly() -> None:
    final = stages()["final"]
    assert "USER 1000" in final and "--uid 1000" in final
    assert "PYTHONDONTWRITEBYTECODE=1" in final, "nothing written under the read-only root at run time"
    assert "build-ca" not in final, "a build proxy's CA is trusted by the build stages only"


def test_every_stage_starts_from_the_base_argument() -> None:
    assert DOCKERFILE.index("ARG BASE=") < DOCKERFILE.index("FROM ")
    froms = re.findall(r"^FROM (\S+)", DOCKERFILE, re.M)
    assert froms[0] == "${BASE}" and all(f in ("${BASE}", *stages()) for f in froms)


def test_base_is_debian_minbase_from_debians_archive() -> None:
    script = (ROOT / "deploy" / "image" / "base.sh").read_text()
    assert "debootstrap --variant=minbase" in script and "http://deb.debian.org/debian" in script
    assert re.search(r"^SUITE=bookworm$", script, re.M), "the Dockerfile's apt packages are bookworm's"


def test_image_carries_amazon_msks_iam_login_module_at_one_pinned_version() -> None:
    jars = stages()["jars"]
    pins = re.findall(r"^ARG AWS_MSK_IAM_AUTH_VERSION=(\d+\.\d+\.\d+)$", DOCKERFILE, re.M)
    assert len(pins) == 1, "the version is pinned in one place"
    # The "all" classifier: the login module with the AWS SDK it signs with, into the jars directory the job reads.
    assert re.search(r"mvn [^\n]*dependency:copy -DoutputDirectory=/jars \\\n\s*"
                     r"-Dartifact=software\.amazon\.msk:aws-msk-iam-auth:\$\{AWS_MSK_IAM_AUTH_VERSION\}:jar:all$",
                     jars, re.M)
    assert "ENV REBALANCE_MONITOR_JARS=/opt/rebalance-monitor/jars" in stages()["final"]
    pom = (ROOT / "deploy" / "jvm" / "pom.xml").read_text()
    assert "aws-msk-iam-auth" not in pom, "the tests' Spark class path stays without it"


def test_image_signs_msk_iam_with_the_botocore_the_tests_sign_with() -> None:
    """The job's own clients need botocore for AWS_MSK_IAM (they refuse it otherwise): the image installs the
    version pyproject.toml's test extra pins, which tests/unit/cluster/test_msk_iam.py checks the signing of."""
    pin = re.search(r"^ARG BOTOCORE_VERSION=(\S+)$", DOCKERFILE, re.M)
    tested = re.search(r'"botocore==([^"]+)"', (ROOT / "pyproject.toml").read_text())
    assert pin and tested and pin[1] == tested[1]
    assert re.search(r'pip install [^\n]*\. "gssapi==\$\{GSSAPI_VERSION\}" \\\n\s*"botocore==\$\{BOTOCORE_VERSION\}"',
                     stages()["venv"])
