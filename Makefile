# Every target sets up what it needs: a fresh clone runs `make test` or `make run` directly.
PYTHON ?= python3
VENV := .venv
# KAFKA_VERSION=3.9.2 make test runs the same suite against a 3.x broker.
export KAFKA_VERSION
# SPARK_VERSION=4.0.0 make test runs it on another supported Spark line: that line's pins
# (deploy/python/spark-4.0.0.txt) over pyproject.toml's, in a virtualenv of its own (.venv-spark-4.0.0),
# with the connector jars in build/jars/spark-4.0.0. Unset, it is deploy/jvm/pom.xml's spark.version,
# which pyproject.toml pins, in .venv.
SPARK_DEFAULT := $(shell sed -n 's:.*<spark.version>\(.*\)</spark.version>.*:\1:p' deploy/jvm/pom.xml)
SPARK_VERSION ?= $(SPARK_DEFAULT)
export SPARK_VERSION
SPARK_PINS := deploy/python/spark-$(SPARK_VERSION).txt
ifneq ($(SPARK_VERSION),$(SPARK_DEFAULT))
VENV := .venv-spark-$(SPARK_VERSION)
endif
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup demo-setup jars class-archive prometheus prometheus3 helm wheel image image-tools test-image bench-image test test-fast lint run screenshot bench bench-job bench-soak soak-trust fuzz kafka-up kafka-down clean

# What the demo needs (`make run`); `setup` adds the test tools, Prometheus 3 and Helm, built from source.
demo-setup: $(STAMP) jars prometheus class-archive

setup: demo-setup prometheus3 helm

$(STAMP): pyproject.toml $(SPARK_PINS)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	$(PY) -m pip install --quiet --no-deps --no-warn-conflicts -r $(SPARK_PINS)
	touch $@

deploy/python/spark-%.txt:
	@echo "SPARK_VERSION=$* is not a supported Spark line; supported:" \
	     "$(patsubst deploy/python/spark-%.txt,%,$(wildcard deploy/python/spark-*.txt))" >&2; exit 1

# Spark's Kafka connector (the job's --jars-dir) and the broker jars, through Maven into build/jars.
jars: $(STAMP)
	$(PY) -m testbed.jvm

# The driver JVM's classes in a class-data-sharing archive, which the job maps when it starts Spark (about
# 0.7x Spark's start: streaming/class_archive.py). Written once per Spark line and JVM; a failure only warns,
# the job then starts without it.
CLASS_ARCHIVE := build/jvm/spark-$(SPARK_VERSION).jsa
class-archive: $(CLASS_ARCHIVE)
$(CLASS_ARCHIVE): $(STAMP)
	@mkdir -p $(dir $@)
	@$(PY) -m streaming.class_archive $@ >build/class-archive.log 2>&1 && tail -1 build/class-archive.log \
		|| echo "NOTE: no class archive (build/class-archive.log): Spark starts without one"

# Prometheus and promtool, which the ops tests and `make run` use, and Alertmanager with amtool, which
# tests/deploy/test_alertmanager.py uses: Debian's packages when root.
prometheus:
	@if command -v promtool >/dev/null && command -v prometheus >/dev/null && command -v amtool >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "Installing Prometheus, promtool, Alertmanager and amtool (Debian packages prometheus, prometheus-alertmanager)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
			prometheus prometheus-alertmanager >/dev/null; \
	else \
		echo "NOTE: prometheus/promtool/amtool not on PATH and not root: run" \
		     "'sudo apt-get install prometheus prometheus-alertmanager'" \
		     "(or put Prometheus' release binaries on PATH); until then the Prometheus tests skip" \
		     "(they fail under CI=true) and 'make run' needs --no-prometheus."; \
	fi

# Prometheus 3 beside Debian's 2.x: the rule tests and the real-Prometheus end-to-end test run on both
# majors. Built once from the Go module proxy into build/bin (needs Go), where the tests look for it;
# skipped when build/bin has it or the promtool on PATH is already 3.x. Prometheus 3.Y.Z is tagged
# v0.3YY.Z as a Go module; the -X flag gives the binaries their version, as a release build does.
PROMETHEUS3_VERSION ?= 3.16.0
PROMETHEUS3_MODULE ?= v0.316.0
prometheus3:
	@if { [ -x build/bin/promtool ] && [ -x build/bin/prometheus ]; } || promtool --version 2>/dev/null | grep -q 'version 3\.'; then :; \
	elif command -v go >/dev/null; then \
		echo "Building prometheus and promtool $(PROMETHEUS3_VERSION) into build/bin (go install)"; \
		GOBIN=$(CURDIR)/build/bin go install -ldflags "-X github.com/prometheus/common/version.Version=$(PROMETHEUS3_VERSION)" \
			github.com/prometheus/prometheus/cmd/prometheus@$(PROMETHEUS3_MODULE) \
			github.com/prometheus/prometheus/cmd/promtool@$(PROMETHEUS3_MODULE); \
	else \
		echo "NOTE: go not on PATH: the Prometheus 3 cases of the rule tests skip (they fail under CI=true)"; \
	fi

# Helm, which the chart tests use (tests/deploy/test_helm_chart.py): the one on PATH, else built once
# from the Go module proxy into build/bin/helm (needs Go; the tests look there too).
HELM_VERSION ?= v3.16.4
helm:
	@if command -v helm >/dev/null || [ -x build/bin/helm ]; then :; \
	elif command -v go >/dev/null; then \
		echo "Building helm $(HELM_VERSION) into build/bin (go install)"; \
		GOBIN=$(CURDIR)/build/bin go install helm.sh/helm/v3/cmd/helm@$(HELM_VERSION); \
	else \
		echo "NOTE: neither helm nor go on PATH: the Helm chart tests skip (they fail under CI=true)"; \
	fi

# The installable package: decoders and streaming only (tests/scenarios/test_packaging.py checks it).
wheel: $(STAMP)
	rm -rf build/dist build/lib build/bdist.* && $(PY) -m pip wheel --quiet --no-deps --wheel-dir build/dist .

# The container image with podman, no public registry needed: a Debian base bootstrapped from
# Debian's archive (deploy/image/base.sh, as root), then deploy/Dockerfile on it. Built once per set of
# inputs: tagged $(IMAGE_INPUTS) too, the hash of every file that goes into it (testbed/image.py), and
# built again only when podman's store has no image of that tag; the base is tagged by base.sh's hash.
# IMAGE_BUILD_CA=ca.pem trusts a TLS-re-signing proxy's CA in the build stages only; it defaults to
# this host's trust bundle, when there is one (IMAGE_BUILD_CA= hands in none). PODMAN_BUILD_ARGS adds
# podman build options. CONTAINERS_CONF defaults to deploy/image/containers.conf (runc, low rlimits).
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
IMAGE ?= kafka-rebalance-monitor:$(VERSION)
IMAGE_INPUTS = $(shell $(PYTHON) -m testbed.image inputs-tag)
IMAGE_BASE ?= $(shell $(PYTHON) -m testbed.image base-tag)
IMAGE_BUILD_CA ?= $(wildcard /etc/ssl/certs/ca-certificates.crt)
CONTAINERS_CONF ?= $(CURDIR)/deploy/image/containers.conf
export CONTAINERS_CONF
comma := ,
image: image-tools
	@inputs=$(IMAGE_INPUTS); [ -n "$$inputs" ] || { echo "$(PYTHON) -m testbed.image inputs-tag failed" >&2; exit 1; }; \
	if podman image exists $$inputs; then \
		echo "$$inputs (built from these inputs) is in podman's store: tagging it $(IMAGE), no build"; \
		podman tag $$inputs $(IMAGE); \
	else \
		set -ex; deploy/image/base.sh $(IMAGE_BASE); \
		podman build -f deploy/Dockerfile --ignorefile deploy/Dockerfile.dockerignore --build-arg BASE=$(IMAGE_BASE) \
			$(if $(IMAGE_BUILD_CA),--secret id=build-ca$(comma)src=$(IMAGE_BUILD_CA)) $(PODMAN_BUILD_ARGS) \
			-t $$inputs -t $(IMAGE) .; \
	fi

# podman, buildah, debootstrap and runc, which `make image` uses: Debian's packages when root.
image-tools:
	@if command -v podman >/dev/null && command -v buildah >/dev/null && command -v debootstrap >/dev/null \
		&& command -v runc >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "Installing podman, buildah, debootstrap and runc (Debian packages)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			podman buildah debootstrap runc >/dev/null; \
	else \
		echo "NOTE: podman, buildah, debootstrap or runc missing and not root: run" \
		     "'sudo apt-get install podman buildah debootstrap runc'; until then 'make image' fails and" \
		     "tests/scenarios/test_image.py skips (it fails under CI=true)."; \
	fi

# The image tests/scenarios/test_image.py runs, for make test: `make image` where it can build
# (root, podman), else a NOTE and the test skips (it fails under CI=true).
test-image: image-tools
	@if command -v podman >/dev/null && { [ "$$(id -u)" = 0 ] || podman image exists $(IMAGE_INPUTS); }; then \
		$(MAKE) --no-print-directory image; \
	else \
		echo "NOTE: 'make image' needs podman and root (debootstrap): tests/scenarios/test_image.py skips" \
		     "(it fails under CI=true)."; \
	fi

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

# The whole suite, slow end-to-end scenarios included, the image built and run among them.
test: setup lint test-image
	$(PY) -m pytest

# Everything but the slow end-to-end scenarios, for quick iterations.
test-fast: setup
	$(PY) -m pytest -m "not slow"

# BOOTSTRAP=host:port make run  monitors that cluster; without it, a local broker and demo groups.
# Either way a local Prometheus with the shipped rules scrapes the job (testbed/demo_run.py).
run: demo-setup
	$(PY) -m testbed.demo_run $(if $(BOOTSTRAP),--bootstrap-server $(BOOTSTRAP)) $(RUN_ARGS)

# Beside a running `make run`: waits for the storm alert, saves Prometheus' alerts page as a PNG.
screenshot: $(STAMP)
	$(PY) -m testbed.screenshot

bench: setup
	$(PY) -m benchmarks.decode_bench

# The streaming job against a local broker, beside Kafka's, Spark's and a Python consumer's baselines
# (docs/benchmarks.md); about 30 minutes, not part of make test.
bench-job: setup
	$(PY) -m benchmarks.job_bench $(BENCH_ARGS)

# The image `make image` built, run as deploy/k8s runs it against a local broker with the demo groups:
# /-/ready, every demo group on /metrics, start time, peak RSS and size (docs/benchmarks.md). Needs podman.
bench-image: jars
	$(PY) -m benchmarks.image_run --image $(IMAGE) $(BENCH_ARGS)

# The job for 6 hours against churning groups and commit load; RSS, JVM live heap, Python heap and every
# entry the job's objects hold sampled every minute (benchmarks/soak.py). SOAK_ARGS="--minutes 30" shortens
# it; SOAK_ARGS="--profile churn --minutes 40" adds groups and topics that come and go (a day's worth in 40
# minutes) and compares the groups the job holds with the cluster's at the end. Not part of make test.
bench-soak: setup
	$(PY) -m benchmarks.soak $(SOAK_ARGS)

# Issue 28's pages on real parts: a Kafka Streams app's purges, a slow committer, a capped catch-up with a
# restart, beside a real Prometheus on the shipped rules; about 25 minutes, prints PASS/FAIL per check
# (benchmarks/trust_soak.py, docs/benchmarks.md). TRUST_SOAK_ARGS="--streams-minutes 3" shortens it.
# Not part of make test.
soak-trust: setup
	$(PY) -m benchmarks.trust_soak $(TRUST_SOAK_ARGS)

fuzz: setup
	HYPOTHESIS_PROFILE=fuzz $(PY) -m pytest -q tests/unit/decoders/test_properties.py

kafka-up: setup
	$(PY) -m testbed.broker up

kafka-down: $(STAMP)
	$(PY) -m testbed.broker down

clean:
	-$(PY) -m testbed.broker down
	rm -rf .venv .venv-spark-* build .local .pytest_cache .ruff_cache .hypothesis *.egg-info
