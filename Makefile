# dtpc — build, test and benchmarks. Out-of-tree: everything goes to $(BUILD).
#   make            the compiler (build/dtpc)
#   make deps       install the Debian packages and the Python test environment
#                   (torch, diffusers: ~/.cache/dtpc/venv; idempotent)
#   make demo       the quickstart's main job
#   make test       every test (unit, golden diagnostics, examples, fuzz
#                   corpus, and the same suite under ASan/UBSan)
#   make bench      benchmarks (figures go to docs/performance.md by hand)
#   make SAN=1 BUILD=build-san   a sanitizer build

BUILD  ?= build
CC     ?= cc
SAN    ?=
OPT    ?= -O2

WARN    = -Wall -Wextra -Wpedantic -Wshadow -Wstrict-prototypes \
          -Wmissing-prototypes -Wformat=2 -Wundef -Wcast-align \
          -Wvla -Wno-unused-parameter -Wswitch-enum -Wimplicit-fallthrough
# WERROR=1: a warning fails the build. make test (and so CI) builds every
# tree so, tests/run.sh's sanitizer trees too; a plain make warns only.
# The goal sets it, not only its recipe: the stamp of the build's flags
# (BUILD_CONFIG, below) is written when make reads this file, and must
# agree with what the recipe's make builds, or each make test rebuilds all.
WERROR ?= $(if $(filter test,$(MAKECMDGOALS)),1)
WARN   += $(if $(WERROR),-Werror)
BLAS_CFLAGS ?= -I/usr/include/x86_64-linux-gnu/openblas-pthread
# MPI (optional, detected): with Open MPI's mpicc the mpi backend and
# tests/mpi are built; without it comm_mpi_create says the build has none.
# `make HAVE_MPI=` builds without MPI where mpicc exists.
HAVE_MPI    ?= $(if $(shell command -v mpicc 2>/dev/null),1)
MPI_CFLAGS  ?= $(if $(HAVE_MPI),-DDTPC_HAVE_MPI $(shell mpicc --showme:compile 2>/dev/null))
MPI_LIBS    ?= $(if $(HAVE_MPI),$(shell mpicc --showme:link 2>/dev/null))
CFLAGS  = -std=gnu11 $(OPT) -g $(WARN) -MMD -MP -pthread -I. -I$(BUILD)/gen $(BLAS_CFLAGS) $(MPI_CFLAGS) $(CUDA_CFLAGS)
LDLIBS  = -lcjson -lopenblas $(MPI_LIBS) -ldl -lpthread -lm
ifeq ($(SAN),1)
CFLAGS  += -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all
LDFLAGS += -fsanitize=address,undefined
endif
# make TSAN=1 BUILD=build-tsan: a ThreadSanitizer build. The local backend's
# ranks are threads of one process; tests/run.sh runs the runtime and comm
# tests and multi-rank replays of it.
ifeq ($(TSAN),1)
CFLAGS  += -fsanitize=thread -fno-omit-frame-pointer
LDFLAGS += -fsanitize=thread
endif
# Generated scanner/parser code is not ours: same flags, fewer warnings,
# none of them an error (another flex or bison writes other code).
GENFLAGS = $(filter-out -Wpedantic -Wshadow -Wmissing-prototypes -Wstrict-prototypes -Wundef -Wcast-align \
             -Wswitch-enum -Wimplicit-fallthrough -Werror,$(CFLAGS)) -Wno-unused-function -Wno-sign-compare

# CUDA (optional, detected): nvcc on the PATH or in /usr/local/cuda builds
# kernels/cuda/*.cu and runtime/cuda/*.c into libdtpc_cuda.so, which libdtpc
# opens when a session first asks for a GPU (runtime/cuda_load.c: a CPU run
# never maps the CUDA libraries); NCCL beside the toolkit adds the nccl
# backend. Without nvcc everything else builds and
# `make` says what it left out. CUDA_ARCH: Hopper (sm_90a machine code) plus
# compute_90 PTX for newer GPUs.
# CUDA=0 leaves them out where nvcc exists; sanitizer builds (SAN, TSAN)
# leave them out unless CUDA=1 is given (device code is not what they check).
# The nccl backend bootstraps over MPI: it needs MPI too.
CUDA      ?= $(if $(SAN)$(TSAN),0,auto)
ifneq ($(CUDA),0)
NVCC      ?= $(firstword $(shell command -v nvcc 2>/dev/null) $(wildcard /usr/local/cuda/bin/nvcc))
endif
CUDA_HOME ?= $(if $(NVCC),$(patsubst %/bin/,%,$(dir $(realpath $(NVCC)))))
CUDA_ARCH ?= -gencode=arch=compute_90a,code=sm_90a -gencode=arch=compute_90,code=compute_90
NCCL_LIB  := $(if $(HAVE_MPI),$(firstword $(wildcard $(CUDA_HOME)/lib64/libnccl.so $(CUDA_HOME)/lib/libnccl.so \
                                    /usr/lib/x86_64-linux-gnu/libnccl.so)))
# cuDNN beside the toolkit (header and library) adds its fused attention as
# kc_attention's second implementation (kernels/cuda/attention_cudnn.cu).
CUDNN_LIB := $(if $(wildcard $(CUDA_HOME)/include/cudnn.h),$(firstword \
               $(wildcard $(CUDA_HOME)/lib64/libcudnn.so $(CUDA_HOME)/lib/libcudnn.so)))
ifneq ($(NVCC),)
HAVE_CUDA   = 1
CUDA_CFLAGS = -DDTPC_HAVE_CUDA -I$(CUDA_HOME)/include
CUDA_LIBS   = -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublasLt -lcudart -lstdc++
ifneq ($(NCCL_LIB),)
CUDA_CFLAGS += -DDTPC_HAVE_NCCL
CUDA_LIBS   += -L$(dir $(NCCL_LIB)) -Wl,-rpath,$(dir $(NCCL_LIB)) -lnccl
endif
ifneq ($(CUDNN_LIB),)
CUDA_CFLAGS += -DDTPC_HAVE_CUDNN
CUDA_LIBS   += -L$(dir $(CUDNN_LIB)) -Wl,-rpath,$(dir $(CUDNN_LIB)) -lcudnn
endif
CU_SRC   = $(wildcard kernels/cuda/*.cu)
CU_OBJ   = $(CU_SRC:%.cu=$(BUILD)/obj/%.o)
CUDA_C_SRC = $(wildcard runtime/cuda/*.c)
# comm.o again: the nccl backend's argument checks and messages, kept inside
# the library (hidden) so that it needs nothing of the program that opens it
CUDA_OBJ = $(CUDA_C_SRC:%.c=$(BUILD)/obj/%.o) $(CU_OBJ)
CUDA_SO  = $(BUILD)/libdtpc_cuda.so
GPU_TEST_BIN  = $(patsubst tests/gpu/%.c,$(BUILD)/tests/gpu/%,$(wildcard tests/gpu/test_*.c))
GPU_BENCH_BIN = $(patsubst bench/gpu/%.c,$(BUILD)/bench/gpu/%,$(wildcard bench/gpu/*.c))
NVCCFLAGS ?= -O3 -std=c++17 $(CUDA_ARCH) -Xcompiler -fPIC,-Wall -lineinfo
NVCCFLAGS += $(if $(CUDNN_LIB),-DDTPC_HAVE_CUDNN)
endif

# Five parts: the graph format (graph/: the op table, the records, the
# loader, the writer, the stats, the version), which the compiler library
# libdtpcc (compiler/: plan -> graph) and the runtime library libdtpc
# (runtime/, kernels/) both use and which uses neither (compiler -> graph <-
# runtime; tests/install.sh checks the arrows), the cost model (cost/:
# libdtpcost, over the compiler and the format, never the runtime), and the
# program (cli/: the command line and the commands that run, read or
# measure graphs), which links everything. The writer goes into libdtpcc
# only: a deployment never writes a graph. The rest of the format goes into
# libdtpc, and a link of libdtpcc takes it from there.
GRAPH_SRC    = $(wildcard graph/*.c)
GRAPH_WRITER_OBJ = $(BUILD)/obj/graph/graph_write.o
GRAPH_OBJ    = $(filter-out $(GRAPH_WRITER_OBJ),$(GRAPH_SRC:%.c=$(BUILD)/obj/%.o))
COMPILER_SRC = $(wildcard compiler/*.c compiler/ops/*.c)
COMPILER_OBJ = $(COMPILER_SRC:%.c=$(BUILD)/obj/%.o) \
               $(BUILD)/obj/gen/plan.tab.o $(BUILD)/obj/gen/lex.yy.o
RUNTIME_SRC  = $(wildcard runtime/*.c runtime/ops/*.c kernels/cpu/*.c)
RUNTIME_OBJ  = $(RUNTIME_SRC:%.c=$(BUILD)/obj/%.o) $(GRAPH_OBJ)
# libdtpcost (cost/): the cost model over the compiler and the format
COST_SRC     = $(wildcard cost/*.c)
COST_OBJ     = $(COST_SRC:%.c=$(BUILD)/obj/%.o)
CLI_SRC      = $(wildcard cli/*.c)
CLI_OBJ      = $(CLI_SRC:%.c=$(BUILD)/obj/%.o)
UNIT_SRC     = $(wildcard tests/unit/test_*.c)
UNIT_BIN     = $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/%)
MPI_TEST_SRC = $(if $(HAVE_MPI),$(wildcard tests/mpi/*.c))
MPI_TEST_BIN = $(MPI_TEST_SRC:tests/mpi/%.c=$(BUILD)/tests/mpi_%)
BENCH_SRC    = $(filter-out $(if $(HAVE_MPI),,bench/comm_bench.c),$(wildcard bench/*.c))
BENCH_BIN    = $(BENCH_SRC:bench/%.c=$(BUILD)/bench/%)

.PHONY: all deps deps-debian demo test bench fuzz clean gpu-bundle
# keep the objects of chained pattern rules (tests, benchmarks): no rebuilds
.SECONDARY:
all: $(BUILD)/dtpc $(UNIT_BIN) $(MPI_TEST_BIN) $(BENCH_BIN) $(BUILD)/examples/embed \
     $(CUDA_SO) $(GPU_TEST_BIN) $(GPU_BENCH_BIN)
ifeq ($(HAVE_CUDA),)
	@echo "make: built without the CUDA device and the nccl backend ($(if $(filter 0,$(CUDA)),CUDA=0,no nvcc found))"
else ifeq ($(NCCL_LIB),)
	@echo "make: built without the nccl backend (it needs NCCL beside $(CUDA_HOME) and MPI)"
endif

deps:
	@sh scripts/deps.sh
# the Debian packages alone: the quickstart needs no torch
deps-debian:
	@sh scripts/deps.sh --debian-only

$(BUILD)/gen/plan.tab.c $(BUILD)/gen/plan.tab.h: grammar/plan.y
	@mkdir -p $(@D)
	bison -Wall -Werror -d -o $(BUILD)/gen/plan.tab.c $<

$(BUILD)/gen/lex.yy.c $(BUILD)/gen/lex.yy.h: grammar/plan.l $(BUILD)/gen/plan.tab.h
	@mkdir -p $(@D)
	flex -o $(BUILD)/gen/lex.yy.c --header-file=$(BUILD)/gen/lex.yy.h $<

$(BUILD)/obj/gen/%.o: $(BUILD)/gen/%.c
	@mkdir -p $(@D)
	$(CC) $(GENFLAGS) -c -o $@ $<

# The language's op signatures, from the op table (no table filled at run time).
$(BUILD)/gen/op_sigs.h: graph/ops.def scripts/gen_sigs.awk
	@mkdir -p $(@D)
	awk -f scripts/gen_sigs.awk graph/ops.def >$@
$(BUILD)/gen/op_sig_max.h: graph/ops.def scripts/gen_sigs.awk
	@mkdir -p $(@D)
	awk -v max=1 -f scripts/gen_sigs.awk graph/ops.def >$@

# Sources that include the generated headers must wait for them.
$(BUILD)/obj/compiler/parse.o: $(BUILD)/gen/lex.yy.h $(BUILD)/gen/plan.tab.h
$(BUILD)/obj/compiler/model.o: $(BUILD)/gen/op_sigs.h
$(COMPILER_OBJ): | $(BUILD)/gen/op_sig_max.h

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -c -o $@ $<

$(BUILD)/obj/%.o: %.cu
	@mkdir -p $(@D)
	$(NVCC) $(NVCCFLAGS) -I. -MMD -MP -c -o $@ $<

$(BUILD)/libdtpcc.a: $(COMPILER_OBJ) $(GRAPH_WRITER_OBJ)
	@rm -f $@
	ar rcs $@ $^

# libdtpc: the runtime a deployment links (loader, executor, backends, kernels).
$(BUILD)/libdtpc.a: $(RUNTIME_OBJ)
	@rm -f $@
	ar rcs $@ $^

LIBS = $(BUILD)/libdtpcc.a $(BUILD)/libdtpc.a

# libdtpcost: the cost model (dtpc cost, suggest; calibrate's profile format)
$(BUILD)/libdtpcost.a: $(COST_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/dtpc: $(CLI_OBJ) $(BUILD)/libdtpcost.a $(LIBS)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/tests/%: $(BUILD)/obj/tests/unit/%.o $(LIBS)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/tests/mpi_%: $(BUILD)/obj/tests/mpi/%.o $(LIBS)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# the benchmarks report medians as dtpc run does (cli/median.c)
$(BUILD)/bench/%: $(BUILD)/obj/bench/%.o $(BUILD)/obj/cli/median.o $(LIBS)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# The GPU tests and benchmarks call the kernels and the nccl backend
# themselves: they link the CUDA objects from an archive, so each takes only
# the objects it uses (the GPU bundle carries every one of them).
$(BUILD)/libdtpc_cuda.a: $(CUDA_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/tests/gpu/%: $(BUILD)/obj/tests/gpu/%.o $(BUILD)/obj/cli/median.o $(BUILD)/libdtpc_cuda.a $(LIBS)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) $(CUDA_LIBS)

$(BUILD)/bench/gpu/%: $(BUILD)/obj/bench/gpu/%.o $(BUILD)/obj/cli/median.o $(BUILD)/libdtpc_cuda.a $(LIBS)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) $(CUDA_LIBS)

# Exports one symbol, the table of cuda_api.h.
$(CUDA_SO): $(CUDA_OBJ) $(BUILD)/obj/runtime/comm.o $(BUILD)/obj/graph/error.o
	printf '{ global: dtpc_cuda_api; local: *; };\n' >$(BUILD)/libdtpc_cuda.map
	$(CC) $(LDFLAGS) -shared -Wl,-soname,libdtpc_cuda.so -Wl,--version-script,$(BUILD)/libdtpc_cuda.map \
		-Wl,--no-undefined -o $@ $^ $(MPI_LIBS) $(CUDA_LIBS) -lpthread -lm

# examples/embed: a program with a compiled graph linked into it.
$(BUILD)/examples/tiny_dit_4.graph: examples/tiny_dit.plan $(BUILD)/dtpc
	@mkdir -p $(@D)
	$(BUILD)/dtpc $< --plan tiny_dit_8 --mesh "ulysses = 2, tp = 2" -o $@

# dtpc embed turns the graph into an object defining dtpc_embedded_graph[]
# and dtpc_embedded_graph_size, compiled by $(CC).
$(BUILD)/obj/examples/embed_graph.o: $(BUILD)/examples/tiny_dit_4.graph $(BUILD)/dtpc
	@mkdir -p $(@D)
	CC='$(CC)' $(BUILD)/dtpc embed $< -o $@ --symbol dtpc_embedded_graph

$(BUILD)/examples/embed: $(BUILD)/obj/examples/embed.o $(BUILD)/obj/examples/embed_graph.o $(BUILD)/libdtpc.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# libFuzzer targets (clang only): the parser, the graph loader, safetensors,
# the config reader, the checkpoint index and per-rank folders (fuzz_index,
# fuzz_rankdir), the whole pipeline (fuzz_pipeline: parse to a prepared
# session), the hardware profile loader of the cost model (fuzz_profile:
# the one file of cost/ in the archive). The compiler and runtime are built once with
# the fuzzer's instrumentation (fuzzer-no-link: coverage without libFuzzer's
# main) into an archive each target links; `make fuzz` runs each for a minute.
FUZZ_SRC = $(GRAPH_SRC) $(COMPILER_SRC) $(RUNTIME_SRC) cost/profile.c $(BUILD)/gen/plan.tab.c \
	$(BUILD)/gen/lex.yy.c
FUZZ_OBJ = $(patsubst %.c,$(BUILD)/fuzz/obj/%.o,$(FUZZ_SRC))
FUZZ_BIN = $(patsubst tests/fuzz/%.c,$(BUILD)/fuzz/%,$(wildcard tests/fuzz/fuzz_*.c))
FUZZ_CFLAGS = -std=gnu11 -g -O1 -I. -I$(BUILD)/gen $(BLAS_CFLAGS) $(MPI_CFLAGS) \
	-fsanitize=address,undefined -fno-sanitize-recover=all
$(BUILD)/fuzz/obj/%.o: %.c | $(BUILD)/gen/op_sigs.h $(BUILD)/gen/op_sig_max.h $(BUILD)/gen/plan.tab.h $(BUILD)/gen/lex.yy.h
	@mkdir -p $(@D)
	clang $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -MMD -MP -c -o $@ $<
$(BUILD)/fuzz/libdtpc_fuzz.a: $(FUZZ_OBJ)
	@rm -f $@
	ar rcs $@ $^
$(BUILD)/fuzz/fuzz_%: tests/fuzz/fuzz_%.c $(BUILD)/fuzz/libdtpc_fuzz.a
	@mkdir -p $(@D)
	clang $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $^ -lcjson -lopenblas $(MPI_LIBS) -lpthread -lm
-include $(FUZZ_OBJ:.o=.d)

fuzz: $(FUZZ_BIN)
	@for f in $(FUZZ_BIN); do \
		n=$${f##*/fuzz_}; mkdir -p $(BUILD)/fuzz/corpus_$$n; \
		echo "== $$f"; \
		$$f -max_total_time=60 -max_len=65536 $(BUILD)/fuzz/corpus_$$n tests/fuzz/$${n}_corpus || exit 1; \
	done

# The property test's long run (tests/prop/gen.py; make test runs 400 plans
# of seed 1): a new seed each day, printed, so a failure reproduces with
# PROP_SEED=N.
PROP_SEED  ?= $(shell date +%Y%m%d)
PROP_COUNT ?= 3000
.PHONY: fuzz-prop clean-tsan
fuzz: fuzz-prop
fuzz-prop: $(BUILD)/dtpc
	python3 tests/prop/gen.py --dtpc $(BUILD)/dtpc --out $(BUILD)/prop --seed $(PROP_SEED) \
		--count $(PROP_COUNT)

demo: deps-debian all
	@sh scripts/demo.sh $(BUILD)

# make test builds in parallel by itself (CI runs a plain `make test` on two
# cores): JOBS jobs, the machine's cores, unless make was given -j; tests/run.sh
# builds its sanitizer, TSan and fuzzing trees with as many.
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
test: deps
	+@$(MAKE) --no-print-directory $(if $(filter -j%,$(MAKEFLAGS)),,-j$(JOBS)) WERROR=$(WERROR) all
	@WERROR=$(WERROR) JOBS=$(JOBS) sh tests/run.sh $(BUILD)

bench: all
	@sh bench/run.sh $(BUILD)

# The GPU checks' programs and the libraries a bare GPU machine lacks, in one
# folder: make CUDA=1 BUILD=build-gpu gpu-bundle, then tests/gpu/run.sh
# build-gpu/bundle there.
gpu-bundle: all
	@test -n "$(HAVE_CUDA)" || { echo "gpu-bundle needs the CUDA build (make CUDA=1)"; exit 2; }
	@sh scripts/gpu_bundle.sh $(BUILD)

clean:
	rm -rf $(BUILD) build-san

# tests/run.sh's ThreadSanitizer build
clean: clean-tsan
clean-tsan:
	rm -rf build-tsan

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)

# ---- the installable library: libdtpc.so, make install / uninstall ----------------
# libdtpc.so exports only the dtpc_* API (DTPC_API in dtpc.h): everything is
# compiled hidden and position-independent, and a version script keeps any
# other global out of the dynamic symbol table (tests/install.sh checks it).
# Its soname carries the major version of graph/version.h.
CFLAGS    += -fPIC -fvisibility=hidden
NVCCFLAGS += -Xcompiler -fvisibility=hidden
VERSION   := $(shell sed -n 's/^\#define DTPC_VERSION "\(.*\)"/\1/p' graph/version.h)
SONAME     = libdtpc.so.$(firstword $(subst ., ,$(VERSION)))
PREFIX    ?= /usr/local
LIBDIR    ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
MANDIR    ?= $(PREFIX)/share/man
# the model library's plans, where the Python package looks (dtpc.models_dir)
MODELDIR  ?= $(PREFIX)/share/dtpc/models
# what a static link of libdtpc needs besides it (pkg-config --static)
LIBS_PRIVATE = -lcjson -lopenblas $(MPI_LIBS) -ldl -lpthread -lm

.PHONY: install uninstall no-mpi-note
all: $(BUILD)/libdtpc.so $(if $(HAVE_MPI),,no-mpi-note)

no-mpi-note:
	@echo "make: built without MPI (no mpicc, or HAVE_MPI= given): no mpi backend, tests/mpi or bench/comm_bench"

# Objects depend on the build's configuration (its flags: CUDA on or off,
# MPI, -fPIC for the .so): a folder built with other flags rebuilds them
# once. The stamp is rewritten at parse time when the flags differ from the
# ones it holds (.SECONDARY would let a stamp made by a rule go unmade).
BUILD_CONFIG := $(CC) $(CFLAGS) | $(NVCC) $(NVCCFLAGS)
ifneq ($(file < $(BUILD)/obj/.config),$(BUILD_CONFIG))
$(shell mkdir -p $(BUILD)/obj)
$(file > $(BUILD)/obj/.config,$(BUILD_CONFIG))
endif
$(RUNTIME_OBJ) $(CUDA_OBJ) $(COMPILER_OBJ) $(GRAPH_WRITER_OBJ) $(COST_OBJ) $(CLI_OBJ): $(BUILD)/obj/.config

$(BUILD)/libdtpc.map:
	@mkdir -p $(@D)
	printf '{ global: dtpc_*; local: *; };\n' >$@

# A sanitizer runtime is linked by the program, not the library: only a
# plain build can insist on no undefined symbols.
$(BUILD)/libdtpc.so.$(VERSION): $(RUNTIME_OBJ) $(BUILD)/libdtpc.map
	$(CC) $(LDFLAGS) -shared -Wl,-soname,$(SONAME) -Wl,--version-script,$(BUILD)/libdtpc.map \
		$(if $(SAN)$(TSAN),,-Wl,--no-undefined) -o $@ $(RUNTIME_OBJ) $(LIBS_PRIVATE)

$(BUILD)/libdtpc.so: $(BUILD)/libdtpc.so.$(VERSION)
	ln -sf libdtpc.so.$(VERSION) $(BUILD)/$(SONAME)
	ln -sf $(SONAME) $@

# DESTDIR stages the files (packaging); PREFIX is where they will live.
install: $(BUILD)/dtpc $(BUILD)/libdtpc.a $(BUILD)/libdtpc.so $(CUDA_SO)
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(LIBDIR)/pkgconfig $(DESTDIR)$(INCLUDEDIR) \
		$(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man5 $(DESTDIR)$(MODELDIR)
	install -m 755 $(BUILD)/dtpc $(DESTDIR)$(PREFIX)/bin/dtpc
	install -m 755 $(BUILD)/libdtpc.so.$(VERSION) $(DESTDIR)$(LIBDIR)/
	ln -sf libdtpc.so.$(VERSION) $(DESTDIR)$(LIBDIR)/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(LIBDIR)/libdtpc.so
	install -m 644 $(BUILD)/libdtpc.a $(DESTDIR)$(LIBDIR)/libdtpc.a
	$(if $(CUDA_SO),install -m 755 $(CUDA_SO) $(DESTDIR)$(LIBDIR)/libdtpc_cuda.so)
	install -m 644 runtime/dtpc.h $(DESTDIR)$(INCLUDEDIR)/dtpc.h
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBDIR@|$(LIBDIR)|' -e 's|@INCLUDEDIR@|$(INCLUDEDIR)|' \
		-e 's|@VERSION@|$(VERSION)|' -e 's|@LIBS_PRIVATE@|$(strip $(LIBS_PRIVATE))|' \
		dtpc.pc.in >$(DESTDIR)$(LIBDIR)/pkgconfig/dtpc.pc
	install -m 644 doc/man/dtpc.1 $(DESTDIR)$(MANDIR)/man1/dtpc.1
	install -m 644 doc/man/dtpc-plan.5 $(DESTDIR)$(MANDIR)/man5/dtpc-plan.5
	install -m 644 models/*.plan $(DESTDIR)$(MODELDIR)/

uninstall:
	rm -f $(DESTDIR)$(PREFIX)/bin/dtpc $(DESTDIR)$(LIBDIR)/libdtpc.so \
		$(DESTDIR)$(LIBDIR)/$(SONAME) $(DESTDIR)$(LIBDIR)/libdtpc.so.$(VERSION) \
		$(DESTDIR)$(LIBDIR)/libdtpc.a $(DESTDIR)$(LIBDIR)/libdtpc_cuda.so \
		$(DESTDIR)$(INCLUDEDIR)/dtpc.h \
		$(DESTDIR)$(LIBDIR)/pkgconfig/dtpc.pc $(DESTDIR)$(MANDIR)/man1/dtpc.1 \
		$(DESTDIR)$(MANDIR)/man5/dtpc-plan.5 \
		$(patsubst models/%,$(DESTDIR)$(MODELDIR)/%,$(wildcard models/*.plan))
