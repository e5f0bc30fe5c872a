# opbench: `make test` checks everything once, `make bench` measures the quick operator and
# end-to-end suites on the CPU and saves the run under .benchmarks/.
PYTHON ?= python3
# Bytecode is written where it is first imported, into the venv and the tree (both ignored by git): pip's
# install-time compile of every module of the four frameworks costs a minute on a 2-core host, and a
# process without bytecode compiles what it imports each time (the four frameworks: 38 s against 14).
unexport PYTHONDONTWRITEBYTECODE
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTEST := $(BIN)/pytest
BENCH_ARGS ?=
# The models' float32 emulations, kept between make's pytest processes (src/opbench/suites/reference_store.py):
# a new clone starts with none, its first process makes them and the next ones read them.
export OPBENCH_REFERENCE_CACHE ?= $(CURDIR)/.cache/references
# torch.compile's kernels (gcc builds each C++ kernel inductor writes: about 4 minutes of a new clone's
# make test on a 2-core host), kept in the project beside them: make test and make bench share them and
# the next run reads them; make clean removes them. Compiling is never timed (warm-up and the check run first).
export TORCHINDUCTOR_CACHE_DIR ?= $(CURDIR)/.cache/inductor
# JAX's compiled programs, for the test targets only (make bench starts without them, as a user's process
# does): eager JAX compiles every primitive at each new shape on its first use, and make test's two lanes
# and its later processes compile many of the same (a set of eight activations and their gradients: 1.6 s
# cold, 0.3 s read back, on the Xeon). JAX keys each by its version and XLA_FLAGS, so the AVX2-capped
# leg (test-isa) and the NumPy 1.26 line's JAX keep their own; make clean removes them.
TESTS := test test-units test-checks test-rest test-isa test-numpy1 test-full roofline-smoke
$(TESTS): export JAX_COMPILATION_CACHE_DIR ?= $(CURDIR)/.cache/jax
$(TESTS): export JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS ?= 0
# `make test` leaves JAX's VGG models and its eager training benchmarks to `make bench` (eager JAX
# compiles every primitive on first use: about 3.5 minutes here; tests/frameworks/test_models.py still checks
# eager training of mlp, lenet and lstm), and checks the distributed benchmarks on the MLP at 2 workers
# with the global batch split, for every engine and update rule (each case starts 2-4 processes that
# import their framework: 10-25 s; the other models, 1 worker and weak scaling are left to
# `make bench-distributed`, tests/suites/test_distributed.py checks faults), and leaves ResNet-50 (a minute of
# float64 reference per framework) to `make bench`, and checks one epoch of the convergence runs in each
# framework's plain mode and JAX's jit (eager JAX compiles every primitive, the other modes are compiled
# variants of the same run) leaving the rest to `make bench-convergence`; `make test-full` checks everything.
# VGG-16 is VGG-10 with a fifth block of the same layers: `make test` checks VGG-10 and leaves VGG-16 (3.5
# minutes on a 2-core AVX2 host) to `make bench`, with torch.compile's VGG-10 (a minute of gcc on a cold
# cache; make test compiles its convolutions, ReLUs and dense layers in LeNet and ResNet-20 and its max
# pooling in the operator suite).
QUICK_K := not (jax and (vgg or (eager and training))) and not (data_parallel and not (w2 and strong and mlp)) \
  and not resnet50 and not vgg16 and not (compile and vgg)
QUICK ?= -k "$(QUICK_K)"
# The quick benchmarks' second variants, which `make test` leaves to `make test-rest` (CI runs both): the
# compiled modes (torch.compile, TensorFlow's graph and XLA, MXNet's hybridize) on ResNet-20, VGG-10 and
# the LSTM, whose layers they compile in MLP and LeNet and in every operator (3 minutes of compiling on a
# cold 2-core host); VGG-10 (its layers are LeNet's and ResNet-20's, stacked deeper: a minute of float32
# emulation and checks); and the data-parallel engines beyond one per framework (DDP, MirroredStrategy,
# MXNet's KVStore in sync: the two-node, asynchronous, device and local KVStores and MultiWorkerMirrored);
# the compiled modes' inference at batch 1 (a second compile of the graph `make test` compiles at the
# model's batch); and LeNet's one-epoch convergence check (the MLP's runs the same feed, evaluation and
# curve in every framework in half the time; LeNet's convolutions train in the training checks); and eager
# JAX's ResNet-20 and LSTM inference (every primitive compiled on first use; its MLP and LeNet stay, and
# jit runs both); and ResNet-20's training checks in every mode (its layers, batch norm and residuals
# included, train in every framework in tests/frameworks/test_models.py's batch-norm zoo, and make test
# checks ResNet-20's inference; a minute of the checks lane cold on the Xeon, 2026-11-28); and torch.compile's
# operator backward passes (each operator's backward is checked eagerly in every framework and compiled by
# TensorFlow, XLA, MXNet and JAX, and torch.compile's training steps of the MLP and LeNet compile the
# backward of dense, convolution, ReLU, pooling and the loss: gcc's 18 s of a cold cache on the Xeon,
# 2026-12-04, about 40 expected on the Zen 3). (torch.compile's MLP training step stays: left out, LeNet's
# compiled step took its 35 s and 10 more to build the same kernels, 2 Zen 3 cores, 2026-12-04.)
COMPILED_K := compile or graph or xla or hybridize
LATER_K := vgg10 or (($(COMPILED_K)) and (resnet20 or lstm)) \
  or (data_parallel and not (ddp or mirrored or kvstore-sync)) \
  or (inference and ($(COMPILED_K)) and b1]) or (convergence and lenet) \
  or (jax and eager and inference and (resnet20 or lstm)) or (training and resnet20) \
  or (compile and backward)
BENCH_QUICK ?= -k "$(QUICK_K) and not ($(LATER_K))"
# Unit tests marked `full` are a slow test's second variant whose first variant `make test` runs, or a slow
# test of a path `make test` reaches otherwise (tests/conftest.py says which): `make test-rest` and
# `make test-full` run them.
UNIT_QUICK ?= -m "not full"
# (a marker expression: -k would also match the unit tests whose names say convergence)
CONVERGENCE_M := not convergence or (eager and not jax) or jit
CONVERGENCE_QUICK ?= -m "$(CONVERGENCE_M)"
# Mixed precision in `make test`: LeNet (convolutions, pooling, dense layers) in each framework's plain mode
# (and JAX's jit), checked, with every layer kind (batch norm and residuals included) checked under amp in every
# framework by tests/frameworks/test_precision.py;
# `make test-rest` checks the MLP's and ResNet-20's, and `make bench` checks and times every mode and model.
# make test checks LeNet's in the same pytest process as the float32 benchmarks (--precision float32,amp, the amp
# cases chosen by their marker; BENCH_QUICK leaves out eager JAX's training): a process of its own imported the four
# frameworks again.
AMP_ARGS := --precision amp --mode eager,jit -k
AMP_NOT := not (jax and eager and training)
AMP_REST := $(AMP_ARGS) "(mlp or resnet20) and $(AMP_NOT)"
CHECKS_SELECT ?= --precision float32,amp $(BENCH_QUICK) -m "(not amp and ($(CONVERGENCE_M))) or (amp and lenet and (eager or jit))"

# The roofline on the host at hand: the largest quick GEMM and the larger quick conv2d (stride 1), every
# installed framework and mode, timed (a few rounds, nothing saved): none may exceed the ceiling derived
# from this machine's CPU. `make test` times them forward, `make test-rest` backward.
SMOKE_M ?= (gemm or conv2d) and not backward
SMOKE = -m "$(SMOKE_M)" -k "1024x1024x1024 or 16x64x32x32"

.PHONY: venv browser netns-tools test test-units test-checks test-rest test-isa test-numpy1 test-full bench bench-convergence bench-breakdown bench-distributed roofline-smoke docs report lint clean

venv: $(STAMP)

# Reinstalled only when the project's metadata changes. torch comes first, pinned to the CPU
# build that lies on this machine's disk; the extras then find it satisfied. The main line is on
# NumPy 2 (constraints.txt: NumPy 2.4, JAX 0.10, mlxtend 0.25). MXNet 1.9.1's metadata still says
# numpy<2, so it is installed last without its dependencies (graphviz and requests are its other
# two; docs/usage/versions.md).
$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q --no-compile "torch==2.13.0"
	$(BIN)/pip install -q --no-compile -c constraints.txt -e ".[torch,tensorflow,jax,data,dev,docs]" graphviz requests
	$(BIN)/pip install -q --no-compile -c constraints.txt --no-deps mxnet
	touch $(STAMP)

# The NumPy 1.26 line beside the main one (constraints-numpy1.txt: NumPy 1.26, JAX 0.7.1, mlxtend
# 0.23, MXNet as its own metadata asks), in its own environment, for users who cannot move yet.
# `make test-numpy1` runs the unit tests and every quick benchmark once there; CI runs it after
# `make test`.
NUMPY1 := .venv-numpy1
NUMPY1_STAMP := $(NUMPY1)/.installed
$(NUMPY1_STAMP): pyproject.toml constraints-numpy1.txt
	test -x $(NUMPY1)/bin/python || $(PYTHON) -m venv $(NUMPY1)
	$(NUMPY1)/bin/pip install -q --upgrade pip
	$(NUMPY1)/bin/pip install -q "torch==2.13.0"
	$(NUMPY1)/bin/pip install -q -c constraints-numpy1.txt -e ".[all]"
	touch $(NUMPY1_STAMP)

# NUMPY1_TESTS narrows its unit tests: CI runs the NumPy-dependent ones (MXNet's NumPy names, the
# references) beside every benchmark's check, since both lines' full runs pass CI's 90 minutes on a
# 2-core AVX2 host (.ci/run).
NUMPY1_TESTS ?= tests
test-numpy1: $(NUMPY1_STAMP) browser netns-tools
	$(NUMPY1)/bin/python -c "import numpy, jax; print('NumPy 1.26 line: numpy', numpy.__version__, 'jax', jax.__version__)"
	$(NUMPY1)/bin/pytest $(NUMPY1_TESTS) -q -p no:cacheprovider $(QUICK) $(UNIT_QUICK)
	$(NUMPY1)/bin/pytest benchmarks --benchmark-disable -q -p no:cacheprovider $(QUICK) $(CONVERGENCE_QUICK)

# Debian's chromium, for the HTML report's test in a real headless browser
# (tests/results/test_report_browser.py): installed once where it is missing, as root with apt.
browser:
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  { apt-get install -y -q --no-install-recommends chromium >/dev/null 2>&1 || \
	    { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q --no-install-recommends chromium >/dev/null; }; }; } || \
	  { echo "make test needs Debian's chromium for the HTML report's browser test: apt-get install chromium" >&2; exit 1; }

# iproute2's `ip`, for the multi-node test's network namespaces (tests/suites/test_multinode.py):
# installed once where it is missing, as root with apt; elsewhere that test skips with the reason
# (CI sets OPBENCH_REQUIRE_NETNS=1, which makes the skip a failure).
netns-tools:
	@command -v ip >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  { apt-get install -y -q --no-install-recommends iproute2 >/dev/null 2>&1 || \
	    { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q --no-install-recommends iproute2 >/dev/null; }; }; } || true

# `make test` runs its two lanes side by side, the unit tests and the benchmarks' checks (each lane's
# output appears whole when it ends): neither keeps 2 cores busy alone (the unit tests wait on the
# processes they start, about 1.2 cores on average; the checks 1.4), so on a 2-core host side by side
# they use 1.8 cores (docs/explanation/cost.md). Side by side, the machine's memory in use peaked at
# 5.7-6.1 GB (the largest process 4.3 GB); TEST_JOBS=1 runs them one after the other. Nothing in either
# lane is timed but the roofline smoke, whose ceiling a loaded machine cannot pass (it can only be slower).
TEST_JOBS ?= 2
# The single-node distributed unit tests and --isolate's (processes that start processes, 2.2 minutes on the
# Xeon) run in the checks' lane, so that both lanes take about as long on a CPU without AVX-512, the common
# CI runner, where the unit lane's tests of the AVX2 caps on an AVX-512 CPU (a minute) skip: on the Xeon
# (2026-12-04) the unit lane took 511 s, 440 without those, and the checks' lane 519 with the regression
# gate's and the own-benchmarks page's tests (42 s), which now run in the unit lane.
UNIT_SPLIT := tests/suites/test_distributed.py tests/harness/test_isolation.py

test: venv browser netns-tools
	$(BIN)/ruff check src tests benchmarks studies conftest.py
	@echo "make test: the unit tests and the benchmarks' checks, $(TEST_JOBS) at a time; each prints its output whole when it ends"
	$(MAKE) --no-print-directory -j$(TEST_JOBS) --output-sync=target test-units test-checks
	$(MAKE) --no-print-directory docs

test-units: venv browser netns-tools
	$(PYTEST) tests -q $(addprefix --ignore=,$(UNIT_SPLIT)) $(QUICK) $(UNIT_QUICK)

test-checks: venv netns-tools
	$(PYTEST) $(UNIT_SPLIT) -q -p no:cacheprovider $(QUICK) $(UNIT_QUICK)
	$(PYTEST) benchmarks --benchmark-disable -q -p no:cacheprovider $(CHECKS_SELECT)
	$(MAKE) --no-print-directory roofline-smoke

# What `make test` leaves to its second run, which CI runs after it: the unit tests marked `full` and the
# quick benchmarks' second variants (LATER_K above); `make test` and `make test-rest` together are
# `make test-full` but its amp cases beyond MLP, LeNet and ResNet-20 and its models beyond the quick list. It
# also checks the quick operators in bfloat16 (`--dtype bfloat16`, 1.4-1.6 minutes on the Xeon), which no other
# target runs uncapped.
test-rest: venv browser netns-tools
	$(PYTEST) tests -q -p no:cacheprovider $(QUICK) -m full
	$(PYTEST) benchmarks --benchmark-disable -q -p no:cacheprovider -k "$(QUICK_K) and ($(LATER_K))" $(CONVERGENCE_QUICK)
	$(PYTEST) benchmarks/ops --benchmark-disable -q -p no:cacheprovider --dtype bfloat16 $(QUICK)
	$(PYTEST) benchmarks/e2e --benchmark-disable -q -p no:cacheprovider $(AMP_REST)
	$(MAKE) --no-print-directory roofline-smoke SMOKE_M="(gemm or conv2d) and backward"

# The AVX2 code paths on an AVX-512 host: the unit tests of the frameworks' numerics (every layer kind,
# edge regime and model mutant, and the proof that each cap takes effect), the model and operator checks,
# every quick operator in bfloat16 and the amp steps below, with oneDNN, ATen and inductor, MKL, OpenBLAS
# and XLA held to AVX2 kernels and TensorFlow told it runs on an AVX2 CPU (src/opbench/harness/isa.py:
# there its oneDNN operations are off and Eigen computes, bfloat16 included). Then, on a host with AVX-512 BF16 or AMX, the bfloat16 paths of the older
# AVX-512 CPUs, each where this one is newer: `avx512` (Skylake-SP to Ice Lake Xeons, where oneDNN emulates
# bfloat16) and `avx512_bf16` (Zen 4 and 5: bfloat16 dot products without AMX). Their float32 kernels are the
# ones `make test` ran (oneDNN's are avx512_core at every AVX-512 level), so those legs check bfloat16:
# every layer kind under amp (tests/frameworks/test_precision.py), every quick operator in bfloat16 and the
# MLP's, LeNet's and ResNet-20's amp steps. A cap that changes nothing on this CPU says why and is skipped
# (`--lowers`): on an AVX2-only CPU `make test` ran its own kernels. CI runs it after `make test`.
ISA := $(BIN)/python -m opbench.harness.isa
ISA_BF16_CHECKS = $(ISA) $(1) $(PYTEST) benchmarks/ops --benchmark-disable -q -p no:cacheprovider --dtype bfloat16 $(QUICK) && \
  $(ISA) $(1) $(PYTEST) benchmarks/e2e --benchmark-disable -q -p no:cacheprovider $(AMP_ARGS) \
    "(lenet or mlp or resnet20) and $(AMP_NOT)"
ISA_BF16_TESTS = $(ISA) $(1) $(PYTEST) tests/frameworks/test_precision.py -q -p no:cacheprovider $(UNIT_QUICK) && \
  $(call ISA_BF16_CHECKS,$(1))
test-isa: venv
	@if $(ISA) --lowers avx2; then \
	  $(ISA) avx2 $(PYTEST) tests/harness/test_isa_caps.py tests/frameworks tests/plugin/test_mutants.py -q -p no:cacheprovider \
	    $(QUICK) $(UNIT_QUICK) && \
	  $(ISA) avx2 $(PYTEST) benchmarks --benchmark-disable -q -p no:cacheprovider $(QUICK) $(CONVERGENCE_QUICK) && \
	  $(call ISA_BF16_CHECKS,avx2); fi
	@if $(ISA) --lowers avx512; then $(call ISA_BF16_TESTS,avx512); fi
	@if $(ISA) --lowers avx512_bf16; then $(call ISA_BF16_TESTS,avx512_bf16); fi

roofline-smoke: venv
	$(PYTEST) benchmarks/ops -q -p no:cacheprovider $(SMOKE) --benchmark-min-rounds=3 \
	  --benchmark-max-time=0.05 --benchmark-warmup-iterations=2 --benchmark-columns=min,median,rounds

test-full:
	$(MAKE) test QUICK= BENCH_QUICK= UNIT_QUICK= CONVERGENCE_QUICK= CHECKS_SELECT="--precision float32,amp" SMOKE_M="gemm or conv2d"

# Each framework's cases in workers of their own (--isolate framework, docs/usage/running.md): one process
# for everything grew to 20 GB and gave a case's memory figure whatever earlier cases left resident.
bench: venv
	$(PYTEST) benchmarks/ops benchmarks/e2e --precision float32,amp --isolate framework --benchmark-autosave \
	  --benchmark-max-time=0.5 \
	  --benchmark-group-by=group --benchmark-sort=name \
	  --benchmark-columns=median,iqr,rounds -q $(BENCH_ARGS)

# Whole training runs on real data (the embedded MNIST digits; --data-dir for more): 8 epochs, 3
# timed runs per framework and mode after a checked one; `opbench report` adds the time-to-accuracy
# tables and --plots the accuracy curves.
bench-convergence: venv
	$(PYTEST) benchmarks/convergence --profile full --benchmark-autosave --benchmark-group-by=group \
	  --benchmark-sort=name --benchmark-columns=median,rounds -q $(BENCH_ARGS)

# Where each model step's time goes: LeNet, VGG-10 and LSTM training steps timed, then profiled
# per operator in a separate pass, and the operator suite timed at their layer shapes;
# `opbench report` (--plots) shows the breakdowns.
bench-breakdown: venv
	$(PYTEST) benchmarks/e2e -m "training and (lenet or vgg10 or lstm)" --breakdown predict --benchmark-autosave \
	  --benchmark-max-time=0.5 --benchmark-group-by=group --benchmark-sort=name --benchmark-columns=median,iqr,rounds \
	  -q $(BENCH_ARGS)

# Data-parallel training on each framework's own engine, 1 and 2 workers (OPBENCH_WORKERS), strong and
# weak scaling; saved like `make bench`, and `opbench report` adds the scaling table.
bench-distributed: venv
	$(PYTEST) benchmarks/distributed --benchmark-autosave --benchmark-max-time=1 \
	  --benchmark-group-by=group --benchmark-sort=name \
	  --benchmark-columns=median,iqr,rounds -q $(BENCH_ARGS)

# The documentation, strictly: a warning fails the build (-W), including a link to a missing page
# or anchor and a page in no table of contents (-n: every reference must resolve).
DOCS ?= docs
DOCS_OUT ?= $(DOCS)/_build/html
docs: venv
	$(BIN)/sphinx-build -W --keep-going -n -q -b html $(DOCS) $(DOCS_OUT)

report: venv
	$(BIN)/opbench report

lint: venv
	$(BIN)/ruff check src tests benchmarks studies conftest.py

clean:
	rm -rf $(VENV) $(NUMPY1) .pytest_cache .hypothesis docs/_build .cache
