# The two commands of the quick start: `make bench` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
DATASET ?= datasets/pilot

.PHONY: install bootstrap images bench test typecheck chromium clean-images

# A venv keeps the harness off the system Python (Debian refuses pip there).
$(BIN)/ssebench: pyproject.toml sdk/pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]' -e ./sdk
	# Popular plugins apart from the venv's: the suite runs our plugin beside
	# them in a subprocess (autoloaded, pytest-retry and pytest-randomly change
	# the suite's own in-process pytester runs).
	$(BIN)/python -m pip install -q --target $(VENV)/isolated-plugins --no-deps \
	  pytest-retry pytest-randomly pytest-cov coverage
	touch $@

install: $(BIN)/ssebench

# The OS image: pulled if a registry answers, else made with debootstrap
# (needs root; installed from Debian's mirror when missing).
bootstrap: install
	@if ! command -v debootstrap >/dev/null && [ ! -x /usr/sbin/debootstrap ]; then \
	  echo "installing debootstrap (makes the OS image when no registry can supply it)"; \
	  $(SUDO) apt-get update -q >/dev/null && $(SUDO) apt-get install -y -q debootstrap >/dev/null; fi
	$(BIN)/ssebench images bootstrap || $(SUDO) $(BIN)/ssebench images bootstrap

images: bootstrap
	$(BIN)/ssebench images build $(DATASET) --agent reference --agent dummy

# The benchmark's main job: every task with the reference and dummy agents.
# pytest exits 1 when some run failed (the dummy agent always fails): that is
# a result, not an error; anything above 1 is.
bench: images
	@$(BIN)/python -m pytest $(DATASET) --agent reference --agent dummy -n auto -p no:cacheprovider \
	  --html=report.html --self-contained-html $(PYTEST_ARGS); status=$$?; \
	  if [ $$status -gt 1 ]; then exit $$status; fi; echo "report: report.html, runs: results/"

# The suite reads the HTML report as a person sees it, in Debian's Chromium.
chromium:
	@command -v chromium >/dev/null || { echo "installing chromium (the report test renders report.html)"; \
	  $(SUDO) apt-get update -q >/dev/null && $(SUDO) apt-get install -y -q chromium >/dev/null; }

# STYLE.md's aim, kept: mypy --strict over the packages (pyproject.toml's [tool.mypy]).
typecheck: install
	$(BIN)/python -m mypy

# pytest's exit status 5 means it collected nothing: a failure, said plainly.
test: typecheck bootstrap chromium
	@$(BIN)/python -m pytest $(PYTEST_ARGS); status=$$?; \
	  if [ $$status = 5 ]; then echo "make test: pytest collected no tests" >&2; exit 1; fi; exit $$status

clean-images:
	docker images --filter label=ssebench.layer -q | xargs -r docker rmi -f
