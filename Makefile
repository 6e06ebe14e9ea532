# CCL: one Makefile, no recursion. Generated and compiled files go to build/.
#
#   make              cclc, libccl, ccl-perf, examples (installs Flex/Bison/MPI if missing)
#   make demo         prove and run an all-reduce on 4 ranks (CPU backend without a GPU)
#   make check        every CPU test (what CI runs)
#   make check-gpu    GPU tests; skip cleanly where no GPU is present
#   make asan         the compiler and runtime tests under ASan+UBSan
#   make fuzz         libFuzzer on the front end (FUZZ_SECONDS=60 by default)
#   make update-golden  regenerate tests' golden plan and CUDA files

CC       ?= cc
BUILD    ?= build
CUDA     ?= /usr/local/cuda
OPT      ?= -O2
CFLAGS_BASE = -std=c11 $(OPT) -g -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes \
              -Wmissing-prototypes -Wno-unused-parameter -D_GNU_SOURCE -pthread
CFLAGS   += $(CFLAGS_BASE) -Icompiler -Iruntime/include -Iruntime/src -I$(BUILD) -I$(CUDA)/include
# Bison and Flex output is not ours to fix; compile it with the warnings it is known to trip off.
GEN_CFLAGS = $(filter-out -Wmissing-prototypes -Wshadow -Wstrict-prototypes,$(CFLAGS)) \
             -Wno-unused-function -Wno-sign-compare -Wno-implicit-fallthrough
LDLIBS   += -pthread -ldl -lm -lrt
# The GPU backend (runtime/src/gpu/*.c) loads libcuda and libnvrtc with dlopen, so it is
# always built; comm.c picks it at run time when a GPU and driver are present.
ifneq ($(wildcard runtime/src/gpu/backend.c),)
CFLAGS   += -DCCL_HAVE_GPU_BACKEND
endif

COMPILER_SRC := $(wildcard compiler/*.c)
# Common code, then the backends, each in its own folder (runtime/src/cpu/, runtime/src/gpu/).
RUNTIME_SRC  := $(wildcard runtime/src/*.c runtime/src/cpu/*.c runtime/src/gpu/*.c)
GEN_SRC      := $(BUILD)/ccl.tab.c $(BUILD)/lex.yy.c
# The cclc driver (check, plan, cuda, run) is a tool over libccl: tools/cclc/*.c.
CCLC_SRC     := $(wildcard tools/cclc/*.c)

COMPILER_OBJ := $(COMPILER_SRC:%.c=$(BUILD)/%.o) $(GEN_SRC:%.c=%.o)
RUNTIME_OBJ  := $(RUNTIME_SRC:%.c=$(BUILD)/%.o)
TOOLS        := $(patsubst tools/%.c,$(BUILD)/%,$(wildcard tools/*.c))
EXAMPLES     := $(patsubst examples/%.c,$(BUILD)/examples/%,$(wildcard examples/*.c))
# Examples that include mpi.h (examples/*_mpi.c) build with mpicc, and only where it exists.
MPICC        ?= mpicc
ifeq ($(shell command -v $(MPICC) 2>/dev/null),)
EXAMPLES     := $(filter-out $(BUILD)/examples/%_mpi,$(EXAMPLES))
endif
TEST_BINS    := $(patsubst tests/%.c,$(BUILD)/tests/%,$(filter-out tests/fuzz/%,$(wildcard tests/*/*.c)))

all: $(BUILD)/cclc $(BUILD)/libccl.a $(TOOLS) $(EXAMPLES) $(TEST_BINS) $(BUILD)/commit.txt

# The commit a build was made from, for the tables made with it (tests/perf/gpu_sweep.sh):
# a copy of the tree on a GPU machine may carry a stale .git. Rewritten only on change.
$(BUILD)/commit.txt: FORCE
	@mkdir -p $(BUILD)
	@c=$$(git describe --always --dirty 2>/dev/null || echo unknown); \
	    [ "$$(cat $@ 2>/dev/null)" = "$$c" ] || echo "$$c" >$@
FORCE:

# A fresh machine gets its build tools on the first make (tools/install-deps.sh).
$(BUILD)/.deps:
	@mkdir -p $(BUILD)
	tools/install-deps.sh
	@touch $@

$(BUILD)/ccl.tab.c $(BUILD)/ccl.tab.h &: grammar/ccl.y | $(BUILD)/.deps
	@mkdir -p $(BUILD)
	bison -Wall -Werror --defines=$(BUILD)/ccl.tab.h -o $(BUILD)/ccl.tab.c $<

$(BUILD)/lex.yy.c $(BUILD)/lex.yy.h &: grammar/ccl.l $(BUILD)/ccl.tab.h
	@mkdir -p $(BUILD)
	flex --header-file=$(BUILD)/lex.yy.h -o $(BUILD)/lex.yy.c $<

$(BUILD)/ccl.tab.o $(BUILD)/lex.yy.o: $(BUILD)/%.o: $(BUILD)/%.c $(BUILD)/ccl.tab.h $(BUILD)/lex.yy.h compiler/cclc.h
	$(CC) $(GEN_CFLAGS) -c -o $@ $<

$(BUILD)/%.o: %.c $(wildcard compiler/*.h runtime/include/*.h runtime/src/*.h runtime/src/*/*.h tools/cclc/*.h) $(BUILD)/ccl.tab.h $(BUILD)/lex.yy.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c -o $@ $<

# Archives are written afresh: ar keeps members whose sources were moved or removed, and
# cpu/backend.o and gpu/backend.o share a member name.
$(BUILD)/libcclc.a: $(COMPILER_OBJ)
	rm -f $@
	ar rcs $@ $^

# libccl carries the compiler objects too, so users link one library.
$(BUILD)/libccl.a: $(RUNTIME_OBJ) $(COMPILER_OBJ)
	rm -f $@
	ar rcs $@ $^

$(BUILD)/cclc: $(CCLC_SRC:%.c=$(BUILD)/%.o) $(BUILD)/libccl.a
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/%: tools/%.c $(BUILD)/libccl.a
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/examples/%_mpi: examples/%_mpi.c $(BUILD)/libccl.a
	@mkdir -p $(dir $@)
	$(MPICC) $(CFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/examples/%: examples/%.c $(BUILD)/libccl.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/tests/%: tests/%.c $(BUILD)/libccl.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

demo: all
	$(BUILD)/cclc check algorithms/allreduce/ring.ccl --ranks 4 --explain
	$(BUILD)/cclc run algorithms/allreduce/ring.ccl --ranks 4 --count 1000003 --dtype bf16 --op sum --iters 3

check: all
	tests/run-all.sh $(BUILD)

check-gpu: all
	tests/run-gpu.sh $(BUILD)

update-golden: all
	UPDATE_GOLDEN=1 tests/run-all.sh $(BUILD)

# The compiler and CPU-runtime suites, built with sanitizers into their own folder.
asan:
	$(MAKE) BUILD=build-asan OPT="-O1 -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer" \
	    all
	ASAN_OPTIONS=detect_leaks=1 tests/run-all.sh build-asan cli diag verify algorithms fuzz runtime perf tuner

FUZZ_SECONDS ?= 60
FUZZ_FLAGS = -std=c11 -g -O1 -fsanitize=address,undefined -fno-omit-frame-pointer -D_GNU_SOURCE
fuzz:
	$(MAKE) BUILD=build-fuzz CC=clang OPT="-O1 -fsanitize=fuzzer-no-link,address,undefined" build-fuzz/libcclc.a
	clang $(FUZZ_FLAGS) -fsanitize=fuzzer -Icompiler -Ibuild-fuzz -o build-fuzz/fuzz_frontend \
	    tests/fuzz/fuzz_frontend.c build-fuzz/libcclc.a -lm
	mkdir -p build-fuzz/corpus
	build-fuzz/fuzz_frontend -max_total_time=$(FUZZ_SECONDS) -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
	    -print_final_stats=1 build-fuzz/corpus tests/fuzz/corpus algorithms/*/ tests/diag/

clean:
	rm -rf build build-asan build-fuzz

.PHONY: all demo check check-gpu update-golden asan fuzz clean FORCE
.SECONDARY:
