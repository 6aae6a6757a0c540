# fedqr: one venv, installed once (idempotent: re-runs only when pyproject.toml changes).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.fedqr-installed
OUT    ?= runs/demo

.PHONY: install demo test lint typecheck bench clean

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
	$(BIN)/python -m pytest -q -n 2

bench: install
	$(BIN)/python bench/engine.py

clean:
	rm -rf $(VENV) runs .pytest_cache .mypy_cache .ruff_cache
