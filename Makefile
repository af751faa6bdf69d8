# CS336 Assignment 2 (systems) in C11 and CUDA C — the build.
#
#   make            build everything (libraries, programs, tests)
#   make run        the tour: environment report, then every stage's demo
#   make test       every test (GPU tests skip with a reason on a machine without a GPU)
#   make test-NN    one stage's tests (make test-03); make test-common for common/
#   make test-gpu   the whole suite on a GPU machine, spread over its GPUs (one line per binary)
#   make bench-NN   one stage's benchmark (writes tables under results/)
#   make report-NN  regenerate a stage README's tables from its results/ folder
#   make roofline   every kernel of 01-04 on the GPU's measured roofline (results/roofline/)
#   make grade [EDITION=2026]  the handout's problems with their points (results/grade.md, grade.json)
#   make student DEST=dir [STAGES=01,02] [EDITION=2026]   the student edition: regions become stubs
#   make check-markers                     the solution-region markers are well formed
#   make lab        every stage's notebook (lab/NN_stage/: what was tried and does not ship)
#   make test-lab   the lab's own tests (never part of make test or make grade)
#   make fuzz       the .npy reader under libFuzzer for FUZZ_SECONDS (default 60)
#   make clean
#
# Overrides: ARCH=sm_90a (GPU arch), SAN=1 (ASan+UBSan host build, in build-san/),
#            CRITERION_HOME=/abs/path (a bundled Criterion: include/ and lib/),
#            CUDA_HOME=/usr/local/cuda, NVCC_FLAGS+=..., CFLAGS_EXTRA=...
#
# Layout: every stage NN_name/ builds its *.c and *.cu (except *_main.c and test_*.c) into
# build/NN_name/libNN.a; each NN_name/X_main.c becomes the program build/NN_name/X; all
# NN_name/test_*.c become one Criterion binary build/NN_name/test_NN. A stage links its own
# library, every earlier stage's and common's. common/ never includes a stage.

SHELL := /bin/bash
.DEFAULT_GOAL := all

ARCH      ?= sm_90a
SAN       ?=
BUILD     ?= build$(if $(SAN),-san)
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(shell command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc))
NVCC      := $(CUDA_HOME)/bin/nvcc
CC        ?= gcc
ifeq ($(CC),cc)
CC := gcc
endif

# Under SAN=1 only host code changes, so CUDA objects are shared with the plain build dir
# (build-san/ reuses build/'s .cu.o files instead of compiling every kernel twice).
CUDA_OBJDIR ?= $(if $(SAN),$(patsubst %-san,%,$(BUILD)),$(BUILD))
objs = $(patsubst %.c,$(BUILD)/%.c.o,$(filter %.c,$(1))) $(patsubst %.cu,$(CUDA_OBJDIR)/%.cu.o,$(filter %.cu,$(1)))

STAGES_ALL := 01_benchmarking 02_weighted_sum 03_flashattn_fwd 04_flashattn_bwd 05_collectives 06_ddp 07_zero 08_pipeline 09_tensor 10_context 11_train
# Stages 05-11 stand on the communicator (common/comm*.c), which needs MPI: without it they are
# left out of the build (the dependency report says so).
STAGES_MPI := 05_collectives 06_ddp 07_zero 08_pipeline 09_tensor 10_context 11_train

# ---------------------------------------------------------------- dependency detection
have = $(if $(1),1,)
HAVE_NVCC     := $(call have,$(wildcard $(NVCC)))
HAVE_GPU      := $(call have,$(shell nvidia-smi -L 2>/dev/null | grep -m1 GPU))
HAVE_CUBLAS   := $(call have,$(wildcard $(CUDA_HOME)/lib64/libcublas.so $(CUDA_HOME)/targets/*/lib/libcublas.so))
HAVE_CUPTI    := $(call have,$(wildcard $(CUDA_HOME)/include/cupti.h $(CUDA_HOME)/extras/CUPTI/include/cupti.h))
HAVE_NCCL     := $(call have,$(wildcard $(CUDA_HOME)/include/nccl.h /usr/include/nccl.h))
HAVE_MPI      := $(call have,$(shell command -v mpicc 2>/dev/null))
HAVE_GNUPLOT  := $(call have,$(shell command -v gnuplot 2>/dev/null))
ifdef CRITERION_HOME
HAVE_CRITERION := $(call have,$(wildcard $(CRITERION_HOME)/include/criterion/criterion.h))
else
HAVE_CRITERION := $(call have,$(wildcard /usr/include/criterion/criterion.h /usr/local/include/criterion/criterion.h))
endif
GPU_NAME := $(shell nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)

mark = $(if $(1),✓,✗)
define DEPS_REPORT
echo "$(call mark,$(HAVE_NVCC)) CUDA toolkit   $(if $(HAVE_NVCC),$(NVCC),not found: install the CUDA toolkit (nvcc) — required)"
echo "$(call mark,$(HAVE_GPU)) GPU present    $(if $(HAVE_GPU),$(GPU_NAME),none: GPU tests will skip, GPU demos say so)"
echo "$(call mark,$(HAVE_CUBLAS)) cuBLAS"
echo "$(call mark,$(HAVE_NCCL)) NCCL           $(if $(HAVE_NCCL),,not found: the GPU backend of the communicator (stages 05-11) is left out)"
echo "$(call mark,$(HAVE_MPI)) MPI            $(if $(HAVE_MPI),$(shell command -v mpicc 2>/dev/null),not found: stages 05-11 are not built (scripts/setup.sh installs OpenMPI))"
echo "$(call mark,$(HAVE_CUPTI)) CUPTI          $(if $(HAVE_CUPTI),,not found: --profile is disabled)"
echo "$(call mark,$(HAVE_CRITERION)) Criterion      $(if $(HAVE_CRITERION),$(or $(CRITERION_HOME),system),not found: tests are not built (scripts/setup.sh installs it, or set CRITERION_HOME))"
echo "$(call mark,$(HAVE_GNUPLOT)) gnuplot        $(if $(HAVE_GNUPLOT),,not found: benchmarks write CSV but no PNG)"
echo "  GPU arch       $(ARCH) (override with ARCH=)$(if $(SAN),   SAN=1: ASan+UBSan host build in $(BUILD)/,)"
endef

ifeq ($(HAVE_NVCC),)
$(error CUDA toolkit not found at $(CUDA_HOME) (no nvcc). Install it or set CUDA_HOME=/path/to/cuda)
endif

STAGE_DIRS := $(if $(HAVE_MPI),$(STAGES_ALL),$(filter-out $(STAGES_MPI),$(STAGES_ALL)))

# ---------------------------------------------------------------- flags
CUDA_LIBDIR := $(CUDA_HOME)/lib64
# MPI through mpicc's own flags (OpenMPI: --showme), so host code builds with gcc as usual.
MPI_CPPFLAGS := $(if $(HAVE_MPI),$(shell mpicc --showme:compile 2>/dev/null))
MPI_LDLIBS   := $(if $(HAVE_MPI),$(shell mpicc --showme:link 2>/dev/null))
CPPFLAGS := -I. -I$(CUDA_HOME)/include -DHAVE_CUPTI=$(if $(HAVE_CUPTI),1,0) \
            -DHAVE_NCCL=$(if $(HAVE_NCCL),1,0) $(MPI_CPPFLAGS)
CFLAGS   := -std=c11 -D_GNU_SOURCE -O2 -g -Wall -Wextra -Werror -fopenmp -MMD -MP $(CFLAGS_EXTRA)
SANFLAGS_ON := -fsanitize=address -fsanitize=undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
SANFLAGS := $(if $(SAN),$(SANFLAGS_ON))
CFLAGS   += $(SANFLAGS)
NVCC_ARCH  := -gencode=arch=compute_$(patsubst sm_%,%,$(ARCH)),code=$(ARCH)
NVCC_FLAGS ?=
NVCCFLAGS  := -std=c++17 -O3 -g -lineinfo $(NVCC_ARCH) -Xcompiler -Wall,-fPIC -MMD -MP $(NVCC_FLAGS)
LDFLAGS  := -fopenmp $(SANFLAGS) -L$(CUDA_LIBDIR) -Wl,-rpath,$(CUDA_LIBDIR)
LDLIBS   := -lcublasLt -lcublas -lcudart $(if $(HAVE_CUPTI),-lcupti,) $(if $(and $(HAVE_MPI),$(HAVE_NCCL)),-lnccl,) \
            $(MPI_LDLIBS) -lstdc++ -ldl -lpthread -lm

ifdef CRITERION_HOME
CRIT_CPPFLAGS := -I$(CRITERION_HOME)/include
CRIT_LDFLAGS  := -L$(CRITERION_HOME)/lib -Wl,-rpath-link,$(CRITERION_HOME)/lib -Wl,--disable-new-dtags,-rpath,$(CRITERION_HOME)/lib
endif
CRIT_LDLIBS := -lcriterion

# ---------------------------------------------------------------- common
# What stands on the communicator needs MPI (comm*, the data-parallel replica, the training loop);
# without it, it is left out with stages 05-11.
COMMON_MPI  := common/comm% common/replica% common/train_loop%
COMMON_SRC  := $(filter-out common/%_main.c $(if $(HAVE_MPI),,$(COMMON_MPI)),$(wildcard common/*.c) $(wildcard common/*.cu))
COMMON_OBJ  := $(call objs,$(COMMON_SRC))
COMMON_LIB  := $(BUILD)/common/libcommon.a
COMMON_PROGS := $(patsubst common/%_main.c,$(BUILD)/common/%,$(wildcard common/*_main.c))

# Quiet builds: one short line per step ("CC file", "NVCC file", "AR lib", "LD prog"); V=1 prints
# the full commands. Objects wait for the dependency report (order-only `| deps`), so that under
# -j no compile line lands inside it.
# ptxas prints an advisory C7512 ("wgmma.mma_async instructions are serialized due to insufficient
# register resources") for one kernel: rung 18 of stage 04's lab (lab/04_flashattn_bwd/rungs_wgmma.cu),
# the wgmma backward at 3 blocks per SM, so at most 168 registers. It is an experiment kept on
# purpose and measured slower (lab/04_flashattn_bwd/NOTES.md); no shipped kernel is affected. Quiet
# builds print a note in its place; V=1 shows ptxas's own line.
quiet = $(if $(V),,@printf '  %-5s %s\n' '$(1)' '$(2)';)
NVCC_NOTE_C7512 = 2>&1 | sed -e 's|^ptxas info *: (C7512).*bwd_wgmma_kernelILi1ELi3E.*|  note: ptxas C7512 (wgmma serialized) on lab rung 18 of the backward only: expected, see lab/04_flashattn_bwd/NOTES.md (V=1 for the full line)|'

$(BUILD)/%.c.o: %.c | deps
	@mkdir -p $(@D)
	$(call quiet,CC,$<)$(CC) $(CPPFLAGS) $(CFLAGS) $(if $(findstring test_,$(notdir $<))$(findstring tests/,$<),$(CRIT_CPPFLAGS),) -c $< -o $@

$(CUDA_OBJDIR)/%.cu.o: %.cu | deps
	@mkdir -p $(@D)
	$(call quiet,NVCC,$<)$(if $(V),,set -o pipefail; )$(NVCC) $(CPPFLAGS) $(NVCCFLAGS) -c $< -o $@ $(if $(V),,$(NVCC_NOTE_C7512))

$(COMMON_LIB): $(COMMON_OBJ)
	@mkdir -p $(@D)
	@rm -f $@
	$(call quiet,AR,$@)ar rcs $@ $^

$(BUILD)/common/%: $(BUILD)/common/%_main.c.o $(COMMON_LIB)
	$(call quiet,LD,$@)$(CC) $(LDFLAGS) $< $(COMMON_LIB) $(LDLIBS) -o $@

# ---------------------------------------------------------------- test harness and common tests
HARNESS_SRC := tests/harness.c
HARNESS_OBJ := $(BUILD)/tests/harness.c.o
COMMON_TEST_SRC := $(wildcard tests/test_*.c)
COMMON_TEST_BIN := $(BUILD)/tests/test_common
TEST_BINS :=
ifneq ($(HAVE_CRITERION),)
ifneq ($(COMMON_TEST_SRC),)
TEST_BINS += $(COMMON_TEST_BIN)
$(COMMON_TEST_BIN): $(patsubst %,$(BUILD)/%.o,$(COMMON_TEST_SRC)) $(HARNESS_OBJ) $(COMMON_LIB)
	$(call quiet,LD,$@)$(CC) $(LDFLAGS) $(CRIT_LDFLAGS) $^ $(LDLIBS) $(CRIT_LDLIBS) -o $@
endif
endif

# ---------------------------------------------------------------- stages
ALL_PROGS := $(COMMON_PROGS)
STAGE_LIBS_SO_FAR :=
# One folder's library, programs and test binary (a stage's or a lab folder's):
# $(1) = folder, $(2) = name stem (03, lab03: lib$(2).a, test_$(2)), $(3) = what it links after its
# own library (the libraries before it, newest first, so a static link resolves).
define UNIT_RULES
$(1)_SRC   := $$(strip $$(filter-out $(1)/%_main.c $(1)/test_%.c,$$(wildcard $(1)/*.c)) $$(wildcard $(1)/*.cu))
$(1)_OBJ   := $$(call objs,$$($(1)_SRC))
$(1)_LIB   := $$(if $$($(1)_SRC),$(BUILD)/$(1)/lib$(2).a,)
$(1)_LINK  := $$($(1)_LIB) $(3)
$(1)_PROGS := $$(patsubst $(1)/%_main.c,$(BUILD)/$(1)/%,$$(wildcard $(1)/*_main.c))
$(1)_TSRC  := $$(wildcard $(1)/test_*.c)
$(1)_TBIN  := $$(if $$(and $$($(1)_TSRC),$(HAVE_CRITERION)),$(BUILD)/$(1)/test_$(2),)

ifneq ($$($(1)_LIB),)
$$($(1)_LIB): $$($(1)_OBJ)
	@mkdir -p $$(@D)
	@rm -f $$@
	$$(call quiet,AR,$$@)ar rcs $$@ $$^
endif

$(BUILD)/$(1)/%: $(BUILD)/$(1)/%_main.c.o $$($(1)_LINK) $(COMMON_LIB)
	$$(call quiet,LD,$$@)$$(CC) $$(LDFLAGS) $$< $$($(1)_LINK) $(COMMON_LIB) $$(LDLIBS) -o $$@

ifneq ($$($(1)_TBIN),)
$$($(1)_TBIN): $$(patsubst %,$(BUILD)/%.o,$$($(1)_TSRC)) $(HARNESS_OBJ) $$($(1)_LINK) $(COMMON_LIB)
	$$(call quiet,LD,$$@)$$(CC) $$(LDFLAGS) $$(CRIT_LDFLAGS) $$(patsubst %,$(BUILD)/%.o,$$($(1)_TSRC)) $(HARNESS_OBJ) $$($(1)_LINK) $(COMMON_LIB) $$(LDLIBS) $$(CRIT_LDLIBS) -o $$@
endif
endef

# A stage's targets: $(1) = stage dir, $(2) = stage number
define STAGE_RULES
ALL_PROGS  += $$($(1)_PROGS)
TEST_BINS  += $$($(1)_TBIN)

.PHONY: test-$(2) bench-$(2) build-$(2) report-$(2)
report-$(2):
	@python3 scripts/report.py $(wildcard $(1)/*.md)

build-$(2): $$($(1)_PROGS) $$($(1)_TBIN) $(COMMON_PROGS)
test-$(2): deps build-$(2) $(COMMON_PROGS)
	@BUILD=$(BUILD) scripts/run_tests.sh $$($(1)_TBIN) $$(if $$($(1)_TBIN),,--none "$(1): no tests yet$(if $(HAVE_CRITERION),, (Criterion not found))")
bench-$(2): deps build-$(2)
	@if [ -x $(1)/bench.sh ]; then BUILD=$(BUILD) $(1)/bench.sh; else echo "$(1): no benchmark yet"; fi

STAGE_LIBS_SO_FAR := $$($(1)_LIB) $$(STAGE_LIBS_SO_FAR)
endef
stage_num = $(firstword $(subst _, ,$(notdir $(1))))
$(foreach s,$(STAGE_DIRS),$(eval $(call UNIT_RULES,$(s),$(call stage_num,$(s)),$(STAGE_LIBS_SO_FAR)))$(eval $(call STAGE_RULES,$(s),$(call stage_num,$(s)))))

# ---------------------------------------------------------------- the lab
# lab/NN_name/ is stage NN's notebook: kernels and variants that do not ship, their benchmarks,
# tests, journal and logs. It builds like a stage (build/lab/NN_name/liblabNN.a, one program per
# X_main.c, one Criterion binary test_labNN from its test_*.c) and may link every lesson and every
# earlier lab folder; nothing outside lab/ may include or link it (scripts/check_layout.py, run
# with every build). `make lab` builds it, `make test-lab` tests it; `all`, `test` and `grade`
# never touch it.
LAB_DIRS := $(filter $(addprefix lab/,$(STAGE_DIRS)),$(patsubst %/,%,$(wildcard lab/[0-9][0-9]_*/)))
LAB_PROGS :=
LAB_TEST_BINS :=
LAB_LIBS_SO_FAR :=
define LAB_RULES
LAB_PROGS  += $$($(1)_PROGS)
LAB_TEST_BINS += $$($(1)_TBIN)
LAB_LIBS_SO_FAR := $$($(1)_LIB) $$(LAB_LIBS_SO_FAR)
endef
$(foreach s,$(LAB_DIRS),$(eval $(call UNIT_RULES,$(s),lab$(call stage_num,$(s)),$(LAB_LIBS_SO_FAR) $(STAGE_LIBS_SO_FAR)))$(eval $(call LAB_RULES,$(s))))

.PHONY: lab test-lab check-layout
lab: deps check-layout $(COMMON_LIB) $(LAB_PROGS) $(LAB_TEST_BINS)
test-lab: lab
	@BUILD=$(BUILD) scripts/run_tests.sh $(LAB_TEST_BINS) $(if $(LAB_TEST_BINS),,--none "lab: no tests$(if $(HAVE_CRITERION),, (Criterion not found))")

# Every stage README's (and its other .md's) measured tables are what its results/ folder regenerates (make report-NN
# rewrites them; check-reports only compares).
.PHONY: check-reports
check-reports:
	@python3 scripts/report.py --check $(wildcard $(addsuffix /*.md,$(STAGE_DIRS)))

# Dependencies run one way: common/ includes no stage, a stage includes only common/ and earlier
# stages, and nothing outside lab/ includes or links lab/.
check-layout:
	@python3 scripts/check_layout.py

# keep objects of programs (make would delete them as intermediates and relink every time)
.SECONDARY:

# ---------------------------------------------------------------- top-level targets
.PHONY: all deps setup run test tests-only test-common grade fuzz clean student check-markers test-student
all: deps check-markers check-layout $(COMMON_LIB) $(ALL_PROGS) $(TEST_BINS)

# The student edition (scripts/student.py; INSTRUCTORS.md). The marker check runs with every
# build: a nested, unclosed or unlisted region, or a stage's __global__ kernel that is neither in a
# region nor listed as given, fails it.
check-markers:
	@python3 scripts/student.py check

# INSTRUCTORS.md's region and grade tables, generated from the two TSVs (check: compare only).
instructors:
	@python3 scripts/student.py table --write INSTRUCTORS.md
	@python3 scripts/grade.py table --write INSTRUCTORS.md
	@python3 scripts/grade.py table --edition 2026 --write INSTRUCTORS.md

check-instructors:
	@python3 scripts/student.py table --check INSTRUCTORS.md
	@python3 scripts/grade.py table --check INSTRUCTORS.md
	@python3 scripts/grade.py table --edition 2026 --check INSTRUCTORS.md
	@echo "INSTRUCTORS.md: the region and grade tables match the TSVs"

# Each CPU region's marker names the tests that pass once that region alone is written (and fail
# before): REGIONS=id,id for some, all of them by default.
check-regions: all
	@BUILD=$(BUILD) python3 tests/student_selftest.py regions $(REGIONS)

# EDITION=2025|2026: the course's handout that make student and make grade follow (INSTRUCTORS.md).
ifneq ($(filter-out 2025 2026,$(EDITION)),)
$(error make: error: EDITION=$(EDITION) is not an edition of the course's handout; allowed: 2025, 2026)
endif

student:
	@test -n "$(DEST)" || { echo "make student: error: give the place for the student tree: make student DEST=dir [STAGES=01,02]"; exit 2; }
	@python3 scripts/student.py make "$(DEST)" $(if $(STAGES),--stages $(STAGES)) $(if $(WITH_LAB),--with-lab) $(if $(EDITION),--edition $(EDITION))

# The student edition's heavy checks (build a student tree's stage, grade it): CI runs this.
# Run directly, not from inside a Criterion test: the test binaries it grades are Criterion
# programs too, and started below a Criterion worker they abort (SIGABRT, seen in CI).
test-student: all
	@BUILD=$(BUILD) python3 tests/student_selftest.py full

deps:
	@$(DEPS_REPORT)

setup:
	@scripts/setup.sh

# `make test` and `make run` install what is missing first, then re-enter make so that the
# dependency detection above sees what was installed.
JOBS ?= $(shell nproc)
test: setup
	@$(MAKE) --no-print-directory -j$(JOBS) tests-only

tests-only: all
	@BUILD=$(BUILD) scripts/run_tests.sh $(TEST_BINS) $(if $(HAVE_CRITERION),,--none "Criterion not found: no tests were built")

# The GPU suite (on a GPU machine): every test binary, one-GPU binaries spread over the GPUs, the
# stages whose tests start multi-rank jobs on all GPUs, each binary under TEST_GPU_LIMIT seconds.
.PHONY: test-gpu
test-gpu: all
	@BUILD=$(BUILD) scripts/test_gpu.sh --multi "$(foreach s,$(filter $(STAGES_MPI),$(STAGE_DIRS)),$($(s)_TBIN))" $(TEST_BINS)

# The distributed tests of stages 05-11 with their jobs on 2 emulated nodes (scripts/test_emulated.sh;
# about 150 s on 2 cores; not part of `make test`).
.PHONY: test-emulated
test-emulated: deps build-05 build-06 build-07 build-08
	@BUILD=$(BUILD) scripts/test_emulated.sh

# The course's 2026 leaderboard step on 2 GPUs, ours and PyTorch's (07_zero/leaderboard.sh;
# LEADERBOARD_ARGS: --steps N --warmup N --out DIR).
.PHONY: leaderboard
leaderboard: deps build-07
	@BUILD=$(BUILD) 07_zero/leaderboard.sh $(LEADERBOARD_ARGS)

# The same emulation on GPUs over NCCL (2 GPUs or more; without them one line, exit 0).
.PHONY: test-emulated-gpu
test-emulated-gpu: deps build-05 build-06 build-07 build-08
	@BUILD=$(BUILD) scripts/test_emulated.sh --gpu

test-common: deps $(COMMON_TEST_BIN) $(COMMON_PROGS)
	@BUILD=$(BUILD) scripts/run_tests.sh $(COMMON_TEST_BIN)

grade: all
	@python3 scripts/grade.py --build $(BUILD) --out results $(if $(STAGES),--stages $(STAGES)) $(if $(EDITION),--edition $(EDITION))

run: setup
	@$(MAKE) --no-print-directory -j$(JOBS) all
	@BUILD=$(BUILD) scripts/tour.sh

# The roofline of every kernel of stages 01-04 on this GPU (04_flashattn_bwd/README.md,
# "Roofline"): results/roofline/{roofline.csv,roofline.md,roofline.png}. ROOFLINE_ARGS adds
# flags (--only, --iters, ...). Without a GPU the program says so in one line and exits 2, as
# every GPU program and bench-NN here do.
.PHONY: roofline
roofline: deps $(BUILD)/04_flashattn_bwd/roofline
	@$(BUILD)/04_flashattn_bwd/roofline --out results/roofline $(ROOFLINE_ARGS)

FUZZ_SECONDS ?= 60
fuzz:
	@mkdir -p $(BUILD)/fuzz $(BUILD)/fuzz/corpus
	clang -std=c11 -D_GNU_SOURCE -g -O1 -I. -I$(CUDA_HOME)/include -fsanitize=fuzzer,address,undefined \
	  tests/fuzz_npy.c common/npy.c common/check.c common/dtype.c common/fileio.c -o $(BUILD)/fuzz/fuzz_npy
	find tests/fixtures -name '*.npy' -size -4k -exec cp {} $(BUILD)/fuzz/corpus/ \;
	$(BUILD)/fuzz/fuzz_npy -max_total_time=$(FUZZ_SECONDS) -max_len=4096 $(BUILD)/fuzz/corpus

clean:
	rm -rf $(BUILD)

-include $(shell find $(BUILD) $(CUDA_OBJDIR) -name '*.d' 2>/dev/null)
