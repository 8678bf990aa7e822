# Two commands do all set-up: `make demo` and `make test`. Both create or reuse .venv.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: demo test check check-app chaos lint bench venv sshd clean

# Compiled modules are kept (__pycache__, ignored by git): every test worker and every
# process a test starts (agent, cockpit, trainer) would otherwise compile the project,
# and pytest its rewritten test modules, again each time.
unexport PYTHONDONTWRITEBYTECODE

PYTEST_RUN = $(BIN)/python -m pytest -q -p no:cacheprovider --dist worksteal
PYTEST = $(PYTEST_RUN) -n logical --maxprocesses 4
# The whole suite runs two workers more than the cores (up to 6): its end-to-end tests
# wait on processes, handshakes and polls, and the extra workers keep the cores busy
# through those waits (measured on two cores: about 82% busy with two workers, 89 to 96%
# with three; the whole suite took 1,073 s with three and 1,039 to 1,044 s with four on
# fresh clones, runs that vary by about 5%). The jobs those tests start are paced
# (charlm's train.pace), so more workers do not starve a rank past the tests' waits.
TEST_WORKERS := $(shell n=$$(nproc 2>/dev/null || echo 2); [ $$n -gt 4 ] && n=4; echo $$((n + 2)))
PYTEST_ALL = $(PYTEST_RUN) -n $(TEST_WORKERS)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[train,test,adapters,archive,import,charts]'
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/cockpit demo

# sshd (the SSH end-to-end tests), tmux (the real-terminal test), Prometheus (the
# exporter's test against a real server) and Slurm with munge (tests/slurm, a real
# slurmctld and two slurmd): installed when missing (CI runs as root).
sshd:
	@{ command -v sshd >/dev/null 2>&1 || test -x /usr/sbin/sshd; } && command -v tmux >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1 || { \
	  echo "installing openssh-server, tmux and prometheus for the tests"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends openssh-server openssh-client tmux prometheus) >/dev/null; }
	@{ command -v sbatch >/dev/null 2>&1 && test -x /usr/sbin/slurmctld && test -x /usr/sbin/slurmd && test -x /usr/sbin/munged; } || { \
	  echo "installing slurmctld, slurmd, slurm-client and munge for the Slurm tests"; \
	  (DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends slurmctld slurmd slurm-client munge || \
	   { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends slurmctld slurmd slurm-client munge; }) >/dev/null; }

# mypy runs beside the tests, as in `make check`; its report follows theirs.
test: $(STAMP) sshd
	$(BIN)/ruff check cockpit agent tests bench examples
	$(BIN)/lint-imports --no-cache
	@out=$$(mktemp); echo "$(BIN)/mypy (beside the tests)"; $(BIN)/mypy >$$out 2>&1 & types=$$!; \
	echo "$(PYTEST_ALL) --durations=25 --cpu-durations=25"; \
	$(PYTEST_ALL) --durations=25 --cpu-durations=25; tests=$$?; \
	wait $$types; typed=$$?; cat $$out; rm -f $$out; \
	if [ $$tests -eq 5 ]; then echo "no tests collected"; exit 1; fi; \
	[ $$tests -eq 0 ] && [ $$typed -eq 0 ]

# The fast tier for the edit-test loop: lint, types and the first tier of tests, those
# that start no process or server, drive no app and load no training framework (the
# tiers: tests/harness/tiers.py; the `starts` marker is set from the fixtures a test
# uses, tests/conftest.py). Test modules outside the tier are not even imported.
# mypy runs beside the tests: on a fresh clone it builds its cache (about 18 s of one
# core), which the tests' workers leave room for; its report follows theirs.
check: $(STAMP)
	$(BIN)/ruff check cockpit agent tests bench examples
	$(BIN)/lint-imports --no-cache
	@out=$$(mktemp); echo "$(BIN)/mypy (beside the tests)"; $(BIN)/mypy >$$out 2>&1 & types=$$!; \
	echo "$(PYTEST) --tier pure"; $(PYTEST) --tier pure; tests=$$?; \
	wait $$types; typed=$$?; cat $$out; rm -f $$out; \
	[ $$tests -eq 0 ] && [ $$typed -eq 0 ]

# The second tier: the Textual app driven by Pilot, and its SVG snapshots.
check-app: $(STAMP)
	$(PYTEST) --tier app

# Faults injected into real hosts, agents, a job and the cockpit while records flow;
# ends with the account of every record (tests/chaos/run.py). CI runs a smaller one.
chaos: $(STAMP) sshd
	$(BIN)/python -m tests.chaos.run --hosts 2 --faults 32

lint: $(STAMP)
	$(BIN)/ruff check cockpit agent tests bench examples
	$(BIN)/lint-imports --no-cache
	$(BIN)/mypy

bench: $(STAMP) sshd
	$(BIN)/python -m pip install -q -e '.[train,test,bench]'
	@failed=""; \
	for b in $(BENCHES) bench/gpu_check.py; do \
	  echo "$(BIN)/python $$b"; $(BIN)/python $$b; rc=$$?; \
	  if [ $$b = bench/gpu_check.py ] && [ $$rc -eq 2 ]; then continue; fi; \
	  if [ $$rc -eq 3 ]; then failed="$$failed $$b (goal missed)"; \
	  elif [ $$rc -ne 0 ]; then failed="$$failed $$b (exit $$rc: could not measure)"; fi; \
	done; \
	if [ -n "$$failed" ]; then echo "benchmarks failed:$$failed"; exit 1; fi

# Every benchmark but the modules they share, then bench/gpu_check.py (which needs a
# CUDA device and says it skipped, exit 2, without one). A benchmark exits 0 when its
# goal was met (its JSON line's `pass`), 3 when it measured and missed it
# (`bench.result.GOAL_MISSED`), and any other non-zero status when it could not measure.
# Every benchmark runs whatever the others did; the target then fails if any missed its
# goal or could not measure, and names each.
BENCHES = $(filter-out bench/result.py bench/synth_host.py bench/day_recording.py \
	bench/ui_store.py bench/gpu_check.py,$(wildcard bench/*.py))

clean:
	rm -rf $(VENV) build dist runs .pytest_cache .mypy_cache
