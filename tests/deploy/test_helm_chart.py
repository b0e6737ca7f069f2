"""The Helm chart (deploy/helm/rebalance-monitor): lint, render, and what the rendered objects promise.

Rendered with ``helm template`` (`make setup` builds helm into build/bin when none is on PATH);
without helm these skip, and fail under CI (CI=true), as the promtool tests do. PyYAML is not
a dependency: YAML is read back through helm itself (its ``fromYaml``), see :func:`yaml_documents`.
The copies of the rules and the dashboard inside the chart are checked byte for byte without helm.
"""

from __future__ import annotations

import http.server
import importlib.util
import itertools
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "rebalance-monitor"
RULES = ROOT / "deploy" / "prometheus" / "rules.yml"
DASHBOARD = ROOT / "dashboards" / "rebalance-monitor.json"
REQUIRED = ["kafka.bootstrapServers=kafka-0.kafka:9092", "kafka.cluster=prod"]
SECURITY = ["kafka.security.enabled=true", "kafka.security.existingSecret=rebalance-monitor-kafka"]
EVERYTHING = ["serviceMonitor.enabled=true", "prometheusRule.enabled=true", "dashboard.enabled=true"]
CONFIG_PATH = "/etc/rebalance-monitor/kafka.properties"
OPERATOR_API = "monitoring.coreos.com/v1"
HELM_DOCS = [ROOT / "README.md", ROOT / "docs" / "operations.md"]
# Where else an image tag is written out for an operator to build or run.
IMAGE_DOCS = [CHART / "README.md", ROOT / "docs" / "deployment.md", ROOT / "deploy" / "Dockerfile",
              ROOT / "deploy" / "k8s" / "README.md", ROOT / "deploy" / "k8s" / "deployment.yaml"]


@pytest.fixture(scope="session")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """helm on PATH or built by `make setup` into build/bin; missing, the test skips (fails under CI)."""
    path = shutil.which("helm") or next((str(p) for p in [ROOT / "build" / "bin" / "helm"] if p.is_file()), None)
    if path is None:
        message = "helm not on PATH nor in build/bin: `make helm` (part of `make setup`) builds it with Go"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    home = tmp_path_factory.mktemp("helm-home")
    saved = {k: os.environ.get(k) for k in ("HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME")}
    for name in saved:  # no state read from or left in the user's home
        os.environ[name] = str(home / name.lower())
    yield path
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def run_helm(helm: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([helm, *args], capture_output=True, text=True, timeout=120)
    if check:
        assert result.returncode == 0, f"helm {' '.join(args)}:\n{result.stdout}\n{result.stderr}"
    return result


def yaml_documents(helm: str, text: str, workdir: Path) -> list[Any]:
    """Every non-empty YAML document of ``text``, parsed by helm's own YAML reader into JSON."""
    chart = workdir / "yaml-reader"
    (chart / "templates").mkdir(parents=True, exist_ok=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: yaml-reader\nversion: 0.0.1\n")
    (chart / "input.yaml").write_text(text)
    (chart / "templates" / "out.yaml").write_text(
        '{{- range $doc := regexSplit "(?m)^---[ \\t]*$" (.Files.Get "input.yaml") -1 }}\n'
        "{{ dict \"document\" (fromYaml $doc) | toJson }}\n"
        "{{- end }}\n")
    rendered = run_helm(helm, "template", "reader", str(chart)).stdout
    documents = []
    for line in rendered.splitlines():
        if line.startswith("{"):
            document = json.loads(line)["document"]
            assert "Error" not in document or len(document) > 1, f"helm could not read a document: {document}"
            if document:
                documents.append(document)
    return documents


def render(helm: str, tmp_path: Path, *values: str, operator_api: bool = True,
           files: tuple[Path, ...] = ()) -> dict[str, dict[str, Any]]:
    """The chart rendered with ``values`` (--set) over ``files`` (-f), by kind (one object per kind here),
    for a cluster that serves the Prometheus Operator's API unless ``operator_api`` is false."""
    args = [arg for file in files for arg in ("-f", str(file))]
    args += [arg for value in [*REQUIRED, *values] for arg in ("--set", value)]
    if operator_api:
        args += ["--api-versions", OPERATOR_API]
    text = run_helm(helm, "template", "monitor", str(CHART), "--namespace", "monitoring", *args).stdout
    objects: dict[str, dict[str, Any]] = {}
    for document in yaml_documents(helm, text, tmp_path):
        assert document["kind"] not in objects, f"two {document['kind']} objects"
        objects[document["kind"]] = document
    return objects


def documented_commands(doc: Path, variables: dict[str, str], containing: str = "helm install") -> list[list[str]]:
    """The commands of the first shell block in ``doc`` with ``containing``, as a shell would split them:
    lines joined at their backslashes, comments dropped, ``&&`` separating commands, and $NAME expanded
    from the block's NAME=value lines unless ``variables`` gives it."""
    block = next(b for b in re.findall(r"```sh\n(.*?)```", doc.read_text(), re.S) if containing in b)
    lines = [shlex.split(line, comments=True) for line in block.replace("\\\n", " ").splitlines()]
    assigned = dict(words[0].split("=", 1) for words in lines
                    if len(words) == 1 and re.fullmatch(r"[A-Z_]+=\S*", words[0]))
    assigned.update(variables)
    commands = [list(group) for words in lines for is_and, group in itertools.groupby(words, lambda w: w == "&&")
                if not is_and]
    return [[re.sub(r"\$([A-Za-z_]+)", lambda m: assigned[m.group(1)], word) for word in command]
            for command in commands if not (len(command) == 1 and "=" in command[0])]


def notes(helm: str, tmp_path: Path, *values: str, operator_api: bool = True) -> str:
    """The chart's NOTES.txt as `helm install` prints it. `helm template` leaves NOTES.txt out and
    `helm install --dry-run` asks a cluster for its version, so a copy of the chart renders it inside an
    ordinary template, as a JSON string."""
    chart = tmp_path / "notes-chart"
    shutil.rmtree(chart, ignore_errors=True)
    shutil.copytree(CHART, chart)
    text = (chart / "templates" / "NOTES.txt").read_text()
    (chart / "templates" / "NOTES.txt").unlink()
    (chart / "templates" / "_notes.tpl").write_text('{{- define "notes" -}}\n' + text + "{{- end }}\n")
    (chart / "templates" / "notes.yaml").write_text('{{ dict "notes" (include "notes" .) | toJson }}\n')
    args = [arg for value in [*REQUIRED, *values] for arg in ("--set", value)]
    args += ["--api-versions", OPERATOR_API] if operator_api else []
    rendered = run_helm(helm, "template", "monitor", str(chart), "--show-only", "templates/notes.yaml", *args)
    [line] = [line for line in rendered.stdout.splitlines() if line.startswith("{")]
    return str(json.loads(line)["notes"])


def container(objects: dict[str, dict[str, Any]]) -> dict[str, Any]:
    pod = objects["Deployment"]["spec"]["template"]["spec"]
    assert len(pod["containers"]) == 1
    return dict(pod["containers"][0])


# ------------------------------------------------------------------------------ copies (no helm)


@pytest.mark.parametrize(("source", "copy"), [(RULES, CHART / "files" / "rules.yml"),
                                              (DASHBOARD, CHART / "files" / "rebalance-monitor.json")])
def test_chart_copies_equal_their_sources(source: Path, copy: Path) -> None:
    assert copy.read_bytes() == source.read_bytes(), (
        f"{copy.relative_to(ROOT)} differs from {source.relative_to(ROOT)}: run python deploy/helm/sync_files.py")


def test_sync_script_reports_and_refreshes(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, str(ROOT / "deploy" / "helm" / "sync_files.py"), "--check"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def load_values_table() -> Any:
    """deploy/helm/values_table.py, a script rather than a package module."""
    spec = importlib.util.spec_from_file_location("values_table", ROOT / "deploy" / "helm" / "values_table.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_versions_agree() -> None:
    """pyproject.toml's version is the chart's appVersion (the default image tag, build_info's version label)
    and the image tag the install instructions build and deploy; its release is the chart's SemVer version."""
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    from packaging.version import Version

    assert str(Version(version)) == version, "a normalized PEP 440 version"
    chart = (CHART / "Chart.yaml").read_text()
    app_version = re.search(r'^appVersion: "([^"]+)"$', chart, re.M)
    assert app_version is not None and app_version.group(1) == version
    chart_version = re.search(r"^version: (\S+)$", chart, re.M)
    assert chart_version is not None and chart_version.group(1) == Version(version).base_version
    for doc in HELM_DOCS + IMAGE_DOCS:
        tags = re.findall(r"(?:kafka-rebalance-monitor:|\$IMAGE:|image\.tag=)([\w.-]+)", doc.read_text())
        assert tags and set(tags) == {version}, doc.name


def test_chart_readme_values_table_is_values_yaml() -> None:
    values_table = load_values_table()
    readme = (CHART / "README.md").read_text()
    assert values_table.readme(readme, (CHART / "values.yaml").read_text()) == readme, (
        "deploy/helm/rebalance-monitor/README.md's values table differs: run python deploy/helm/values_table.py")
    result = subprocess.run([sys.executable, str(ROOT / "deploy" / "helm" / "values_table.py"), "--check"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_values_table_rows_are_helms_values(helm: str, tmp_path: Path) -> None:
    """The table's reader of values.yaml against helm's: every value has a row (itself or a mapping holding
    it), every row is a value, and each row's default reads back as helm reads values.yaml."""
    values_table = load_values_table()
    rows = values_table.rows(values_table.parse((CHART / "values.yaml").read_text()))
    [values] = yaml_documents(helm, (CHART / "values.yaml").read_text(), tmp_path)

    def lookup(path: str) -> Any:
        node: Any = values
        for key in path.split("."):
            assert isinstance(node, dict) and key in node, f"row {path}: no such value"
            node = node[key]
        return node

    def leaves(node: Any, prefix: str = "") -> Iterator[str]:
        if isinstance(node, dict) and node:
            for key, child in node.items():
                yield from leaves(child, f"{prefix}.{key}" if prefix else key)
        else:
            yield prefix

    paths = {row.path for row in rows}
    for leaf in leaves(values):
        assert any(leaf == p or leaf.startswith(p + ".") for p in paths), f"{leaf} has no row"
    shown = [row for row in rows if not values_table.opened(row)]
    [defaults] = yaml_documents(helm, "".join(f"v{i}: {row.flow()}\n" for i, row in enumerate(shown)), tmp_path)
    for i, row in enumerate(shown):
        assert defaults[f"v{i}"] == lookup(row.path), row.path
    for row in rows:
        lookup(row.path)


# ------------------------------------------------------------------------------ helm


def test_helm_lint(helm: str) -> None:
    for values in ([], SECURITY, [*SECURITY, *EVERYTHING]):
        run_helm(helm, "lint", "--strict", str(CHART), *(a for v in [*REQUIRED, *values] for a in ("--set", v)))


def test_required_values_fail_with_a_message(helm: str) -> None:
    result = run_helm(helm, "template", "monitor", str(CHART), check=False)
    assert result.returncode != 0 and "kafka.bootstrapServers is required" in result.stderr
    result = run_helm(helm, "template", "monitor", str(CHART), "--set", REQUIRED[0], check=False)
    assert result.returncode != 0 and "kafka.cluster is required" in result.stderr
    result = run_helm(helm, "template", "monitor", str(CHART), *(a for v in REQUIRED for a in ("--set", v)),
                      "--set", "kafka.security.enabled=true", check=False)
    assert result.returncode != 0 and "kafka.security.existingSecret" in result.stderr


def test_default_render(helm: str, tmp_path: Path) -> None:
    objects = render(helm, tmp_path)
    assert set(objects) == {"ServiceAccount", "PersistentVolumeClaim", "Service", "Deployment", "Pod"}
    assert objects["Pod"]["metadata"]["annotations"]["helm.sh/hook"] == "test"
    assert objects["ServiceAccount"]["automountServiceAccountToken"] is False
    deployment = objects["Deployment"]["spec"]
    assert deployment["replicas"] == 1 and deployment["strategy"] == {"type": "Recreate"}
    pod = deployment["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    assert pod["serviceAccountName"] == objects["ServiceAccount"]["metadata"]["name"]
    claim = next(v for v in pod["volumes"] if v["name"] == "checkpoint")["persistentVolumeClaim"]["claimName"]
    assert claim == objects["PersistentVolumeClaim"]["metadata"]["name"]
    assert objects["PersistentVolumeClaim"]["spec"]["resources"]["requests"]["storage"] == "10Gi"
    monitor = container(objects)
    assert monitor["resources"] == {"requests": {"cpu": "2", "memory": "2Gi"}, "limits": {"memory": "3Gi"}}
    assert {"name": "metrics", "containerPort": 10308, "protocol": "TCP"} in monitor["ports"]
    service_ports = objects["Service"]["spec"]["ports"]
    assert service_ports == [{"name": "metrics", "port": 10308, "targetPort": "metrics", "protocol": "TCP"}]


def test_values_reach_the_objects(helm: str, tmp_path: Path) -> None:
    objects = render(helm, tmp_path, "checkpoint.size=50Gi", "checkpoint.storageClass=fast",
                     "lagGranularity=topic", "limits.maxSeries=300000", "limits.maxGroups=20000",
                     "extraArgs={--lag-append-time-topics,^mm2-}", "image.tag=9.9.9", *EVERYTHING,
                     "serviceMonitor.interval=1m", "serviceMonitor.scrapeTimeout=45s",
                     "serviceMonitor.sampleLimit=310000")
    pvc = objects["PersistentVolumeClaim"]["spec"]
    assert pvc["storageClassName"] == "fast" and pvc["resources"]["requests"]["storage"] == "50Gi"
    args = container(objects)["args"]
    pairs = dict(zip(args[::2], args[1::2], strict=True))
    assert pairs["--lag-granularity"] == "topic" and pairs["--max-series"] == "300000"
    assert pairs["--max-groups"] == "20000" and pairs["--lag-append-time-topics"] == "^mm2-"
    assert container(objects)["image"].endswith(":9.9.9")
    endpoint = objects["ServiceMonitor"]["spec"]["endpoints"][0]
    assert (endpoint["interval"], endpoint["scrapeTimeout"]) == ("1m", "45s")
    assert objects["ServiceMonitor"]["spec"]["sampleLimit"] == 310000


def test_extra_volumes_are_mounted(helm: str, tmp_path: Path) -> None:
    objects = render(helm, tmp_path, *SECURITY, "extraVolumes[0].name=metrics-tls",
                     "extraVolumes[0].secret.secretName=monitor-tls", "extraVolumeMounts[0].name=metrics-tls",
                     "extraVolumeMounts[0].mountPath=/etc/metrics-tls", "extraVolumeMounts[0].readOnly=true")
    pod = objects["Deployment"]["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["metrics-tls"] == {"name": "metrics-tls", "secret": {"secretName": "monitor-tls"}}
    assert {"checkpoint", "tmp", "kafka-config"} <= set(volumes)  # beside the chart's own
    mounts = {m["name"]: m for m in container(objects)["volumeMounts"]}
    assert mounts["metrics-tls"] == {"name": "metrics-tls", "mountPath": "/etc/metrics-tls", "readOnly": True}
    assert {"checkpoint", "tmp", "kafka-config"} <= set(mounts)


def test_config_file_from_values(helm: str, tmp_path: Path) -> None:
    """The config value becomes the job's --config TOML file, from a ConfigMap; the job's own parser reads
    it; a change of it changes the pod's checksum/config annotation (so `helm upgrade` restarts the job)."""
    from streaming.options import parse_args

    # Helm reads numbers in a values file as floats and in --set as integers: both must come out whole.
    values = tmp_path / "config-values.yaml"
    values.write_text(json.dumps({"config": {"dead-letter-max": 500, "lag-max-age-seconds": 0.5,
                                             "exclude-groups": '^tmp-|"quoted"\\.'}}))
    objects = render(helm, tmp_path, "config.lag-poll-seconds=5", "config.spark-conf[0]=spark.ui.enabled=false",
                     files=(values,))
    text = objects["ConfigMap"]["data"]["config.toml"]
    assert tomllib.loads(text) == {"dead-letter-max": 500, "lag-max-age-seconds": 0.5, "lag-poll-seconds": 5,
                                   "exclude-groups": '^tmp-|"quoted"\\.', "spark-conf": ["spark.ui.enabled=false"]}
    monitor = container(objects)
    args = monitor["args"]
    path = args[args.index("--config") + 1]
    mount = next(m for m in monitor["volumeMounts"] if path.startswith(m["mountPath"] + "/"))
    pod = objects["Deployment"]["spec"]["template"]
    volume = next(v for v in pod["spec"]["volumes"] if v["name"] == mount["name"])
    assert volume["configMap"]["name"] == objects["ConfigMap"]["metadata"]["name"] and mount["readOnly"] is True
    assert Path(path).name in objects["ConfigMap"]["data"]
    (tmp_path / "config.toml").write_text(text)
    args[args.index("--config") + 1] = str(tmp_path / "config.toml")
    options = parse_args(args, environ={})
    assert options.source.dead_letter_max == 500 and options.source.exclude_groups == '^tmp-|"quoted"\\.'
    assert options.lag.poll_seconds == 5.0 and options.lag.max_age_seconds == 0.5
    assert options.driver.spark_settings["spark.ui.enabled"] == "false"
    assert options.driver.spark_settings["spark.local.dir"] == "/tmp/spark"  # the chart's, kept
    checksum = pod["metadata"]["annotations"]["checksum/config"]
    changed = render(helm, tmp_path, "config.lag-poll-seconds=6", "config.spark-conf[0]=spark.ui.enabled=false",
                     files=(values,))["Deployment"]["spec"]["template"]["metadata"]["annotations"]
    assert len(checksum) == 64 and changed["checksum/config"] != checksum
    # No config, no ConfigMap and no --config (test_default_render lists the objects).
    assert "--config" not in container(render(helm, tmp_path))["args"]


@pytest.mark.parametrize("security", [False, True], ids=["plaintext", "security"])
def test_deployment_meets_the_restricted_pod_security_standard(helm: str, tmp_path: Path, security: bool) -> None:
    objects = render(helm, tmp_path, *(SECURITY if security else []))
    pod = objects["Deployment"]["spec"]["template"]["spec"]
    monitor = container(objects)
    context = {**pod["securityContext"], **monitor["securityContext"]}  # the container's wins
    assert context["runAsNonRoot"] is True
    assert isinstance(context["runAsUser"], int) and context["runAsUser"] > 0
    assert isinstance(context["runAsGroup"], int) and context["runAsGroup"] > 0
    assert monitor["securityContext"]["allowPrivilegeEscalation"] is False
    assert monitor["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert context["seccompProfile"] == {"type": "RuntimeDefault"}
    assert monitor["securityContext"]["readOnlyRootFilesystem"] is True
    assert not pod.get("hostNetwork") and not pod.get("hostPID") and not pod.get("hostIPC")
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert not [v for v in volumes.values() if "hostPath" in v]
    # Spark's scratch space: a writable emptyDir at /tmp, and Spark told to use it.
    tmp = next(m for m in monitor["volumeMounts"] if m["mountPath"] == "/tmp")
    assert "emptyDir" in volumes[tmp["name"]]
    env = {e["name"]: e.get("value") for e in monitor["env"]}
    assert env["SPARK_LOCAL_DIRS"].startswith("/tmp/")
    args = monitor["args"]
    assert "spark.local.dir=/tmp/spark" in [b for a, b in itertools.pairwise(args) if a == "--spark-conf"]


def test_probes(helm: str, tmp_path: Path) -> None:
    monitor = container(render(helm, tmp_path))
    for probe, path in (("startupProbe", "/-/healthy"), ("livenessProbe", "/-/healthy"),
                        ("readinessProbe", "/-/ready")):
        assert monitor[probe]["httpGet"] == {"path": path, "port": "metrics"}, probe


@pytest.mark.parametrize("status", [200, 503])
def test_helm_test_pod_asks_the_service_for_ready(helm: str, tmp_path: Path, status: int) -> None:
    """`helm test`'s pod runs the job's image and its Python (no curl there) against the Service's /-/ready:
    its command, run here against a stand-in server, succeeds on 200 and fails on 503."""
    objects = render(helm, tmp_path, "image.tag=9.9.9")
    pod = objects["Pod"]
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test" and pod["spec"]["restartPolicy"] == "Never"
    [probe] = pod["spec"]["containers"]
    assert probe["image"] == container(objects)["image"]
    assert probe["securityContext"] == container(objects)["securityContext"]
    assert pod["spec"]["securityContext"] == objects["Deployment"]["spec"]["template"]["spec"]["securityContext"]
    service = objects["Service"]
    url = f"http://{service['metadata']['name']}.monitoring.svc:{service['spec']['ports'][0]['port']}/-/ready"
    command = probe["command"]
    assert command[0] == "python" and command[-1] == url

    class Ready(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(status if self.path == "/-/ready" else 404)
            self.end_headers()
            self.wfile.write(b"ready\n" if status == 200 else b"behind\n")

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Ready)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        local = f"http://127.0.0.1:{server.server_address[1]}/-/ready"
        result = subprocess.run([sys.executable, *command[1:-1], local], capture_output=True, text=True, timeout=60)
    finally:
        server.shutdown()
        server.server_close()
    assert (result.returncode == 0) is (status == 200), result.stdout + result.stderr
    assert "Pod" not in render(helm, tmp_path, "tests.enabled=false")


def test_kafka_secret_is_a_mounted_file_never_an_argument_or_variable(helm: str, tmp_path: Path) -> None:
    objects = render(helm, tmp_path, *SECURITY, "extraEnv[0].name=TZ", "extraEnv[0].value=UTC")
    pod = objects["Deployment"]["spec"]["template"]["spec"]
    monitor = container(objects)
    args = monitor["args"]
    assert args[args.index("--kafka-config") + 1] == CONFIG_PATH
    assert not [a for a in args if a.startswith("--kafka.")], "client settings on the command line"
    assert not [e for e in monitor["env"] if "valueFrom" in e], "a Secret in the environment"
    assert not monitor.get("envFrom")
    text = json.dumps(monitor["env"]).lower()
    assert "jaas" not in text and "password" not in text
    mount = next(m for m in monitor["volumeMounts"] if m["mountPath"] == str(Path(CONFIG_PATH).parent))
    assert mount["readOnly"] is True
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    assert volume["secret"]["secretName"] == "rebalance-monitor-kafka"
    assert volume["secret"]["defaultMode"] & 0o007 == 0, "readable by others"
    assert "--kafka-config" not in container(render(helm, tmp_path))["args"]


def test_rendered_arguments_are_the_jobs_options(helm: str, tmp_path: Path) -> None:
    """The chart's command line parses with the job's own parser, to the values given."""
    from streaming.options import parse_args

    monitor = container(render(helm, tmp_path, "limits.maxGroups=5000"))
    assert monitor["command"] == ["rebalance-monitor", "run"]
    options = parse_args(monitor["args"], environ={})
    assert options.kafka.bootstrap_servers == "kafka-0.kafka:9092" and options.metrics.cluster == "prod"
    assert str(options.driver.checkpoint_dir) == "/data/checkpoint" and options.metrics.port == 10308
    assert options.groups.max_groups == 5000 and options.driver.spark_settings["spark.local.dir"] == "/tmp/spark"
    assert options.notes == ()  # neither the default cluster nor a relative checkpoint
    mounts = {m["mountPath"] for m in monitor["volumeMounts"]}
    assert "/data" in mounts and str(options.driver.checkpoint_dir).startswith("/data/")


def test_static_labels_and_family_filters_reach_the_jobs_options(helm: str, tmp_path: Path) -> None:
    """labels, metricsAllow and metricsDeny become --label, --metrics-allow and --metrics-deny; unset, no flag."""
    from streaming.options import parse_args

    values = tmp_path / "labels.yaml"
    values.write_text('labels: {region: eu-west-1, env: prod, shard: 3}\n'
                      'metricsAllow: "kafka_consumergroup_.*|rebalance_monitor_.*"\nmetricsDeny: "process_.*"\n')
    options = parse_args(container(render(helm, tmp_path, files=(values,)))["args"], environ={})
    assert options.metrics.static_labels == (("env", "prod"), ("region", "eu-west-1"), ("shard", "3"))
    assert (options.metrics.allow, options.metrics.deny) == ("kafka_consumergroup_.*|rebalance_monitor_.*",
                                                              "process_.*")
    args = container(render(helm, tmp_path))["args"]
    assert not {"--label", "--metrics-allow", "--metrics-deny"} & set(args)


def test_service_monitor_selects_the_service(helm: str, tmp_path: Path) -> None:
    objects = render(helm, tmp_path, *EVERYTHING)
    monitor, service = objects["ServiceMonitor"], objects["Service"]
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["monitoring"]}
    endpoint = monitor["spec"]["endpoints"][0]
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]} and endpoint["port"] == "metrics"
    assert endpoint["path"] == "/metrics" and endpoint["honorLabels"] is True
    assert (endpoint["interval"], endpoint["scrapeTimeout"]) == ("30s", "20s")
    max_series = int(dict(zip(container(objects)["args"][::2], container(objects)["args"][1::2],
                              strict=True))["--max-series"])
    assert monitor["spec"]["sampleLimit"] > max_series, "Prometheus would drop the scrape before the job's cap"
    # MonitorDown (rules.yml) matches job="kafka-rebalance-monitor", whatever the release's name.
    assert {"action": "replace", "targetLabel": "job", "replacement": "kafka-rebalance-monitor"} in endpoint[
        "relabelings"]
    assert 'job="kafka-rebalance-monitor"' in RULES.read_text()
    # The pods the Service selects are the Deployment's.
    pod_labels = objects["Deployment"]["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()


def test_operator_objects_need_the_operators_api(helm: str, tmp_path: Path) -> None:
    """Enabled without the monitoring.coreos.com CRDs, the ServiceMonitor and PrometheusRule are left out
    (an install would otherwise fail on kinds the cluster does not know) and the notes say why."""
    kinds = {"ServiceMonitor", "PrometheusRule"}
    assert kinds <= set(render(helm, tmp_path, *EVERYTHING))
    without = render(helm, tmp_path, *EVERYTHING, operator_api=False)
    assert not kinds & set(without) and "ConfigMap" in without  # the dashboard needs no CRD
    assert not kinds & set(render(helm, tmp_path))  # the API alone does not enable them
    assert "does not serve monitoring.coreos.com/v1" in notes(helm, tmp_path, *EVERYTHING, operator_api=False)
    assert "does not serve monitoring.coreos.com/v1" not in notes(helm, tmp_path, *EVERYTHING)


def test_service_monitor_scrape_settings(helm: str, tmp_path: Path) -> None:
    """TLS, basic auth and relabelings pass through to the endpoint; the job label's relabeling stays first."""
    endpoint = render(
        helm, tmp_path, "serviceMonitor.enabled=true", "serviceMonitor.scheme=https",
        "serviceMonitor.tlsConfig.ca.secret.name=monitor-tls", "serviceMonitor.tlsConfig.ca.secret.key=ca.crt",
        "serviceMonitor.tlsConfig.serverName=monitor.monitoring.svc",
        "serviceMonitor.basicAuth.username.name=monitor-auth", "serviceMonitor.basicAuth.username.key=username",
        "serviceMonitor.basicAuth.password.name=monitor-auth", "serviceMonitor.basicAuth.password.key=password",
        "serviceMonitor.relabelings[0].targetLabel=region", "serviceMonitor.relabelings[0].replacement=eu-west-1",
        "serviceMonitor.metricRelabelings[0].action=drop",
        "serviceMonitor.metricRelabelings[0].sourceLabels[0]=__name__",
        "serviceMonitor.metricRelabelings[0].regex=rebalance_monitor_jvm_.*",
    )["ServiceMonitor"]["spec"]["endpoints"][0]
    assert endpoint["scheme"] == "https"
    assert endpoint["tlsConfig"] == {"ca": {"secret": {"name": "monitor-tls", "key": "ca.crt"}},
                                     "serverName": "monitor.monitoring.svc"}
    assert endpoint["basicAuth"] == {"username": {"name": "monitor-auth", "key": "username"},
                                     "password": {"name": "monitor-auth", "key": "password"}}
    assert endpoint["relabelings"] == [
        {"action": "replace", "targetLabel": "job", "replacement": "kafka-rebalance-monitor"},
        {"targetLabel": "region", "replacement": "eu-west-1"}]
    assert endpoint["metricRelabelings"] == [
        {"action": "drop", "sourceLabels": ["__name__"], "regex": "rebalance_monitor_jvm_.*"}]
    plain = render(helm, tmp_path, "serviceMonitor.enabled=true")["ServiceMonitor"]["spec"]["endpoints"][0]
    assert not {"scheme", "tlsConfig", "basicAuth", "metricRelabelings"} & set(plain)


@pytest.mark.parametrize("doc", HELM_DOCS, ids=[d.name for d in HELM_DOCS])
def test_documented_install_is_selected_by_kube_prometheus_stack(helm: str, tmp_path: Path, doc: Path) -> None:
    """The install command of the README and of docs/operations.md, as written, beside a kube-prometheus-stack
    released as `kps`: its Prometheus selects ServiceMonitors (serviceMonitorSelector) and rules
    (ruleSelector) by matchLabels release=kps, and the pod runs the image the block built and pushed."""
    commands = documented_commands(doc, {"KPS_RELEASE": "kps"})
    [(name, chart, *args)] = [c[2:] for c in commands if c[:2] == ["helm", "install"]]
    assert (ROOT / chart).resolve() == CHART
    text = run_helm(helm, "template", name, str(CHART), *args, "--api-versions", OPERATOR_API).stdout
    objects = {d["kind"]: d for d in yaml_documents(helm, text, tmp_path)}
    kps_selector = {"release": "kps"}
    for kind in ("ServiceMonitor", "PrometheusRule"):
        assert kps_selector.items() <= objects[kind]["metadata"]["labels"].items(), kind
    assert objects["ConfigMap"]["metadata"]["labels"]["grafana_dashboard"] == "1"
    # The image the block builds and pushes is the one the pod runs (not the chart's local default).
    [built] = [c[c.index("-t") + 1] for c in commands if c[:2] in (["docker", "build"], ["podman", "build"])] + [
        w.removeprefix("IMAGE=") for c in commands if c[:2] == ["make", "image"] for w in c if w.startswith("IMAGE=")]
    assert ["docker", "push", built] in commands or ["podman", "push", built] in commands
    assert container(objects)["image"] == built and "/" in built
    # Without the label, the install notes say what it is for.
    assert "release=<its release name>" in notes(helm, tmp_path, *EVERYTHING)
    labelled = [f"{kind}.additionalLabels.release=kps" for kind in ("serviceMonitor", "prometheusRule")]
    assert "release=<its release name>" not in notes(helm, tmp_path, *EVERYTHING, *labelled)


def test_rules_and_dashboard_once_for_many_clusters(helm: str, tmp_path: Path) -> None:
    """docs/operations.md's many-clusters block: a release of the rules and the dashboard alone (no Kafka
    settings needed), and monitor releases without them, whose job label the shared rules match."""
    commands = documented_commands(ROOT / "docs" / "operations.md", {
        "KPS_RELEASE": "kps", "IMAGE": "registry.example.com/monitor", "cluster": "prod-eu"},
        containing="monitor.enabled=false")
    installs = [c[2:] for c in commands if c[:2] == ["helm", "install"]]
    assert len(installs) == 2
    rendered = []
    for name, chart, *args in installs:
        assert (ROOT / chart).resolve() == CHART
        text = run_helm(helm, "template", name, str(CHART), *args, "--api-versions", OPERATOR_API).stdout
        rendered.append({d["kind"]: d for d in yaml_documents(helm, text, tmp_path)})
    shared, monitor = rendered
    assert set(shared) == {"PrometheusRule", "ConfigMap"}
    assert shared["PrometheusRule"]["metadata"]["labels"]["release"] == "kps"
    assert "PrometheusRule" not in monitor and "ConfigMap" not in monitor
    assert {"Deployment", "Service", "ServiceMonitor"} <= set(monitor)
    assert monitor["ServiceMonitor"]["metadata"]["labels"]["release"] == "kps"
    [job] = [r["replacement"] for r in monitor["ServiceMonitor"]["spec"]["endpoints"][0]["relabelings"]
             if r.get("targetLabel") == "job"]
    alerts = {r["alert"]: r for g in shared["PrometheusRule"]["spec"]["groups"] for r in g["rules"] if "alert" in r}
    assert alerts["MonitorDown"]["expr"].rstrip().endswith(f'or up{{job="{job}"}} == 0')
    args = container(monitor)["args"]
    assert args[args.index("--cluster") + 1] == "prod-eu"
    assert "only the rules and the dashboard" in notes(helm, tmp_path, "monitor.enabled=false",
                                                        "prometheusRule.enabled=true", "dashboard.enabled=true")


def test_prometheus_rule_is_rules_yml(helm: str, tmp_path: Path) -> None:
    """With the defaults, the rules are rules.yml's (the chart reads its copy as data and writes it back)."""
    rule = render(helm, tmp_path, "prometheusRule.enabled=true")["PrometheusRule"]
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    [source] = yaml_documents(helm, RULES.read_text(), tmp_path)
    assert rule["spec"]["groups"] == source["groups"]
    assert list(rule["spec"]) == ["groups"]


CUSTOM_RULES = ["prometheusRule.enabled=true", "prometheusRule.runbookUrl=https://wiki.example.com/kafka/runbooks/",
                "prometheusRule.disabled.MonitorAbsent=true", "prometheusRule.disabled.MonitorDecodeErrors=false",
                "prometheusRule.disabled.GroupRebalanceStuck=true", "prometheusRule.disabled.GroupRecordsLost=true",
                "prometheusRule.disabled.GroupUnhealthy=true", "prometheusRule.additionalRuleLabels.team=kafka",
                "prometheusRule.additionalRuleLabels.severity=info", "prometheusRule.jobName=kafka-monitor-eu"]


def test_prometheus_rule_values_reach_the_rules(helm: str, tmp_path: Path) -> None:
    [source] = yaml_documents(helm, RULES.read_text(), tmp_path)
    groups = render(helm, tmp_path, *CUSTOM_RULES)["PrometheusRule"]["spec"]["groups"]
    rules = [r for g in groups for r in g["rules"]]
    alerts = [r for r in rules if "alert" in r]
    source_rules = [r for g in source["groups"] for r in g["rules"]]
    disabled = {"MonitorAbsent", "GroupRebalanceStuck", "GroupRecordsLost", "GroupUnhealthy"}
    assert {r["alert"] for r in alerts} == {r["alert"] for r in source_rules if "alert" in r} - disabled
    assert "MonitorDecodeErrors" in {r["alert"] for r in alerts}  # false keeps it
    # A group left with no rule is left out (kafka-consumergroup.live held the three Group* alerts).
    live = "kafka-consumergroup.live"
    assert [g["name"] for g in groups] == [g["name"] for g in source["groups"] if g["name"] != live]
    for alert in alerts:
        source_alert = next(r for r in source_rules if r.get("alert") == alert["alert"]
                            and r["labels"]["severity"] == alert["labels"]["severity"])
        assert alert["labels"] == {**source_alert["labels"], "team": "kafka"}, "the alert's own severity wins"
        assert alert["annotations"]["runbook_url"] == f"https://wiki.example.com/kafka/runbooks/{alert['alert']}.md"
        assert 'job="kafka-rebalance-monitor"' not in alert["expr"]
    down = next(r for r in alerts if r["alert"] == "MonitorDown")
    assert down["expr"].rstrip().endswith('or up{job="kafka-monitor-eu"} == 0')
    # The recording rules are untouched: labels on them would change the series they write.
    assert [r for r in rules if "record" in r] == [r for r in source_rules if "record" in r]


def test_prometheus_rule_job_follows_the_service_monitor(helm: str, tmp_path: Path) -> None:
    objects = render(helm, tmp_path, *EVERYTHING, "serviceMonitor.jobName=kafka-eu")
    assert {"action": "replace", "targetLabel": "job", "replacement": "kafka-eu"} in objects[
        "ServiceMonitor"]["spec"]["endpoints"][0]["relabelings"]
    alerts = {r["alert"]: r for g in objects["PrometheusRule"]["spec"]["groups"] for r in g["rules"] if "alert" in r}
    assert alerts["MonitorDown"]["expr"].rstrip().endswith('or up{job="kafka-eu"} == 0')
    # MonitorAbsent knows a monitor by its build info, under any job name
    assert alerts["MonitorAbsent"]["expr"] == 'absent(rebalance_monitor_build_info)'


@pytest.mark.parametrize("values", [[], CUSTOM_RULES], ids=["defaults", "custom"])
def test_rendered_rules_pass_promtool(helm: str, promtool: str, tmp_path: Path, values: list[str]) -> None:
    """The PrometheusRule's spec is a Prometheus rule file (JSON is YAML): promtool 2 and 3 accept it."""
    spec = render(helm, tmp_path, "prometheusRule.enabled=true", *values)["PrometheusRule"]["spec"]
    rules = tmp_path / "rendered-rules.yml"
    rules.write_text(json.dumps(spec, indent=1))
    result = subprocess.run([promtool, "check", "rules", str(rules)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_dashboard_config_map(helm: str, tmp_path: Path) -> None:
    config_map = render(helm, tmp_path, "dashboard.enabled=true", "dashboard.annotations.grafana_folder=Kafka")[
        "ConfigMap"]
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert config_map["metadata"]["annotations"] == {"grafana_folder": "Kafka"}
    assert json.loads(config_map["data"]["rebalance-monitor.json"]) == json.loads(DASHBOARD.read_text())
