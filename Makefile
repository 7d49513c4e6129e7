# amqpq — quick start: `make run` (broker on 127.0.0.1:5672, guest/guest, vhost /, data ./var)
#                      `make test` (installs into .venv, runs ruff and the test suite)
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
HOST ?= 127.0.0.1
PORT ?= 5672

.PHONY: install run test lint unit interop clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,fast,spark]' --config-settings editable_mode=compat
	touch $@

install: $(VENV)/.installed

run: install
	$(VENV)/bin/amqpq-server --host $(HOST) --port $(PORT) --data-dir ./var

lint: install
	$(VENV)/bin/ruff check .

test: install lint
	$(PY) -m pytest -q

unit: install
	$(PY) -m pytest -q tests

interop: install
	$(PY) -m pytest -q interop_tests

clean:
	rm -rf $(VENV) var .pytest_cache .ruff_cache *.egg-info
