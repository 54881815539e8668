# The two commands of the quick start: `make bench` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
DATASET ?= datasets/pilot
# CI's subset of the suite: all but the `exhaustive` tests (README, Tests). `make test TESTS=` runs them all.
TESTS ?= -m "not exhaustive"

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

# $(call has,COMMAND) is a shell test: true when COMMAND can be run (sbin included, which a user's PATH may lack).
has = { command -v $(1) >/dev/null || [ -x /usr/sbin/$(1) ] || [ -x /usr/bin/$(1) ]; }

# Installs a Debian package the set-up needs when it is missing: as root, or
# with sudo; otherwise it stops with the one command to run.
# $(call install_missing,COMMAND,PACKAGE,WHY) is a shell command; $(call need,...) the recipe line.
define install_missing
if ! $(call has,$(1)); then \
	  if ! command -v apt-get >/dev/null; then \
	    echo "make: $(1) is missing ($(3)) and this host has no apt-get: install $(2) with its package manager, then run make again" >&2; exit 1; fi; \
	  if [ "$$(id -u)" != 0 ] && ! sudo -n true 2>/dev/null; then \
	    echo "make: $(1) is missing ($(3)): run 'sudo apt-get install $(2)' (or as root), then run make again" >&2; exit 1; fi; \
	  echo "installing $(2) ($(3))"; \
	  $(SUDO) apt-get update -q >/dev/null && $(SUDO) apt-get install -y -q $(2) >/dev/null || { \
	    echo "make: installing $(2) failed: run 'sudo apt-get install $(2)', then run make again" >&2; exit 1; }; fi
endef
need = @$(call install_missing,$(1),$(2),$(3))

# The OS image: present, else pulled if a registry answers, else made with debootstrap (needs root).
# debootstrap is installed only when the image can be had no other way: without it, `ssebench images
# bootstrap` finds or pulls the image, or fails saying debootstrap is missing (DEBOOTSTRAP_HINT in
# ssebench/bootstrap.py, "install debootstrap: ..."); any other failure (no engine) is shown as it is.
bootstrap: install
	@if $(call has,debootstrap); then \
	  $(BIN)/ssebench images bootstrap || $(SUDO) $(BIN)/ssebench images bootstrap; \
	elif ! $(BIN)/ssebench images bootstrap 2>$(VENV)/bootstrap.err; then \
	  grep -q 'install debootstrap' $(VENV)/bootstrap.err || { cat $(VENV)/bootstrap.err >&2; exit 1; }; \
	  $(call install_missing,debootstrap,debootstrap,the OS image cannot be pulled: debootstrap makes it); \
	  $(BIN)/ssebench images bootstrap || $(SUDO) $(BIN)/ssebench images bootstrap; \
	fi

images: bootstrap
	$(BIN)/ssebench images build $(DATASET) --agent reference --agent dummy

# The benchmark's main job: every task with the reference and dummy agents.
# pytest exits 1 when some run failed (the dummy agent always fails): that is
# a result, not an error; anything above 1 is.
bench: images
	@$(BIN)/python -m pytest $(DATASET) --agent reference --agent dummy -n auto -p no:cacheprovider \
	  --html=report.html --self-contained-html $(PYTEST_ARGS); status=$$?; \
	  if [ $$status -gt 1 ]; then exit $$status; fi; echo "report: report.html, runs: results/"

# The suite reads the HTML report as a person sees it, in Debian's Chromium, and drives the viewer's pages in it
# through Debian's chromium-driver (Selenium).
chromium:
	$(call need,chromium,chromium,the report test renders report.html)
	$(call need,chromedriver,chromium-driver,the viewer's browser tests drive Chromium)

# ruff's lint and format check ([tool.ruff]; `ruff format .` and `ruff check --fix .` repair most of what
# they find), then mypy --strict over the whole tree ([tool.mypy]): the packages, the tests, the
# benchmarks, and each agent on its own (every agent is a script named agent.py).
typecheck: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m mypy
	for agent in agents/*/agent.py; do $(BIN)/python -m mypy $$agent || exit 1; done

# pytest's exit status 5 means it collected nothing: a failure, said plainly. The slowest
# tests are listed at the end, against the suite's time limit per test (pyproject.toml).
test: typecheck bootstrap chromium
	@$(BIN)/python -m pytest $(TESTS) --durations=15 $(PYTEST_ARGS); status=$$?; \
	  if [ $$status = 5 ]; then echo "make test: pytest collected no tests" >&2; exit 1; fi; exit $$status

clean-images:
	docker images --filter label=ssebench.layer -q | xargs -r docker rmi -f
	docker volume ls -q --filter name=ssebench-runtime- | xargs -r docker volume rm -f
	docker volume ls -q --filter name=ssebench-agent- | xargs -r docker volume rm -f
