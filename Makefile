# Makefile — builds ppc and ppr, installs what is missing, runs every test.
#
#   make               build build/ppc and build/ppr
#   make test          unit and golden tests; last line "N passed, M failed"
#   make test UPDATE=1 rewrite the golden files (review the diff)
#   make asan          the tests under AddressSanitizer + UndefinedBehaviorSanitizer
#   make demo          the main job: compile tiny.pdl for a mesh, train it over MPI
#   make gpu-check     on a machine with an NVIDIA GPU: the cuda device's first run, one table
#   make install       ppc, ppr, pprun, their man pages, the tools and examples under PREFIX
#                      (default /usr/local; DESTDIR too)
#   make test-hf       ppr against Hugging Face transformers, --tensorboard's files read by the
#                      tensorboard package, ppr's tokenizer.json encoder against the tokenizers
#                      package's (installed from PyPI into a virtualenv)

BUILD  ?= build
CC     ?= gcc
OPT    ?= -O2
SAN    ?=
# Each folder one role: common/ what ppc writes and ppr reads (the listing's facts, the message
# proof, the timeline picture), compiler/ ppc, runtime/ the runtime library libppr.a (runtime/dev/
# its devices), ppr/ the application. -MMD -MP: each object's header dependencies, found by the
# compiler. The include paths say who may include whom: the compiler sees common/ alone.
CFLAGS := -std=c11 $(OPT) -g -Wall -Wextra -Werror -D_POSIX_C_SOURCE=200809L $(SAN) -MMD -MP -Icommon -I$(BUILD)/gen
RT_INC := -Iruntime -Iruntime/dev
TEST_INC := -Icompiler $(RT_INC) -Ippr
LDFLAGS := $(SAN)
LDLIBS := -lm

GEN      := $(BUILD)/gen
COMMON   := $(wildcard common/*.c)
COMPILER := $(wildcard compiler/*.c) $(COMMON)
RT_LIBS  := -ljansson -lxxhash -lpcre2-8 -lutf8proc # the safetensors header JSON; checksums; tokenizer.json's
            # regexes and NFC (Debian: libjansson-dev, libxxhash-dev, libpcre2-dev, libutf8proc-dev)
PARSER   := $(GEN)/parser.c $(GEN)/lexer.c
TEMPLATES := $(sort $(wildcard kernels/*.h))
OBJ      := $(patsubst %.c,$(BUILD)/%.o,$(COMPILER)) $(GEN)/parser.o $(GEN)/lexer.o $(GEN)/kernels_embed.o
PPC_LIB  := $(filter-out $(BUILD)/compiler/ppc.o,$(OBJ)) # ppc's objects but its main: the compiler's unit tests
PPC      := $(BUILD)/ppc

# CUDA (the toolkit at CUDA_HOME, /usr/local/cuda by default): when it is there, ppc compiles each
# stage's CUDA kernels with NVRTC, and ppr has the cuda device (cuBLASLt, NCCL; libcuda, the
# driver, is loaded when the device is opened, so ppr starts on machines without one). Without
# it, both build without CUDA and say so when asked for it.
comma := ,
CUDA_HOME ?= $(wildcard /usr/local/cuda)
HAVE_CUDA := $(and $(CUDA_HOME),$(wildcard $(CUDA_HOME)/include/nvrtc.h),$(wildcard $(CUDA_HOME)/include/cublasLt.h),$(wildcard $(CUDA_HOME)/include/nccl.h))
CUDA_LIBDIR := $(if $(HAVE_CUDA),$(firstword $(wildcard $(CUDA_HOME)/lib64 $(CUDA_HOME)/lib)))
NVRTC_CFLAGS := $(if $(HAVE_CUDA),-DPPC_NVRTC -isystem $(CUDA_HOME)/include)
NVRTC_LIBS   := $(if $(HAVE_CUDA),-L$(CUDA_LIBDIR) -Wl$(comma)-rpath$(comma)$(CUDA_LIBDIR) -lnvrtc)
CUDA_CFLAGS  := $(if $(HAVE_CUDA),-DPPR_CUDA -isystem $(CUDA_HOME)/include)
# cuBLASLt and NCCL are loaded when the cuda device starts (rt_util_load_lib), found through this run path
CUDA_LIBS    := $(if $(HAVE_CUDA),-Wl$(comma)-rpath$(comma)$(CUDA_LIBDIR))

# ppr: the runtime. OpenBLAS's cblas.h (Debian: libopenblas-dev) is also reachable as <cblas.h>
# through the alternatives link; the -I makes sure the OpenBLAS one is used. Recursive `=`: the
# wildcard is looked at when a recipe runs, after deps.sh may have installed the package.
BLAS_HDR  = $(firstword $(wildcard $(foreach v,pthread openmp serial,/usr/include/x86_64-linux-gnu/openblas-$(v)/cblas.h)))
BLAS_INC  = $(if $(BLAS_HDR),-I$(patsubst %/,%,$(dir $(BLAS_HDR))))
# MPI (Debian: libopenmpi-dev, openmpi-bin): the flags of Open MPI's compiler wrapper, or of
# pkg-config's ompi-c; its headers as system headers (-isystem), so -Wall -Wextra -Werror judge
# our code only. Recursive `=`, as for BLAS: looked at after deps.sh may have installed it.
MPI_CFLAGS = $(patsubst -I%,-isystem %,$(shell mpicc --showme:compile 2>/dev/null || pkg-config --cflags ompi-c 2>/dev/null))
MPI_LIBS   = $(shell mpicc --showme:link 2>/dev/null || pkg-config --libs ompi-c 2>/dev/null)
# OpenCL (Debian: ocl-icd-opencl-dev, opencl-headers; the CPU's driver pocl-opencl-icd) and
# CLBlast (libclblast-dev) for the opencl device.
# oneDNN (libdnnl-dev) for the cpu device's bf16 GEMMs; without it they widen to f32 for OpenBLAS.
# Recursive `=`: looked at after deps.sh may have installed it.
DNNL_HDR  = $(wildcard /usr/include/dnnl.h)
DNNL_CFLAGS = $(if $(DNNL_HDR),-DPPR_DNNL)
PPR_LIBS  = -lopenblas -lclblast -lOpenCL $(if $(DNNL_HDR),-ldnnl) $(RT_LIBS) -ldl -lm -fopenmp $(MPI_LIBS) $(CUDA_LIBS)
RT_PROG  := runtime/rt_prog.c $(wildcard runtime/rt_prog_*.c) # the listing parser
RT_SRC   := $(wildcard runtime/*.c runtime/dev/*.c) $(COMMON)
RT_OBJ   := $(patsubst %.c,$(BUILD)/%.o,$(RT_SRC))
LIBPPR   := $(BUILD)/libppr.a
PPR_OBJ  := $(patsubst ppr/%.c,$(BUILD)/ppr-obj/%.o,$(wildcard ppr/*.c)) # beside the ppr binary, not in a ppr/
PPR      := $(BUILD)/ppr
PPRUN    := $(BUILD)/pprun # the launcher (pprun/): mpirun with a safe stop

.PHONY: all deps test test-torch test-hf asan demo clean gpu-check format install
all: $(PPC) $(PPR) $(PPRUN)

# ---- set-up: tools the build needs, installed with apt-get when root --------------------------
deps:
	@sh tests/deps.sh

$(GEN)/parser.c: grammar/parser.y | deps
	@mkdir -p $(GEN)
	bison -Wall -Werror --defines=$(GEN)/parser.h -o $@ $<
$(GEN)/parser.h: $(GEN)/parser.c
$(GEN)/lexer.c: grammar/lexer.l $(GEN)/parser.h | deps
	@mkdir -p $(GEN)
	flex -o $@ $<

# kernels/prelude_LANG.h, pasted before every generated kernel source: embedded in ppc as the
# strings ppk_prelude_LANG
$(GEN)/kernels_embed.c: $(TEMPLATES) Makefile
	@mkdir -p $(GEN)
	@{ echo '/* generated from the kernel preludes in kernels/ */'; \
	  for f in $(TEMPLATES); do n=$$(basename $$f .h); echo "const char ppk_$$n[] ="; \
	    sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/^/"/' -e 's/$$/\\n"/' $$f; echo ';'; done; } > $@
$(GEN)/kernels_embed.o: $(GEN)/kernels_embed.c
	$(CC) $(CFLAGS) -c -o $@ $<

# flex's output is not -Wextra clean; the grammar sources are, and are what we review
$(GEN)/lexer.o: $(GEN)/lexer.c
	$(CC) $(filter-out -Wextra,$(CFLAGS)) -Icompiler -Wno-unused-function -Wno-sign-compare -c -o $@ $<
$(GEN)/parser.o: $(GEN)/parser.c
	$(CC) $(CFLAGS) -Icompiler -c -o $@ $<

# the compiler's switches over its enums list every case: a half-added op does not compile
PPC_WARN := -Wswitch-enum
$(BUILD)/compiler/%.o: compiler/%.c | $(GEN)/parser.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Icompiler $(PPC_WARN) $(if $(filter %/cg_nvrtc.o,$@),$(NVRTC_CFLAGS)) -c -o $@ $<
$(BUILD)/common/%.o: common/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(PPC_WARN) -c -o $@ $<

# ppc links jansson too: --from-hf reads a Hugging Face config.json (compiler/hf_import.c)
$(PPC): $(OBJ)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) $(RT_LIBS) $(NVRTC_LIBS)

$(BUILD)/runtime/%.o: runtime/%.c | deps
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(RT_INC) $(BLAS_INC) $(MPI_CFLAGS) $(CUDA_CFLAGS) $(if $(filter %/rt_dev_cpu.o,$@),$(DNNL_CFLAGS)) -c -o $@ $<

# the cpu device shares each GEMM over the kernels' OpenMP threads (PPR_LIBS links libgomp)
$(BUILD)/runtime/dev/rt_dev_cpu.o: CFLAGS += -fopenmp

$(LIBPPR): $(RT_OBJ)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/ppr-obj/%.o: ppr/%.c | deps
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(RT_INC) -Ippr $(MPI_CFLAGS) $(CUDA_CFLAGS) -c -o $@ $<

$(PPR): $(PPR_OBJ) $(LIBPPR)
	$(CC) $(LDFLAGS) -o $@ $^ $(PPR_LIBS)

$(PPRUN): pprun/pprun.c $(LIBPPR)
	$(CC) $(CFLAGS) $(RT_INC) -MF $(BUILD)/pprun.d -o $@ $< $(LIBPPR) $(LDFLAGS) $(PPR_LIBS)

-include $(patsubst %.o,%.d,$(OBJ) $(RT_OBJ) $(PPR_OBJ)) $(BUILD)/pprun.d

# ---- tests ------------------------------------------------------------------------------------
UNIT := $(BUILD)/test_bpe $(BUILD)/test_io $(BUILD)/test_gemm $(BUILD)/test_kernels $(BUILD)/test_attention $(BUILD)/test_nvrtc $(BUILD)/test_ppr $(BUILD)/test_fixtures $(BUILD)/test_pipeline $(BUILD)/test_gradcheck $(BUILD)/test_tp $(BUILD)/test_partition $(BUILD)/test_sched $(BUILD)/test_kmath $(BUILD)/test_kir
$(BUILD)/test_io: tests/unit/test_io.c $(LIBPPR)
	$(CC) $(CFLAGS) $(TEST_INC) -o $@ tests/unit/test_io.c $(LIBPPR) $(LDFLAGS) $(PPR_LIBS)
# the row-major to column-major GEMM mapping of the cuda device, through OpenBLAS
$(BUILD)/test_gemm: tests/unit/test_gemm.c $(LIBPPR)
	$(CC) $(CFLAGS) $(TEST_INC) $(BLAS_INC) -o $@ tests/unit/test_gemm.c $(LIBPPR) $(LDFLAGS) $(PPR_LIBS)

# every generated kernel and GEMM on the cpu and the opencl device, compared
# the kernel preludes' math (ppk_exp), as the generated C kernels include it
$(BUILD)/test_kmath: tests/unit/test_kmath.c tests/unit/check.h kernels/prelude_c.h common/pp_dtype.h
	$(CC) $(CFLAGS) -Ikernels -o $@ tests/unit/test_kmath.c $(LDFLAGS) -lm
$(BUILD)/test_kernels: tests/unit/test_kernels.c $(LIBPPR)
	$(CC) $(CFLAGS) $(TEST_INC) -o $@ tests/unit/test_kernels.c $(LIBPPR) $(LDFLAGS) $(PPR_LIBS)
# the fused attention's kernels against attention in double, on the cpu and the opencl device
$(BUILD)/test_attention: tests/unit/test_attention.c tests/unit/check.h tests/unit/test_util.h $(LIBPPR)
	$(CC) $(CFLAGS) $(TEST_INC) -o $@ tests/unit/test_attention.c $(LIBPPR) $(LDFLAGS) $(PPR_LIBS)
# ppc's cubins: every stage of the examples, reproducible, every --arch, NVRTC's failures (it calls
# cg_nvrtc itself, so it links ppc's objects)
$(BUILD)/test_nvrtc: tests/unit/test_nvrtc.c $(PPC_LIB)
	$(CC) $(CFLAGS) $(TEST_INC) -o $@ $^ $(LDFLAGS) $(LDLIBS) $(RT_LIBS) $(NVRTC_LIBS)
# the balanced pipeline partition against the dynamic program it replaced
$(BUILD)/test_partition: tests/unit/test_partition.c $(PPC_LIB)
	$(CC) $(CFLAGS) $(TEST_INC) -o $@ $^ $(LDFLAGS) $(LDLIBS) $(RT_LIBS) $(NVRTC_LIBS)
# the kernel IR's builder, as the C renderer prints what it builds
$(BUILD)/test_kir: tests/unit/test_kir.c tests/unit/check.h tests/unit/test_util.h $(PPC_LIB)
	$(CC) $(CFLAGS) $(TEST_INC) -o $@ $< $(PPC_LIB) $(LDFLAGS) $(LDLIBS) $(RT_LIBS) $(NVRTC_LIBS)
$(BUILD)/test_sched: tests/unit/test_sched.c $(PPC_LIB)
	$(CC) $(CFLAGS) $(TEST_INC) -o $@ $^ $(LDFLAGS) $(LDLIBS) $(RT_LIBS) $(NVRTC_LIBS)
# ppr's tokenizer.json encoder against the tokenizers package's ids (tests/fixtures/tokenizers)
$(BUILD)/test_bpe: tests/unit/test_bpe.c tests/unit/check.h $(BUILD)/ppr-obj/ppr_bpe.o
	$(CC) $(CFLAGS) $(TEST_INC) -o $@ tests/unit/test_bpe.c $(BUILD)/ppr-obj/ppr_bpe.o $(LIBPPR) $(LDFLAGS) $(PPR_LIBS)
# test_ppr runs $(BUILD)/ppr (found next to itself) on hand-written listings and kernels
$(BUILD)/test_ppr: tests/unit/test_ppr.c $(BUILD)/ppr-obj/ppr_gen.o $(BUILD)/ppr-obj/ppr_bpe.o $(LIBPPR)
	$(CC) $(CFLAGS) $(TEST_INC) $(MPI_CFLAGS) $(CUDA_CFLAGS) -o $@ tests/unit/test_ppr.c $(BUILD)/ppr-obj/ppr_gen.o \
	  $(BUILD)/ppr-obj/ppr_bpe.o \
	  $(LIBPPR) $(LDFLAGS) $(PPR_LIBS)

# bench/kbench.sh's harness: each kernel of a listing alone (tests/scripts/kbench.sh runs it)
$(BUILD)/kbench: bench/kbench.c $(LIBPPR)
	$(CC) $(CFLAGS) $(TEST_INC) -fopenmp -o $@ bench/kbench.c $(LIBPPR) $(LDFLAGS) $(PPR_LIBS)

# golden numerics against the PyTorch reference's fixtures
$(BUILD)/test_fixtures: tests/unit/test_fixtures.c $(LIBPPR)
	$(CC) $(CFLAGS) $(TEST_INC) -o $@ tests/unit/test_fixtures.c $(LIBPPR) $(LDFLAGS) $(PPR_LIBS)

# per-op finite-difference gradient checks of the small models in tests/gradcheck/
$(BUILD)/test_gradcheck: tests/unit/test_gradcheck.c $(LIBPPR)
	$(CC) $(CFLAGS) $(TEST_INC) -o $@ tests/unit/test_gradcheck.c $(LIBPPR) $(LDFLAGS) $(PPR_LIBS)

# every mesh and schedule against the one-rank run, over MPI
$(BUILD)/test_pipeline: tests/unit/test_pipeline.c $(LIBPPR)
	$(CC) $(CFLAGS) $(TEST_INC) -o $@ tests/unit/test_pipeline.c $(LIBPPR) $(LDFLAGS) $(PPR_LIBS)

# tensor and data parallelism: the allreduce (run by itself under mpirun), shards, start-up checks
$(BUILD)/test_tp: tests/unit/test_tp.c $(LIBPPR)
	$(CC) $(CFLAGS) $(TEST_INC) $(MPI_CFLAGS) -o $@ tests/unit/test_tp.c $(LIBPPR) $(LDFLAGS) $(PPR_LIBS)

test: $(PPC) $(PPR) $(PPRUN) $(UNIT) $(BUILD)/kbench
	@sh tests/run.sh $(BUILD) $(if $(UPDATE),--update)

# the PyTorch reference, live: regenerate the fixtures with torch and compare ppr against them
TORCH_PY ?= /usr/bin/python3
test-torch: $(PPC) $(PPR) $(BUILD)/test_fixtures
	@$(TORCH_PY) -c 'import torch' 2>/dev/null || { \
	  echo "test-torch needs PyTorch for $(TORCH_PY): apt-get install python3-torch"; exit 1; }
	rm -rf $(BUILD)/torch-fixtures
	$(TORCH_PY) tests/reference/gen_fixtures.py --out $(BUILD)/torch-fixtures --selfcheck
	PPC_FIXTURES=$(BUILD)/torch-fixtures $(BUILD)/test_fixtures

# ppr against Hugging Face transformers (tests/hf_client/check_hf.py): a virtualenv over TORCH_PY
# (its system site packages: Debian's torch) with transformers from PyPI, which works with torch 1.13
HF_VENV ?= $(BUILD)/hf-venv
TRANSFORMERS_VERSION ?= 4.45.2
TENSORBOARD_VERSION ?= 2.21.0
test-hf: $(PPC) $(PPR) $(BUILD)/test_bpe
	@$(TORCH_PY) -c 'import torch' 2>/dev/null || { \
	  echo "test-hf needs PyTorch for $(TORCH_PY): apt-get install python3-torch"; exit 1; }
	@$(HF_VENV)/bin/python -c 'import transformers, tensorboard' 2>/dev/null || { \
	  rm -rf $(HF_VENV) && $(TORCH_PY) -m venv --system-site-packages $(HF_VENV) && \
	  $(HF_VENV)/bin/pip install -q "transformers==$(TRANSFORMERS_VERSION)" "tensorboard==$(TENSORBOARD_VERSION)" \
	    "numpy<2"; } || { \
	  echo "test-hf: could not install transformers $(TRANSFORMERS_VERSION) and tensorboard $(TENSORBOARD_VERSION)" \
	    "from PyPI into $(HF_VENV) (no network?)"; \
	  rm -rf $(HF_VENV); exit 1; }
	$(HF_VENV)/bin/python tests/hf_client/check_hf.py $(BUILD)
	$(HF_VENV)/bin/python tests/hf_client/check_tb.py $(BUILD)
	@# the tokenizer fixtures made again by this tokenizers package, ppr's encoder against them
	d=$$(mktemp -d) && $(HF_VENV)/bin/python tests/reference/make_tokenizers.py $$d && \
	  $(BUILD)/test_bpe $$d; rc=$$?; rm -rf $$d; exit $$rc

# the cuda device on a real GPU: fixtures, two ranks on one GPU, GPT-2 124M throughput (tests/gpu/)
gpu-check: $(PPC) $(PPR) $(BUILD)/test_fixtures $(BUILD)/test_pipeline
	@sh tests/gpu/check.sh $(BUILD)

# (the hostile-input cases get five times their time: a sanitizer build is that much slower)
# PoCL compiles the opencl kernels under the sanitizers very slowly (minutes per program): the
# kernels PoCL compiled for an earlier `make test` are the same, so its cache seeds build-asan's
# (the kernels build-asan's lacks, each run: PoCL's compiler leaks, tests/lsan-mpi.supp says so)
asan:
	@if [ -d $(BUILD)/pocl-cache ]; then mkdir -p build-asan/pocl-cache && cp -ru $(BUILD)/pocl-cache/. build-asan/pocl-cache/; fi
	HOSTILE_TIMEOUT=300 $(MAKE) BUILD=build-asan OPT=-O1 \
	  SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all" test

# the main job: compile tiny.pdl (and its generation programs) for a mesh and train it over MPI on
# the CPU on the built-in text, its last tenth held out: warmup and cosine decay, the validation
# loss every 50 steps, a checkpoint every 100, a sample of text at the end; then how to resume
DEMO_MESH  ?= --tp 2 --pp 2
DEMO_RANKS ?= 4
DEMO_STEPS ?= 300
DEMO_RUN   ?= $(BUILD)/demo-run
MPIRUN     ?= mpirun --oversubscribe --allow-run-as-root -x OMP_NUM_THREADS=1
DEMO_OPTS   = --steps $(DEMO_STEPS) --lr 3e-3 --clip 1 --lr-schedule cosine --warmup 30 --val-frac 0.1 \
              --eval-every 50 --save $(DEMO_RUN) --save-every 100 --keep 2 --log $(DEMO_RUN).jsonl
DEMO_SAMPLE = --prompt 'The clock ' --temperature 0.8 --top-k 20
demo: $(PPC) $(PPR) $(PPRUN)
	$(PPC) examples/tiny.pdl $(DEMO_MESH) --micro-batch 4 --microbatches 8 --generate -o $(BUILD)/demo
	rm -rf $(DEMO_RUN) $(DEMO_RUN).jsonl $(DEMO_RUN).svg
	$(PPRUN) $(BUILD)/demo $(DEMO_OPTS) --sample-every $(DEMO_STEPS) --sample-len 200 $(DEMO_SAMPLE)
	@echo
	@echo "Checkpoints: $$(ls -d $(DEMO_RUN)/step-* | tr '\n' ' ')(the last 2; Ctrl-C saves one and stops)."
	@echo "The curves: $(DEMO_RUN).svg (from the log $(DEMO_RUN).jsonl)."
	@echo "Continue a stopped run from its last checkpoint (it keeps the run's options and log):"
	@echo "  $(PPRUN) $(BUILD)/demo --resume $(DEMO_RUN)/step-000200"
	@echo "Sample from a checkpoint:"
	@echo "  $(PPRUN) $(BUILD)/demo --init $(DEMO_RUN)/step-$$(printf %06d $(DEMO_STEPS)) --generate 300 $(DEMO_SAMPLE)"

# the one style of .clang-format, applied (tests/scripts/lint_format.sh checks it in make test)
FORMATTED = $(shell git ls-files 'common/*.[ch]' 'compiler/*.[ch]' 'runtime/*.[ch]' 'ppr/*.[ch]' 'pprun/*.[ch]' 'tests/unit/*.[ch]' \
              'tests/fuzz/*.c' 2>/dev/null)
format:
	clang-format -i $(FORMATTED)

# ---- install: the binaries (the kernels' preludes are inside ppc), man pages made from --help by
# help2man (so they say what the binaries do), the tools and the examples --------------------------
PREFIX  ?= /usr/local
MANDIR   = $(DESTDIR)$(PREFIX)/share/man/man1
SHAREDIR = $(DESTDIR)$(PREFIX)/share/ppr
MAN1    := $(BUILD)/man/ppc.1 $(BUILD)/man/ppr.1 $(BUILD)/man/pprun.1
MAN_WHAT_ppc   = compiles a model written in the .pdl language into one program per rank
MAN_WHAT_ppr   = runs one rank of the programs ppc writes: training, evaluation, text
MAN_WHAT_pprun = starts ppr on every rank of a stage directory with mpirun, so that Ctrl-C saves
$(BUILD)/man/%.1: $(BUILD)/% | deps
	@mkdir -p $(BUILD)/man
	help2man --no-info --no-discard-stderr -n "$(MAN_WHAT_$*)" -o $@ ./$<
install: all $(MAN1)
	install -d $(DESTDIR)$(PREFIX)/bin $(MANDIR) $(SHAREDIR)/tools $(SHAREDIR)/examples
	install -m 755 $(PPC) $(PPR) $(PPRUN) $(DESTDIR)$(PREFIX)/bin/
	install -m 644 $(MAN1) $(MANDIR)/
	install -m 755 tools/tokenize.py tools/ppr_log.py $(SHAREDIR)/tools/
	install -m 644 examples/*.pdl $(SHAREDIR)/examples/

clean:
	rm -rf build build-asan

# libFuzzer harnesses: make fuzz, make fuzz-smoke (CI), make fuzz-cov (tests/fuzz/fuzz.mk)
include tests/fuzz/fuzz.mk
