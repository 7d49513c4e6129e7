# amqpq — quick start: `make run` (broker on localhost:5672, guest/guest, vhost /, data ./var;
#                      installs only what the broker needs: no pyspark, no test clients)
#                      `make test` (installs everything into .venv, runs ruff and the tests)
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
HOST ?=
PORT ?= 5672

.PHONY: install run test lint unit interop clean bench fuzz soak failover rolling-restart

$(VENV)/.venv-made:
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	touch $@

# the broker alone (make run)
$(VENV)/.installed-run: pyproject.toml $(VENV)/.venv-made
	$(PY) -m pip install -q -e '.[fast]' --config-settings editable_mode=compat
	touch $@

# everything the tests need (make test)
$(VENV)/.installed: pyproject.toml $(VENV)/.venv-made
	$(PY) -m pip install -q -e '.[test,fast,spark]' --config-settings editable_mode=compat
	touch $@

install: $(VENV)/.installed

run: $(VENV)/.installed-run
	$(VENV)/bin/amqpq-server $(if $(HOST),--host $(HOST)) --port $(PORT) --data-dir ./var

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports

test: install lint
	$(PY) -m pytest -q
	$(MAKE) --no-print-directory interop-workers
	$(MAKE) --no-print-directory interop-cluster
	$(MAKE) --no-print-directory rolling-restart

# The interop suite (and its differential run, when the reference RabbitMQ is up) against a
# broker of two worker processes (--workers 2): connections land on both.
.PHONY: interop-workers
interop-workers: install
	AMQPQ_TEST_WORKERS=2 $(PY) -m pytest -q interop_tests

# The interop suite against node n1 of a three-node cluster (a real etcd and three broker
# processes; skipped without etcd, make etcd-deps): every declare goes through etcd.
.PHONY: interop-cluster
interop-cluster: install
	AMQPQ_TEST_CLUSTER=3 $(PY) -m pytest -q interop_tests

# The interop suite against node n1 of a three-node cluster whose nodes are two worker
# processes each (--workers 2 --node-name ...; needs etcd): connections land on either worker
# of n1, queues on any worker of any node.
.PHONY: interop-cluster-workers
interop-cluster-workers: install
	AMQPQ_TEST_CLUSTER=3 AMQPQ_TEST_WORKERS=2 $(PY) -m pytest -q interop_tests

# Three nodes of two worker processes each: listed by node, a classic queue used from every
# worker of every node, quorum replicas on distinct nodes, a node's kill -9 fails over
# (tests/test_cluster_workers.py, slow: six broker processes; needs etcd).
.PHONY: cluster-workers
cluster-workers: install
	$(PY) -m pytest -q -m slow tests/test_cluster_workers.py

unit: install
	$(PY) -m pytest -q tests

# The interop suite, then the whole client x scenario matrix in one session (every cell,
# slow ones too: Node amqplib, C amqp-tools, heartbeats) with its differential mode against the
# reference RabbitMQ (AMQPQ_REFERENCE_URL; skipped when unreachable). Run interop-deps once first.
interop: install
	$(PY) -m pytest -q interop_tests --ignore-glob='interop_tests/test_matrix_*.py'
	$(PY) -m pytest -q -m '' interop_tests/test_matrix_*.py

# Clients of the matrix that do not come from PyPI: rabbitmq-c's amqp-tools (apt, as root or
# via sudo) and Node.js amqplib (npm, into interop_tests/matrix/node/node_modules).
.PHONY: interop-deps
interop-deps: SUDO = $(if $(filter 0,$(shell id -u)),,sudo)
interop-deps: install
	command -v amqp-consume >/dev/null || { $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y amqp-tools; }
	cd interop_tests/matrix/node && npm install --no-audit --no-fund --no-package-lock

# Debian's Chromium for the web UI's browser tests (tests/ui/, Playwright drives it through
# executable_path; Playwright's own browser download is not used). Never fails the build:
# without apt (or root/sudo) it warns, and the browser tests skip with that reason.
.PHONY: ui-deps
ui-deps: SUDO = $(if $(filter 0,$(shell id -u)),,sudo -n)
ui-deps:
	@test -x /usr/bin/chromium || { $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq chromium; } \
	  || echo "warning: could not install chromium (apt-get failed): the web UI browser tests will be skipped"

# Debian's etcd for the cluster tests (they start their own etcd on free ports, with TLS and
# auth: tests/support/etcd.py) and etcdctl for setting up users and roles (docs/cluster.md;
# the tests do not need it). Never fails the build: without apt (or root/sudo) they skip.
.PHONY: etcd-deps
etcd-deps: SUDO = $(if $(filter 0,$(shell id -u)),,sudo -n)
etcd-deps:
	@{ command -v etcd && command -v etcdctl; } >/dev/null || { $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq etcd-server etcd-client; } \
	  || echo "warning: could not install etcd-server and etcd-client (apt-get failed): the cluster tests will be skipped"

# The reference RabbitMQ (3.10.8 from Debian's packages, with the management, shovel and
# federation plugins) that the comparison tests (-m reference), the differential interop run
# and the benchmarks use when it is up: AMQP on 127.0.0.1:5672, HTTP API on 15672, guest/guest.
# Installs rabbitmq-server with apt-get the first time (root or passwordless sudo).
.PHONY: reference-rabbitmq reference-rabbitmq-stop
reference-rabbitmq:
	tools/reference-rabbitmq start

reference-rabbitmq-stop:
	tools/reference-rabbitmq stop

# benchmark suite, amqpq vs the reference RabbitMQ (on demand only; not part of `make test`):
#   make bench BENCH_ARGS="--quick"      BENCH_ARGS="--only 1,3,7 --reps 5 --no-rabbitmq"
BENCH_ARGS ?=
$(VENV)/.bench-installed: $(VENV)/.installed
	$(PY) -m pip install -q -e '.[test,fast,spark,bench]' --config-settings editable_mode=compat
	touch $@

bench: $(VENV)/.bench-installed
	$(PY) -m benchmarks.run $(BENCH_ARGS)

# robustness runs on demand (not part of `make test`); each stops by itself and prints figures:
#   make fuzz FUZZ_SECONDS=300     coverage-guided fuzzing of the sans-IO connection (atheris)
#   make soak SOAK_SECONDS=300     1,000 connections against a broker process (RSS, fds, p99),
#                                  then the kill -9 loop (KILLS=20) on a persistent queue
FUZZ_SECONDS ?= 300
SOAK_SECONDS ?= 300
SOAK_ARGS ?=
KILLS ?= 20
$(VENV)/.fuzz-installed: $(VENV)/.installed
	$(PY) -m pip install -q -e '.[test,fast,spark,fuzz]' --config-settings editable_mode=compat
	touch $@

fuzz: $(VENV)/.fuzz-installed
	$(PY) fuzz/fuzz_connection.py --seconds $(FUZZ_SECONDS)

soak: install
	$(PY) fuzz/soak.py --seconds $(SOAK_SECONDS) $(SOAK_ARGS)
	$(PY) fuzz/kill_loop.py --kills $(KILLS) --seconds 600

# The cluster failover loop with mixed faults (tests/test_cluster_mixed_faults.py; needs
# etcd: make etcd-deps): ROUNDS rounds, each one fault chosen by SEED (default random, printed):
# kill -9 of a quorum queue leader's node; a follower SIGSTOPped out of the in-sync replicas,
# SIGCONT, then the leader killed once it is back in sync; the node links between the leader
# and a follower cut (ss -K, needs root or sudo -n), then the leader killed; an etcd restart.
# LEASE is the nodes' --cluster-lease. Prints each round and, per fault kind, failover times,
# confirms and nacks; fails on a confirmed message lost, an acked one delivered again or
# first deliveries out of order. make test runs 3 kill-only rounds (test_cluster_failover.py).
ROUNDS ?= 20
LEASE ?= 2
SEED ?=
failover: install
	AMQPQ_FAILOVER_ROUNDS=$(ROUNDS) AMQPQ_FAILOVER_LEASE=$(LEASE) AMQPQ_FAILOVER_SEED=$(SEED) \
		$(PY) -m pytest -q -s -m slow tests/test_cluster_mixed_faults.py

# A rolling restart of a 3-node cluster under a confirming publisher and a consumer (drain,
# SIGTERM, start, await_online_quorum_plus_one, revive, node after node; about a minute;
# needs etcd): prints the longest confirm gap. make test runs it last.
rolling-restart: install
	$(PY) -m pytest -q -s -m slow tests/test_cluster_rolling_restart.py

# docs/operations.md run as written (tests/test_operations_guide.py): its sh blocks in order
# in one bash at the top of this checkout, on free ports and in a temporary directory: an etcd
# and four nodes started, a node added, a rolling restart, a node lost, etcd lost, definitions
# and a data directory backed up and restored. A few minutes; prints each block's output.
# WORKERS=2: every node of two worker processes (the runbook's --workers $WORKERS).
.PHONY: runbook
runbook: install etcd-deps
	$(PY) -m pytest -q -s -m slow tests/test_operations_guide.py

# The deterministic simulation of quorum queue replication (tests/sim): SEEDS seeds of three
# or five nodes under crashes, kills, lost disks, pauses, cut links, a flaky network, slow fsyncs and
# etcd faults, on JOBS processes; prints seeds run, failures (each replays: python -m
# tests.sim --seed N --quick --trace) and faults by kind. Short runs (8 s simulated, ~13 ms
# of CPU each: 100,000 in ~11 min on two idle cores); SIM_ARGS= for the 20 s runs (5x the
# CPU). make test runs 2000 short ones (tests/test_replication_sim.py).
SEEDS ?= 100000
JOBS ?= 2
SIM_ARGS ?= --quick
.PHONY: sim
sim: install
	$(PY) -m tests.sim --seeds $(SEEDS) --jobs $(JOBS) $(SIM_ARGS)

clean:
	rm -rf $(VENV) var .pytest_cache .ruff_cache *.egg-info
