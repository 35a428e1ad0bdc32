# tests/fuzz/fuzz.mk — libFuzzer targets (clang, AddressSanitizer + UndefinedBehaviorSanitizer),
# included by the Makefile. docs/reliability.md ("Fuzzing") says what each target checks.
#
#   make fuzz          build BUILD/fuzz/fuzz_pdl, fuzz_listing, fuzz_safetensors and their seeds
#   make fuzz-smoke    run each for FUZZ_SECONDS (60) from its seeds; fails on any crash
#   make fuzz-cov      line coverage of the sources over the corpora (BUILD/fuzz/corpus/*)
#
# fuzz_pdl:          a .pdl source through all of ppc to the rank listings (--emit program), and
#                    each listing back through ppr's parser
# fuzz_listing:      bytes as a rank's listing through ppr's parser (runtime/rt_prog*.c)
# fuzz_safetensors:  bytes as a safetensors file through ppr's reader and writer
#
# A long run by hand, e.g.: nice -n 19 BUILD/fuzz/fuzz_pdl -max_len=4096 -dict=tests/fuzz/pdl.dict
#   BUILD/fuzz/corpus/pdl BUILD/fuzz/seeds/pdl   (the first directory collects the new inputs)

ifndef FUZZ_MK
FUZZ_MK := 1

FUZZ_CC      ?= clang
FUZZ_SECONDS ?= 60
FUZZ_DIR     := $(BUILD)/fuzz
FUZZ_COV_DIR := $(BUILD)/fuzz-cov
FUZZ_SAN     := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
FUZZ_COV     := -fprofile-instr-generate -fcoverage-mapping
FUZZ_BASE    := -std=c11 -g -O1 -D_POSIX_C_SOURCE=200809L -Icommon -Icompiler -Iruntime -I$(GEN)
# ppc's own sources: its exit() returns to the harness (fuzz_pdl.c says how); flex's and bison's
# output is not judged by warnings
FUZZ_PPC_DEF := -Dexit=fuzz_ppc_exit
FUZZ_GEN_W   := -w
FUZZ_TARGETS := fuzz_pdl fuzz_listing fuzz_safetensors
FUZZ_PPC_SRC := $(sort $(COMPILER)) $(GEN)/parser.c $(GEN)/lexer.c $(GEN)/kernels_embed.c
# ppr's parser (the Makefile's RT_PROG) and its file helpers: the Makefile's RUNTIME (safetensors, token data,
# utilities)
FUZZ_RT_SRC  := $(or $(RT_PROG),$(wildcard runtime/rt_prog.c runtime/rt_prog_*.c)) \
                $(or $(RUNTIME),$(wildcard runtime/rt_safetensors.c runtime/rt_st_*.c runtime/rt_data.c runtime/rt_util.c))
FUZZ_HDR     := compiler/ppc.h compiler/ops.def $(GEN)/parser.h $(wildcard common/*.h runtime/*.h)

.PHONY: fuzz fuzz-deps fuzz-seeds fuzz-smoke fuzz-cov

fuzz-deps:
	@sh tests/fuzz/deps.sh $(FUZZ_CC)

# $(call fuzz_variant,DIR,FLAGS): the three targets built into DIR with FLAGS (sanitizers or
# coverage): compiler objects under DIR/obj, each target DIR/NAME
define fuzz_variant
$(1)/obj/%.o: %.c $(FUZZ_HDR) | fuzz-deps
	@mkdir -p $$(dir $$@)
	$(FUZZ_CC) $(FUZZ_BASE) $(2) -fsanitize=fuzzer-no-link -Wall -Wextra \
	  $$(if $$(filter compiler/% $(GEN)/%,$$<),$(FUZZ_PPC_DEF)) \
	  $$(if $$(filter compiler/ppc.c,$$<),-Dmain=ppc_main) \
	  $$(if $$(filter $(GEN)/%,$$<),$(FUZZ_GEN_W)) -c -o $$@ $$<
$(1)/harness/%.o: tests/fuzz/%.c $(FUZZ_HDR) | fuzz-deps
	@mkdir -p $$(dir $$@)
	$(FUZZ_CC) $(FUZZ_BASE) $(2) -fsanitize=fuzzer-no-link -Wall -Wextra -Werror -c -o $$@ $$<
$(1)/fuzz_pdl: $(1)/harness/fuzz_pdl.o $(patsubst %.c,$(1)/obj/%.o,$(FUZZ_PPC_SRC) $(FUZZ_RT_SRC))
	$(FUZZ_CC) $(2) -fsanitize=fuzzer -o $$@ $$^ $(RT_LIBS) -lm
$(1)/fuzz_listing: $(1)/harness/fuzz_listing.o $(patsubst %.c,$(1)/obj/%.o,$(FUZZ_RT_SRC))
	$(FUZZ_CC) $(2) -fsanitize=fuzzer -o $$@ $$^ $(RT_LIBS) -lm
$(1)/fuzz_safetensors: $(1)/harness/fuzz_safetensors.o $(patsubst %.c,$(1)/obj/%.o,$(FUZZ_RT_SRC))
	$(FUZZ_CC) $(2) -fsanitize=fuzzer -o $$@ $$^ $(RT_LIBS) -lm
endef
$(eval $(call fuzz_variant,$(FUZZ_DIR),$(FUZZ_SAN)))
$(eval $(call fuzz_variant,$(FUZZ_COV_DIR),$(FUZZ_COV)))

# seeds: the models of the tree, the listings ppc writes for some of them (tests/fuzz/seeds.sh),
# the small safetensors files of tests/fuzz/seeds/safetensors
fuzz-seeds: $(PPC)
	@sh tests/fuzz/seeds.sh $(BUILD)

fuzz: $(addprefix $(FUZZ_DIR)/,$(FUZZ_TARGETS)) fuzz-seeds

fuzz-smoke: fuzz
	@sh tests/fuzz/smoke.sh $(BUILD) $(FUZZ_SECONDS)

# line coverage: the coverage build runs every input of BUILD/fuzz/corpus/NAME and the seeds once
fuzz-cov: $(addprefix $(FUZZ_COV_DIR)/,$(FUZZ_TARGETS)) fuzz-seeds
	@sh tests/fuzz/cover.sh $(BUILD) $(FUZZ_CC)

endif
