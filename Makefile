# CCL: one Makefile (none in subfolders). Generated and compiled files go to build/.
#
#   make              cclc, libccl (libccl.a and libccl.so), ccl-perf, examples; installs
#                     nothing (needs Flex and Bison: `make deps`)
#   make deps         install what is missing for building and `make check`: Flex, Bison,
#                     Open MPI, pkg-config (FOR="build fuzz ..." picks other targets'
#                     needs; deps-fuzz: clang's libFuzzer runtime for make fuzz);
#                     tools/install-deps.sh
#   make demo         prove and run an all-reduce on 4 ranks (CPU backend without a GPU)
#   make check        every CPU test (what CI runs)
#   make check-gpu    GPU tests; skip cleanly where no GPU is present
#   make asan         the compiler and runtime tests under ASan+UBSan
#   make fuzz         libFuzzer on the front end (FUZZ_SECONDS=60 by default)
#   make update-golden  regenerate tests' golden plan and CUDA files
#   make install      cclc, ccl-perf, ccl-tune, ccl.h, ccl_mpi.h, libccl.so and libccl.a,
#                     ccl.pc, ccl-static.pc and the shipped algorithms under PREFIX (/usr/local; DESTDIR
#                     for staging), and libccl_nccl.so (NCCL's API over libccl, docs/nccl.md) with
#                     ccl_nccl/nccl.h and ccl-nccl.pc; make uninstall removes them
# demo, check, asan and fuzz run the deps step first, so they set up a fresh machine.

CC       ?= cc
BUILD    ?= build
CUDA     ?= /usr/local/cuda
OPT      ?= -O2
CFLAGS_BASE = -std=c11 $(OPT) -g -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes \
              -Wmissing-prototypes -Wno-unused-parameter -D_GNU_SOURCE -pthread
CFLAGS   += $(CFLAGS_BASE) -Icompiler -Iruntime/include -Iruntime/src -I$(BUILD)
# Bison and Flex output is not ours to fix; compile it with the warnings it is known to trip off.
GEN_CFLAGS = $(filter-out -Wmissing-prototypes -Wshadow -Wstrict-prototypes,$(CFLAGS)) \
             -Wno-unused-function -Wno-sign-compare -Wno-implicit-fallthrough
LDLIBS   += -pthread -ldl -lm -lrt
# The GPU backend (runtime/src/gpu/*.c) loads libcuda and libnvrtc with dlopen, so it links
# no CUDA library, but it compiles against the toolkit's cuda.h: it is built wherever
# $(CUDA)/include/cuda.h exists, and comm.c picks it at run time when a GPU and driver are
# present. Without cuda.h libccl has the CPU backend only, and the tests and tools that
# include the backend's headers (tests/gpu/, tests/runtime/gpu_placement.c) are not built;
# the JIT (gpu/jit.c: NVRTC by dlopen, no CUDA header) is, for tests/cuda's goldens.
HAVE_GPU_BACKEND := $(and $(wildcard runtime/src/gpu/backend.c),$(wildcard $(CUDA)/include/cuda.h))
ifneq ($(HAVE_GPU_BACKEND),)
CFLAGS   += -I$(CUDA)/include -DCCL_HAVE_GPU_BACKEND
GPU_SRC      := $(wildcard runtime/src/gpu/*.c)
# The point-to-point kernel's source (runtime/src/gpu/p2p.cu), as a C string.
GPU_GEN_OBJ  := $(BUILD)/p2p_cu.o
else
GPU_SRC      := $(wildcard runtime/src/gpu/jit.c)
# Said once per make (not again by the sub-makes of check, demo and the like), and not
# for goals that build nothing.
ifeq ($(MAKELEVEL),0)
ifneq ($(filter-out clean deps deps-fuzz uninstall,$(or $(MAKECMDGOALS),all)),)
$(info note: $(CUDA)/include/cuda.h not found: building libccl without the GPU backend (CPU backend only; set \
CUDA=/path/to/cuda to build it))
endif
endif
endif

# What every object is compiled with, for $(BUILD)/cflags.txt (taken here, before any
# target adds to CFLAGS).
OBJ_FLAGS    := $(CC) $(CFLAGS)

COMPILER_SRC := $(wildcard compiler/*.c)
# Common code, then the backends, each in its own folder (runtime/src/cpu/, runtime/src/gpu/).
RUNTIME_SRC  := $(wildcard runtime/src/*.c runtime/src/cpu/*.c) $(GPU_SRC)
GEN_SRC      := $(BUILD)/ccl.tab.c $(BUILD)/lex.yy.c
# The cclc driver (check, plan, cuda, run) is a tool over libccl: tools/cclc/*.c.
CCLC_SRC     := $(wildcard tools/cclc/*.c)

COMPILER_OBJ := $(COMPILER_SRC:%.c=$(BUILD)/%.o) $(GEN_SRC:%.c=%.o) $(BUILD)/prelude_cuh.o
# The built-in tuning tables (runtime/tune/*.tbl) are compiled in: $(BUILD)/tune_tables.c.
TUNE_TABLES  := $(sort $(wildcard runtime/tune/*.tbl))
RUNTIME_OBJ  := $(RUNTIME_SRC:%.c=$(BUILD)/%.o) $(BUILD)/tune_tables.o $(GPU_GEN_OBJ)
# The library's objects are position-independent: they go into libccl.so as well as
# libccl.a, and a program or a Python extension may link libccl.a into a shared object.
# `private`: the flag stays with these objects and is not passed on to their prerequisites.
$(RUNTIME_OBJ) $(COMPILER_OBJ): private CFLAGS += -fPIC
# The harness the tools share (options, launch, data, timing): tools/common/*.c, linked
# into ccl-perf, ccl-tune and cclc as one archive.
TOOLS_COMMON_OBJ := $(patsubst %.c,$(BUILD)/%.o,$(wildcard tools/common/*.c))
# ccl-perf (tools/perf/*.c) and ccl-tune (tools/tune/*.c), each from its folder.
TOOLS        := $(BUILD)/ccl-perf $(BUILD)/ccl-tune
EXAMPLES     := $(patsubst examples/%.c,$(BUILD)/examples/%,$(wildcard examples/*.c))
# Examples that include mpi.h (examples/*_mpi.c) build with mpicc, and only where it exists.
MPICC        ?= mpicc
ifeq ($(shell command -v $(MPICC) 2>/dev/null),)
EXAMPLES     := $(filter-out $(BUILD)/examples/%_mpi,$(EXAMPLES))
endif
# tests/fuzz builds its own; tests/install builds its program against the installed libccl;
# tests/nccl's programs link libccl_nccl.so (NCCL_TEST_BINS below); tests/cuda/int_ops.c is
# built by its suite around what cclc emits.
TEST_BINS    := $(patsubst tests/%.c,$(BUILD)/tests/%,$(filter-out tests/fuzz/% tests/install/% tests/nccl/% \
                  tests/cuda/int_ops.c tests/multinode/%,$(wildcard tests/*/*.c)))
# tests/multinode: MPI programs (docs/multinode.md), built with mpicc where it exists.
ifneq ($(shell command -v $(MPICC) 2>/dev/null),)
TEST_BINS    += $(patsubst tests/%.c,$(BUILD)/tests/%,$(wildcard tests/multinode/*.c))
endif
ifeq ($(HAVE_GPU_BACKEND),)
TEST_BINS    := $(filter-out $(BUILD)/tests/gpu/% $(BUILD)/tests/runtime/gpu_%,$(TEST_BINS))
endif

# libccl_nccl.so: NCCL's API over libccl (runtime/nccl/, docs/nccl.md), for programs
# linked against NCCL and for LD_PRELOAD under torch. It stands on libccl.so's public API
# alone: it links libccl.so (found next to it, RUNPATH $ORIGIN, in the build folder and
# where make install puts both), its objects see runtime/include and their own folder,
# not runtime/src, and it exports NCCL's functions only (runtime/nccl/libccl_nccl.map,
# unversioned as NVIDIA's are). Its sources compile against NVIDIA's nccl.h where the
# toolkit has one, so every definition is checked against NCCL's own prototypes, and
# then once more against runtime/nccl/nccl.h, the copy used where there is none
# (NCCL_HEADER_CHECK).
NCCL_SRC      := $(wildcard runtime/nccl/*.c)
NCCL_OBJ      := $(NCCL_SRC:%.c=$(BUILD)/%.o)
NCCL_SYSTEM_H := $(wildcard $(CUDA)/include/nccl.h)
NCCL_HEADER_FLAGS := $(if $(NCCL_SYSTEM_H),-DCCL_NCCL_SYSTEM_HEADER -isystem $(CUDA)/include,-Iruntime/nccl)
NCCL_CFLAGS   = $(CFLAGS_BASE) -fPIC -Iruntime/include $(NCCL_HEADER_FLAGS)
NCCL_SONAME   = libccl_nccl.so.$(VERSION_MAJOR)
NCCL_HEADER_CHECK := $(if $(NCCL_SYSTEM_H),$(BUILD)/runtime/nccl/own-header.ok)
NCCL_TEST_BINS := $(patsubst tests/%.c,$(BUILD)/tests/%,$(wildcard tests/nccl/*.c)) $(BUILD)/tests/nccl/abi_dump_own \
                  $(BUILD)/tests/nccl/libfake_nccl.so

# The library's version is set in one place, runtime/include/ccl.h (CCL_VERSION_MAJOR,
# _MINOR, _PATCH, which ccl_version() returns as a string); the shared library's file
# names follow it: libccl.so.MAJOR.MINOR.PATCH, its soname libccl.so.MAJOR (bump MAJOR
# when the ABI breaks), and libccl.so for the linker.
ccl_version_part = $(shell sed -n 's/^\#define CCL_VERSION_$(1) \([0-9][0-9]*\)$$/\1/p' runtime/include/ccl.h)
VERSION_MAJOR := $(call ccl_version_part,MAJOR)
VERSION      := $(VERSION_MAJOR).$(call ccl_version_part,MINOR).$(call ccl_version_part,PATCH)
SONAME       := libccl.so.$(VERSION_MAJOR)

all: $(BUILD)/cclc $(BUILD)/libccl.a $(BUILD)/libccl.so $(TOOLS) $(EXAMPLES) $(TEST_BINS) $(BUILD)/commit.txt \
     $(BUILD)/libccl_nccl.so $(NCCL_TEST_BINS) $(NCCL_HEADER_CHECK)

# The commit a build was made from, for the tables made with it (tests/perf/gpu_sweep.sh):
# a copy of the tree on a GPU machine may carry a stale .git. Rewritten only on change.
$(BUILD)/commit.txt: FORCE
	@mkdir -p $(BUILD)
	@c=$$(git describe --always --dirty 2>/dev/null || echo unknown); \
	    [ "$$(cat $@ 2>/dev/null)" = "$$c" ] || echo "$$c" >$@
FORCE:

# The compiler and flags the objects were built with: every object depends on this file,
# rewritten only when they change, so a build folder made with other flags (another OPT,
# or library objects from before -fPIC) is rebuilt rather than mixed.
$(BUILD)/cflags.txt: FORCE
	@mkdir -p $(BUILD)
	@f='$(OBJ_FLAGS) (library objects: -fPIC)'; [ "$$(cat $@ 2>/dev/null)" = "$$f" ] || echo "$$f" >$@

# Installing system packages is one explicit step: `make deps` (tools/install-deps.sh
# installs only what is missing for FOR, default check: Flex, Bison, Open MPI,
# pkg-config), or `make deps-fuzz` (adds clang's libFuzzer runtime). A plain make
# installs nothing; it stops at the grammar with a message naming `make deps` when Flex
# or Bison is missing. INSTALL_DEPS=: skips the step in demo, check, asan and fuzz (a
# machine without a network whose build folder, generated parser included, was carried:
# bench/one-gpu-session.sh).
FOR ?= check
INSTALL_DEPS ?= tools/install-deps.sh
deps:
	$(INSTALL_DEPS) $(FOR)
deps-fuzz:
	$(INSTALL_DEPS) fuzz
need_tool = @command -v $(1) >/dev/null 2>&1 || { echo "error: $(1) is missing: run 'make deps' to install \
    what building CCL needs (Flex, Bison, Open MPI; see tools/install-deps.sh)" >&2; exit 1; }

$(BUILD)/ccl.tab.c $(BUILD)/ccl.tab.h &: grammar/ccl.y
	$(call need_tool,bison)
	$(call need_tool,flex)
	@mkdir -p $(BUILD)
	bison -Wall -Werror --defines=$(BUILD)/ccl.tab.h -o $(BUILD)/ccl.tab.c $<

$(BUILD)/lex.yy.c $(BUILD)/lex.yy.h &: grammar/ccl.l $(BUILD)/ccl.tab.h
	$(call need_tool,flex)
	@mkdir -p $(BUILD)
	flex --header-file=$(BUILD)/lex.yy.h -o $(BUILD)/lex.yy.c $<

$(BUILD)/ccl.tab.o $(BUILD)/lex.yy.o: $(BUILD)/%.o: $(BUILD)/%.c $(BUILD)/ccl.tab.h $(BUILD)/lex.yy.h compiler/cclc.h $(BUILD)/cflags.txt
	$(CC) $(GEN_CFLAGS) -c -o $@ $<

# The device prelude every kernel starts with, as a C string for emit_cuda.c: prelude.cuh
# with abi.h inlined (NVRTC compiles with no include path).
$(BUILD)/prelude_cuh.c: compiler/cuda/prelude.cuh compiler/cuda/abi.h compiler/cuda/copy.cuh compiler/cuda/embed.sh
	@mkdir -p $(BUILD)
	compiler/cuda/embed.sh ccl__prelude_cuh compiler/cuda/prelude.cuh compiler/cuda/abi.h compiler/cuda/copy.cuh >$@.tmp && mv $@.tmp $@

# The GPU backend's point-to-point kernel, the same way, for gpu/p2p.c.
$(BUILD)/p2p_cu.c: runtime/src/gpu/p2p.cu compiler/cuda/abi.h compiler/cuda/copy.cuh compiler/cuda/embed.sh
	@mkdir -p $(BUILD)
	compiler/cuda/embed.sh ccl__p2p_cu runtime/src/gpu/p2p.cu compiler/cuda/abi.h compiler/cuda/copy.cuh >$@.tmp && mv $@.tmp $@

$(BUILD)/prelude_cuh.o $(BUILD)/p2p_cu.o: %.o: %.c $(BUILD)/cflags.txt
	$(CC) $(CFLAGS) -c -o $@ $<

# The built-in tuning tables as C strings for tuner.c (ccl__tune_texts: {path, text}, the
# files' bytes unchanged). tune_tables.list names the files and is rewritten only when
# that list changes, so that removing a table rebuilds too.
$(BUILD)/tune_tables.list: FORCE
	@mkdir -p $(BUILD)
	@[ "$$(cat $@ 2>/dev/null)" = "$(TUNE_TABLES)" ] || echo "$(TUNE_TABLES)" >$@

$(BUILD)/tune_tables.c: $(TUNE_TABLES) $(BUILD)/tune_tables.list runtime/tune/embed.sh
	runtime/tune/embed.sh $(TUNE_TABLES) >$@.tmp && mv $@.tmp $@

$(BUILD)/tune_tables.o: $(BUILD)/tune_tables.c $(BUILD)/cflags.txt $(wildcard compiler/*.h runtime/include/*.h runtime/src/*.h)
	$(CC) $(CFLAGS) -c -o $@ $<

$(BUILD)/%.o: %.c $(wildcard compiler/*.h compiler/cuda/*.h runtime/include/*.h runtime/src/*.h runtime/src/*/*.h tools/*/*.h) $(BUILD)/ccl.tab.h $(BUILD)/lex.yy.h $(BUILD)/cflags.txt
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

# The same objects as one shared library that exports only the API of ccl.h: the version
# script (runtime/libccl.map) lists it and makes every other symbol local, so the
# compiler's and the runtime's internals neither leak into nor clash with a user's
# program. --no-undefined: the system libraries it needs are all named here.
link_libccl_so = $(CC) $(CFLAGS) -shared -Wl,-soname,$(SONAME) -Wl,--version-script=runtime/libccl.map \
    -Wl,--no-undefined -o $@ $(1) $(LDLIBS)
$(BUILD)/libccl.so.$(VERSION): $(RUNTIME_OBJ) $(COMPILER_OBJ) runtime/libccl.map
	$(call link_libccl_so,$(RUNTIME_OBJ) $(COMPILER_OBJ))

$(BUILD)/libccl.so: $(BUILD)/libccl.so.$(VERSION)
	ln -sf libccl.so.$(VERSION) $(BUILD)/$(SONAME)
	ln -sf $(SONAME) $@

$(BUILD)/libtools.a: $(TOOLS_COMMON_OBJ)
	rm -f $@
	ar rcs $@ $^

# Tools see the harness's header (tools/common/harness.h) and link its archive before libccl.
$(BUILD)/tools/%.o: CFLAGS += -Itools/common

$(BUILD)/cclc: $(CCLC_SRC:%.c=$(BUILD)/%.o) $(BUILD)/libtools.a $(BUILD)/libccl.a
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/ccl-perf: $(patsubst %.c,$(BUILD)/%.o,$(wildcard tools/perf/*.c)) $(BUILD)/libtools.a $(BUILD)/libccl.a
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/ccl-tune: $(patsubst %.c,$(BUILD)/%.o,$(wildcard tools/tune/*.c)) $(BUILD)/libtools.a $(BUILD)/libccl.a
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/examples/%_mpi: examples/%_mpi.c $(BUILD)/libccl.a
	@mkdir -p $(dir $@)
	$(MPICC) $(CFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/examples/%: examples/%.c $(BUILD)/libccl.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/tests/multinode/%: tests/multinode/%.c $(BUILD)/libccl.a runtime/include/ccl_mpi.h tests/multinode/cases.h
	@mkdir -p $(dir $@)
	$(MPICC) $(CFLAGS) -o $@ $(filter %.c %.a,$^) $(LDLIBS)

# tests/uniqueid runs tests/multinode's cases (cases.h) without MPI.
$(BUILD)/tests/uniqueid/%: tests/uniqueid/%.c $(BUILD)/libccl.a tests/multinode/cases.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $(filter %.c %.a,$^) $(LDLIBS)

$(BUILD)/tests/%: tests/%.c $(BUILD)/libccl.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/runtime/nccl/%.o: runtime/nccl/%.c $(wildcard runtime/nccl/*.h) runtime/include/ccl.h $(BUILD)/cflags.txt
	@mkdir -p $(dir $@)
	$(CC) $(NCCL_CFLAGS) -c -o $@ $<

$(BUILD)/runtime/nccl/own-header.ok: $(NCCL_SRC) $(wildcard runtime/nccl/*.h) runtime/include/ccl.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) -fsyntax-only -Iruntime/include -Iruntime/nccl $(NCCL_SRC)
	@touch $@

$(BUILD)/libccl_nccl.so.$(VERSION): $(NCCL_OBJ) runtime/nccl/libccl_nccl.map $(BUILD)/libccl.so
	$(CC) $(NCCL_CFLAGS) -shared -Wl,-soname,$(NCCL_SONAME) -Wl,--version-script=runtime/nccl/libccl_nccl.map \
	    -Wl,--no-undefined -Wl,-rpath,'$$ORIGIN' -o $@ $(NCCL_OBJ) -L$(BUILD) -lccl -pthread -ldl -lm

$(BUILD)/libccl_nccl.so: $(BUILD)/libccl_nccl.so.$(VERSION)
	ln -sf libccl_nccl.so.$(VERSION) $(BUILD)/$(NCCL_SONAME)
	ln -sf $(NCCL_SONAME) $@

# tests/nccl: programs written against nccl.h (NVIDIA's where present), linked with
# libccl_nccl.so only; abi_dump_own is abi_dump.c against runtime/nccl/nccl.h, for the
# suite to compare the two headers' layouts and values.
$(BUILD)/tests/nccl/%: tests/nccl/%.c $(wildcard tests/nccl/*.h) $(BUILD)/libccl_nccl.so
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) $(NCCL_HEADER_FLAGS) -o $@ $< -L$(BUILD) -lccl_nccl -Wl,-rpath,'$$ORIGIN/../..' -pthread -ldl -lm

$(BUILD)/tests/nccl/abi_dump_own: tests/nccl/abi_dump.c runtime/nccl/nccl.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) -Iruntime/nccl -o $@ $<

# A stand-in for NVIDIA's libnccl on host memory (tests/nccl/fake/fake_nccl.c says why).
$(BUILD)/tests/nccl/libfake_nccl.so: tests/nccl/fake/fake_nccl.c runtime/nccl/nccl.h
	@mkdir -p $(dir $@)
	$(CC) -std=c11 $(OPT) -g -Wall -Wextra -Werror -Wno-unused-parameter -D_GNU_SOURCE -pthread -fPIC -shared \
	    -Iruntime/nccl -o $@ $< -pthread

# make install PREFIX=... [DESTDIR=...]: the folders follow the GNU names and can be set
# one by one (LIBDIR=$(PREFIX)/lib64 ...). Files are installed mode 644 (programs and the
# shared library 755) and folders 755, as libccl's trust rules need for the algorithms
# (docs/api.md). The algorithms' folder is replaced whole: libccl loads every file there.
PREFIX       ?= /usr/local
BINDIR       ?= $(PREFIX)/bin
LIBDIR       ?= $(PREFIX)/lib
INCLUDEDIR   ?= $(PREFIX)/include
DATADIR      ?= $(PREFIX)/share
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
ALGDIR       := $(DATADIR)/ccl/algorithms
ALGORITHMS   := $(sort $(wildcard algorithms/*/*.ccl algorithms/literature/*/*.ccl))

# What make install puts in LIBDIR is built in $(BUILD)/install/ for this PREFIX: the
# libraries with datadir.o compiled again to name ALGDIR (the build folder's libraries
# name no such folder: runtime/src/datadir.c), so that a program linked with the installed libccl.a finds the
# algorithms wherever it lies; and ccl.pc. install/prefix.txt holds the folders they were
# made for, rewritten only when they change.
INSTALL_OBJ := $(filter-out $(BUILD)/runtime/src/datadir.o,$(RUNTIME_OBJ)) $(COMPILER_OBJ) $(BUILD)/install/datadir.o

$(BUILD)/install/prefix.txt: FORCE
	@mkdir -p $(BUILD)/install
	@f='$(PREFIX) $(LIBDIR) $(INCLUDEDIR) $(ALGDIR)'; [ "$$(cat $@ 2>/dev/null)" = "$$f" ] || echo "$$f" >$@

$(BUILD)/install/datadir.o: private CFLAGS += -fPIC
$(BUILD)/install/datadir.o: runtime/src/datadir.c runtime/src/base.h $(BUILD)/install/prefix.txt $(BUILD)/cflags.txt
	$(CC) $(CFLAGS) -DCCL_INSTALL_ALGORITHM_DIR='"$(ALGDIR)"' -c -o $@ $<

# The build's archive with its datadir.o member replaced (ar r replaces by name).
$(BUILD)/install/libccl.a: $(BUILD)/libccl.a $(BUILD)/install/datadir.o
	cp $(BUILD)/libccl.a $@.tmp
	ar rs $@.tmp $(BUILD)/install/datadir.o
	mv $@.tmp $@

$(BUILD)/install/libccl.so.$(VERSION): $(INSTALL_OBJ) runtime/libccl.map
	$(call link_libccl_so,$(INSTALL_OBJ))

# ccl.pc (libccl.so) and ccl-static.pc (libccl.a: pkg-config --static cannot turn
# ccl.pc's -lccl into the archive; runtime/ccl-static.pc.in says why).
$(BUILD)/install/ccl.pc $(BUILD)/install/ccl-static.pc: $(BUILD)/install/%.pc: runtime/%.pc.in runtime/include/ccl.h $(BUILD)/install/prefix.txt
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@LIBDIR@|$(LIBDIR)|g' -e 's|@INCLUDEDIR@|$(INCLUDEDIR)|g' \
	    -e 's|@ALGDIR@|$(ALGDIR)|g' -e 's|@VERSION@|$(VERSION)|g' $< >$@

# ccl-nccl.pc: libccl_nccl.so and its nccl.h (in INCLUDEDIR/ccl_nccl, so that it is found
# only through this file).
$(BUILD)/install/ccl-nccl.pc: runtime/nccl/ccl-nccl.pc.in runtime/include/ccl.h $(BUILD)/install/prefix.txt
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@LIBDIR@|$(LIBDIR)|g' -e 's|@INCLUDEDIR@|$(INCLUDEDIR)|g' \
	    -e 's|@VERSION@|$(VERSION)|g' $< >$@

install: $(BUILD)/cclc $(TOOLS) $(BUILD)/install/libccl.a $(BUILD)/install/libccl.so.$(VERSION) $(BUILD)/install/ccl.pc \
         $(BUILD)/install/ccl-static.pc $(BUILD)/libccl_nccl.so.$(VERSION) $(BUILD)/install/ccl-nccl.pc
	install -d -m 755 $(DESTDIR)$(BINDIR) $(DESTDIR)$(INCLUDEDIR) $(DESTDIR)$(LIBDIR) $(DESTDIR)$(PKGCONFIGDIR) \
	    $(DESTDIR)$(INCLUDEDIR)/ccl_nccl
	install -m 755 $(BUILD)/cclc $(TOOLS) $(DESTDIR)$(BINDIR)/
	install -m 644 runtime/include/ccl.h runtime/include/ccl_mpi.h $(DESTDIR)$(INCLUDEDIR)/
	install -m 644 $(BUILD)/install/libccl.a $(DESTDIR)$(LIBDIR)/
	install -m 755 $(BUILD)/install/libccl.so.$(VERSION) $(DESTDIR)$(LIBDIR)/
	ln -sf libccl.so.$(VERSION) $(DESTDIR)$(LIBDIR)/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(LIBDIR)/libccl.so
	install -m 644 $(BUILD)/install/ccl.pc $(BUILD)/install/ccl-static.pc $(DESTDIR)$(PKGCONFIGDIR)/
	install -m 755 $(BUILD)/libccl_nccl.so.$(VERSION) $(DESTDIR)$(LIBDIR)/
	ln -sf libccl_nccl.so.$(VERSION) $(DESTDIR)$(LIBDIR)/$(NCCL_SONAME)
	ln -sf $(NCCL_SONAME) $(DESTDIR)$(LIBDIR)/libccl_nccl.so
	install -m 644 runtime/nccl/nccl.h $(DESTDIR)$(INCLUDEDIR)/ccl_nccl/
	install -m 644 $(BUILD)/install/ccl-nccl.pc $(DESTDIR)$(PKGCONFIGDIR)/
	rm -rf $(DESTDIR)$(ALGDIR)
	for d in $(sort $(dir $(ALGORITHMS))); do install -d -m 755 $(DESTDIR)$(DATADIR)/ccl/$$d || exit 1; done
	for f in $(ALGORITHMS); do install -m 644 $$f $(DESTDIR)$(DATADIR)/ccl/$$f || exit 1; done

uninstall:
	rm -f $(addprefix $(DESTDIR)$(BINDIR)/,cclc $(notdir $(TOOLS))) \
	    $(addprefix $(DESTDIR)$(INCLUDEDIR)/,ccl.h ccl_mpi.h ccl_nccl/nccl.h) \
	    $(addprefix $(DESTDIR)$(PKGCONFIGDIR)/,ccl.pc ccl-static.pc ccl-nccl.pc) \
	    $(addprefix $(DESTDIR)$(LIBDIR)/,libccl.a libccl.so $(SONAME) libccl.so.$(VERSION)) \
	    $(addprefix $(DESTDIR)$(LIBDIR)/,libccl_nccl.so $(NCCL_SONAME) libccl_nccl.so.$(VERSION))
	rmdir $(DESTDIR)$(INCLUDEDIR)/ccl_nccl 2>/dev/null || true
	rm -rf $(DESTDIR)$(ALGDIR)
	rmdir $(DESTDIR)$(DATADIR)/ccl 2>/dev/null || true

# These set up a fresh machine themselves: the deps step first, then a make of its own
# (the Makefile is read again, so examples/allreduce_mpi is built once mpicc is there).
demo:
	$(INSTALL_DEPS) demo
	$(MAKE) all
	$(BUILD)/cclc check algorithms/allreduce/ring.ccl --ranks 4 --explain
	$(BUILD)/cclc run algorithms/allreduce/ring.ccl --ranks 4 --count 1000003 --dtype bf16 --op sum --iters 3

check:
	$(INSTALL_DEPS) check
	$(MAKE) all
	tests/run-all.sh $(BUILD)

check-gpu: all
	tests/run-gpu.sh $(BUILD)

update-golden: all
	UPDATE_GOLDEN=1 tests/run-all.sh $(BUILD)

# The compiler, CPU-runtime and libccl_nccl suites, built with sanitizers into their own folder.
asan:
	$(INSTALL_DEPS) asan
	$(MAKE) BUILD=build-asan OPT="-O1 -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer" \
	    all
	ASAN_OPTIONS=detect_leaks=1 tests/run-all.sh build-asan cli diag verify algorithms fuzz runtime perf tuner nccl

FUZZ_SECONDS ?= 60
FUZZ_FLAGS = -std=c11 -g -O1 -fsanitize=address,undefined -fno-omit-frame-pointer -D_GNU_SOURCE
fuzz:
	$(INSTALL_DEPS) fuzz
	$(MAKE) BUILD=build-fuzz CC=clang OPT="-O1 -fsanitize=fuzzer-no-link,address,undefined" build-fuzz/libcclc.a
	clang $(FUZZ_FLAGS) -fsanitize=fuzzer -Icompiler -Ibuild-fuzz -o build-fuzz/fuzz_frontend \
	    tests/fuzz/fuzz_frontend.c build-fuzz/libcclc.a -lm
	mkdir -p build-fuzz/corpus
	build-fuzz/fuzz_frontend -max_total_time=$(FUZZ_SECONDS) -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
	    -print_final_stats=1 build-fuzz/corpus tests/fuzz/corpus algorithms/*/ tests/diag/

clean:
	rm -rf build build-asan build-fuzz

.PHONY: all deps deps-fuzz demo check check-gpu update-golden asan fuzz clean install uninstall FORCE
.SECONDARY:
