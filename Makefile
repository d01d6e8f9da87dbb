# The two commands of the README:
#   make demo   - the main job: a real broker, a skewed stream, routing, workers, replay
#   make test   - the whole test suite (unit, integration on a real broker, faults)
# Both do their own set-up on a fresh machine (scripts/setup.sh).

VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: setup test demo bench unit docs clean

setup:
	@bash scripts/setup.sh

test: setup
	$(PY) -m pytest tests

unit: setup
	$(PY) -m pytest tests/unit -q

demo: setup
	$(PY) scripts/demo.py

docs: setup
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

bench: setup
	$(PY) bench/run_all.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis build site *.egg-info
