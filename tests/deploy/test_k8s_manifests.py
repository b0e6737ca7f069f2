"""The kustomize base (deploy/k8s): one job per checkpoint, the Kafka secret as a mounted file, the
`restricted` Pod Security Standard, probes on /-/healthy and /-/ready, a token-less ServiceAccount.

Text checks run everywhere; the structural ones read the YAML through helm (see test_helm_chart.py)
and skip without it (fail under CI).
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Any

from tests.deploy.test_helm_chart import helm, yaml_documents  # noqa: F401  (helm: the fixture)

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
CONFIG_PATH = "/etc/rebalance-monitor/kafka.properties"


def arguments(deployment: str) -> list[str]:
    block = deployment.split("args:", 1)[1].split("env:", 1)[0]
    return [value.strip('"') for value in re.findall(r"^ {12}- (.+)$", block, re.M)]


def test_k8s_one_job_per_checkpoint() -> None:
    deployment = (K8S / "deployment.yaml").read_text()
    pvc = (K8S / "pvc.yaml").read_text()
    service = (K8S / "service.yaml").read_text()
    assert re.search(r"^  replicas: 1$", deployment, re.M)
    assert re.search(r"^  strategy:\n    type: Recreate$", deployment, re.M)
    claim = re.search(r"claimName: (\S+)", deployment)
    assert claim and re.search(rf"^kind: PersistentVolumeClaim\n(.*\n)*?  name: {claim.group(1)}$", pvc, re.M)
    assert "mountPath: /data\n" in deployment
    pairs = dict(zip(arguments(deployment)[::2], arguments(deployment)[1::2], strict=True))
    assert pairs["--bootstrap-server"] == "$(KAFKA_BOOTSTRAP)"
    assert pairs["--checkpoint-dir"] == "/data/checkpoint"
    assert pairs["--metrics-port"] == "10308"
    assert re.search(r"requests:\n\s+cpu: \"2\"\n\s+memory: 2Gi\n\s+limits:\n\s+memory: 3Gi", deployment)
    assert 'prometheus.io/scrape: "true"' in service and 'prometheus.io/port: "10308"' in service
    kustomization = (K8S / "kustomization.yaml").read_text()
    listed = re.findall(r"^  - (\S+)$", kustomization, re.M)
    for name in listed:
        assert (K8S / name).is_file(), name
    assert "secret.example.yaml" not in listed and "serviceaccount.yaml" in listed


def test_k8s_arguments_are_the_jobs_options() -> None:
    """The Deployment's command line parses with the job's parser (the config file aside)."""
    from streaming.options import parse_args

    args = arguments((K8S / "deployment.yaml").read_text())
    assert args[args.index("--kafka-config") + 1] == CONFIG_PATH
    del args[args.index("--kafka-config"):args.index("--kafka-config") + 2]
    options = parse_args(args, environ={})
    assert str(options.driver.checkpoint_dir) == "/data/checkpoint" and options.metrics.port == 10308
    assert options.driver.spark_settings["spark.local.dir"] == "/tmp/spark"


def test_k8s_no_secret_on_the_command_line_or_in_the_environment() -> None:
    deployment = (K8S / "deployment.yaml").read_text()
    assert not [a for a in arguments(deployment) if a.startswith("--kafka.")]
    assert "secretKeyRef" not in deployment and "secretRef" not in deployment
    assert not re.search(r"jaas|password", deployment, re.I)
    configmap = (K8S / "configmap.yaml").read_text()
    assert not re.search(r"^\s+\w*(JAAS|PASSWORD|SASL)\w*:", configmap, re.M)
    example = (K8S / "secret.example.yaml").read_text()
    assert "kafka.properties: |" in example and "name: kafka-rebalance-monitor-kafka" in example


def structured(helm_path: str, tmp_path: Path) -> dict[str, dict[str, Any]]:
    objects = {}
    for name in re.findall(r"^  - (\S+)$", (K8S / "kustomization.yaml").read_text(), re.M):
        for document in yaml_documents(helm_path, (K8S / name).read_text(), tmp_path):
            objects[document["kind"]] = document
    return objects


def test_k8s_restricted_pod_security_and_probes(helm: str, tmp_path: Path) -> None:  # noqa: F811
    objects = structured(helm, tmp_path)
    assert objects["ServiceAccount"]["automountServiceAccountToken"] is False
    pod = objects["Deployment"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == objects["ServiceAccount"]["metadata"]["name"]
    assert pod["automountServiceAccountToken"] is False
    [monitor] = pod["containers"]
    context = {**pod["securityContext"], **monitor["securityContext"]}
    assert context["runAsNonRoot"] is True and context["runAsUser"] > 0 and context["runAsGroup"] > 0
    assert context["seccompProfile"] == {"type": "RuntimeDefault"}
    assert monitor["securityContext"]["allowPrivilegeEscalation"] is False
    assert monitor["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert monitor["securityContext"]["readOnlyRootFilesystem"] is True
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m for m in monitor["volumeMounts"]}
    assert "emptyDir" in volumes[mounts["/tmp"]["name"]]
    config = mounts[str(Path(CONFIG_PATH).parent)]
    assert config["readOnly"] is True
    assert volumes[config["name"]]["secret"]["secretName"] == "kafka-rebalance-monitor-kafka"
    assert volumes[config["name"]]["secret"]["defaultMode"] & 0o007 == 0
    env = {e["name"]: e for e in monitor["env"]}
    assert env["SPARK_LOCAL_DIRS"]["value"].startswith("/tmp/")
    assert not [e for e in env.values() if "valueFrom" in e]
    assert "spark.local.dir=/tmp/spark" in [b for a, b in itertools.pairwise(monitor["args"]) if a == "--spark-conf"]
    for probe, path in (("startupProbe", "/-/healthy"), ("livenessProbe", "/-/healthy"),
                        ("readinessProbe", "/-/ready")):
        assert monitor[probe]["httpGet"] == {"path": path, "port": "metrics"}, probe
    service = objects["Service"]
    assert service["spec"]["selector"].items() <= objects["Deployment"]["spec"]["template"]["metadata"][
        "labels"].items()
    assert service["spec"]["ports"][0]["name"] == "metrics"
