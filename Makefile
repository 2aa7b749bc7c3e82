# The two set-up commands of the README. Each builds the virtual environment on first use.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
# Pinned for dev and CI only: the CPU build lies on the dev machines' disk; an unpinned
# torch would download a several-GB CUDA build. The package itself accepts torch>=2.3.
TORCH_PIN ?= torch==2.13.0
# Test workers (pytest-xdist): two more than the machine has cores. Most tests wait on a
# traced script in a fresh process for part of their time; the extra workers run in those
# waits (idle 2-core box, clean clones of one tree, fifty-seventh session: 4 workers 6 min
# 55 s of tests, 3 workers 8 min 9 s; fifty-fifth: 3 workers 4 min 44 s, 2 workers 5 min
# 16 s). `make test PYTEST_WORKERS=0` runs serially.
PYTEST_WORKERS ?= $(shell echo $$(( $$(nproc) + 2 )))

.PHONY: demo test setup clean

$(BIN)/memledger: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q "$(TORCH_PIN)"
	$(BIN)/pip install -q -e ".[dev]" "$(TORCH_PIN)"   # the pin again: no dev dependency may move torch
	touch $@

setup: $(BIN)/memledger

demo: setup
	$(BIN)/memledger trace examples/train_gpt.py --steps 3 -o gpt.ledger
	$(BIN)/memledger show gpt.ledger

test: setup
	$(BIN)/python -m pytest -q -n $(PYTEST_WORKERS)

clean:
	rm -rf $(VENV) *.ledger build *.egg-info
