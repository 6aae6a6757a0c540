# fedqr: one venv, installed once (idempotent: re-runs only when pyproject.toml changes).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.fedqr-installed
OUT    ?= runs/demo

.PHONY: install demo test lint typecheck bench bench-peers clean

install: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	# torch first, pinned: a bare 'torch' requirement would pull the CUDA build.
	$(BIN)/python -m pip install -q --disable-pip-version-check torch==2.13.0
	$(BIN)/python -m pip install -q --disable-pip-version-check -c constraints.txt -e '.[dev,flower]'
	touch $(STAMP)

# the main job end to end: plan (T, b) for the budget on the bundled digits, run the plan,
# print the predicted against the achieved test loss
demo: install
	$(BIN)/fedqr run --dataset digits --partition two-digits --num-clients 10 \
		--clients-per-round auto --rounds auto --mechanism gaussian --eps 2 --delta 1e-5 \
		--clip 5 --sample-rate 0.1 --lr 0.5 --repeats 5 --seed 0 --out $(OUT)

lint: install
	$(BIN)/ruff check src tests bench

typecheck: install
	$(BIN)/mypy src

test: lint typecheck
	$(BIN)/python -m pytest -q -n 2 --dist worksteal

bench: install
	$(BIN)/python bench/engine.py

# fedqr against Opacus, pfl and Flower on one workload (bench/peers/README.md), in a venv of
# its own: the peers pin versions (pfl: dp-accounting<0.6) that the project's venv need not share
PEERS_VENV  := bench/peers/.venv
PEERS_BIN   := $(PEERS_VENV)/bin
PEERS_STAMP := $(PEERS_VENV)/.peers-installed
PEERS_PIP   := $(PEERS_BIN)/python -m pip install -q --disable-pip-version-check

$(PEERS_STAMP): pyproject.toml constraints.txt bench/peers/requirements.txt
	test -x $(PEERS_BIN)/python || $(PYTHON) -m venv $(PEERS_VENV)
	# torch first, pinned: a bare 'torch' requirement would pull the CUDA build.
	$(PEERS_PIP) torch==2.13.0
	$(PEERS_PIP) -c constraints.txt -r bench/peers/requirements.txt
	$(PEERS_PIP) -c constraints.txt pfl==0.6.0 || \
		echo "bench-peers: pfl could not be installed; its column will say so"
	$(PEERS_PIP) -c constraints.txt -e .
	touch $(PEERS_STAMP)

bench-peers: $(PEERS_STAMP)
	$(PEERS_BIN)/python bench/peers/run.py

clean:
	rm -rf $(VENV) $(PEERS_VENV) runs .pytest_cache .mypy_cache .ruff_cache
