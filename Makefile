# Two README commands: `make demo` (the grading demo) and `make test` (every test).
# Each creates .venv from requirements.txt (every other package pinned by constraints.txt) on first use.
PYTHON ?= python3.11
VENV := .venv
BIN := $(CURDIR)/$(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat requirements.txt constraints.txt | cksum | cut -d' ' -f1)
# nbgrader calls alembic from PATH; kernels must come from the venv
RUN := PATH="$(BIN):$$PATH" OMP_NUM_THREADS=1 PYTHONHASHSEED=0

# bubblewrap and libseccomp2 (which compiles its seccomp filter): the grading sandbox;
# chromium (+ a CJK font for the Chinese prose): the browser test;
# postgresql: the server tests/test_postgres.py starts for a PostgreSQL gradebook
SANDBOX_PACKAGES := bubblewrap libseccomp2
BROWSER_PACKAGES := chromium chromium-driver fonts-wqy-microhei
POSTGRES_PACKAGES := postgresql
LAB_DIR := build/lab

.PHONY: venv sysdeps sysdeps-demo test test-unit demo lab lab-notebooks clean

venv: $(STAMP)

# every Debian package the tests need: installed as root, a clear error otherwise
sysdeps:
	@missing=""; \
	for pkg in $(SANDBOX_PACKAGES) $(BROWSER_PACKAGES) $(POSTGRES_PACKAGES); do dpkg -s $$pkg >/dev/null 2>&1 || missing="$$missing $$pkg"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing system packages:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	  else \
	    echo "missing system packages:$$missing (install them with apt-get as root)"; exit 1; \
	  fi; \
	fi

# the demo needs only the sandbox's packages, and runs without them: its sample class is ours, not students' code
sysdeps-demo:
	@if ! command -v bwrap >/dev/null 2>&1 || ! PATH="$$PATH:/sbin" ldconfig -p 2>/dev/null | grep -q 'libseccomp\.so\.2 '; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing system packages: $(SANDBOX_PACKAGES)"; \
	    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(SANDBOX_PACKAGES) >/dev/null; } || \
	      echo "note: could not install $(SANDBOX_PACKAGES), so the demo grades its bundled sample class without the sandbox"; \
	  else \
	    echo "note: bubblewrap (bwrap) or libseccomp is not installed, so the demo grades its bundled sample class without the" \
	         "sandbox; install it as root (apt-get install $(SANDBOX_PACKAGES)) before grading real submissions"; \
	  fi; \
	fi

$(STAMP): requirements.txt constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip -c constraints.txt
	$(BIN)/python -m pip install --quiet -r requirements.txt -c constraints.txt
	rm -f $(VENV)/.installed-*
	touch $@

## every test: unit, data, notebooks (nbval), release, grading
test: sysdeps $(STAMP)
	$(RUN) $(BIN)/python -m pytest

## the reference path and the data file only (fast)
test-unit: $(STAMP)
	$(RUN) $(BIN)/python -m pytest tests/test_reference.py tests/test_arithmetic_data.py

## the main job: release, sample class, grade, feedback, export
demo: sysdeps-demo $(STAMP)
	$(RUN) $(BIN)/python -m autograder demo

## the student's view: JupyterLab on the unpacked student zip (unpacked once; work stays in build/lab/part-ii)
lab: lab-notebooks
	cd $(LAB_DIR)/part-ii && $(RUN) $(BIN)/jupyter lab --ServerApp.ip=127.0.0.1 $$([ "$$(id -u)" = 0 ] && echo --allow-root)

# make lab's notebooks, unpacked once. The release is a course of its own in $(LAB_DIR)/course with its own
# gradebook (PART_II_DB_URL, or a gradebook-url.txt an earlier make lab recorded from it, may name an instructor's):
# an instructor's course is never released again behind their back. release's report and next steps are the
# instructor's (hand out the zip, collect): a student needs neither, nor release's run of the model answers
# (--no-source-check).
lab-notebooks: $(STAMP)
	@test -d $(LAB_DIR)/part-ii || { echo "preparing the student notebooks (a release of the course into $(LAB_DIR)/course)..." && \
	  rm -f $(LAB_DIR)/course/gradebook-url.txt && \
	  env -u PART_II_DB_URL -u PART_II_BUILD $(RUN) $(BIN)/python -m autograder release --no-source-check --build $(LAB_DIR) >/dev/null && \
	  $(BIN)/python -m zipfile -e $(LAB_DIR)/course/student/part-ii.zip $(LAB_DIR) && \
	  echo "unpacked the student notebooks into $(LAB_DIR)/part-ii: your work stays there"; }

## deletes build/; refuses while it holds a course with hand-ins or a student's notebooks (FORCE=1 deletes them too)
clean:
	@kept=""; \
	[ -n "$$(ls -A build/course/submitted 2>/dev/null)" ] && \
	  kept="$$kept\n  build/course: a course with collected hand-ins (its gradebook, hand grades and submissions)"; \
	[ -d $(LAB_DIR)/part-ii ] && kept="$$kept\n  $(LAB_DIR)/part-ii: the student notebooks make lab unpacked, and the work in them"; \
	if [ -n "$$kept" ] && [ "$(FORCE)" != 1 ]; then \
	  printf "make clean: not deleting build/, which holds$$kept\nCopy out what you need, then run: make clean FORCE=1\n" >&2; \
	  exit 1; \
	fi
	rm -rf build
