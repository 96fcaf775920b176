# culedger build entry points. See README.md.
#   make        release build of everything (library, CLI, simulated CUDA stack, C scenarios)
#   make test   everything CI runs
#   make demo   the main job on the simulated stack
#   make bench  the benchmarks
#   make wheel  the culedger wheels (x86_64, aarch64; manylinux_2_17) into target/wheels/
#   make dist   the wheels and the tarballs into target/dist/
#   make valgrind  the scenarios under memcheck and helgrind
CARGO   ?= cargo
PYTHON  ?= python3
CC      ?= cc
REL     := target/release
SIM     := target/sim
HDR     := target/cuda-headers/include
CFLAGS  ?= -O1 -g -Wall -Wextra -Werror
C_SRCS  := $(wildcard shim-tests/c/*.c)
C_BINS  := $(patsubst shim-tests/c/%.c,$(SIM)/bin/%,$(C_SRCS))
C13_SRCS := $(wildcard shim-tests/c13/*.c)
C13_BINS := $(patsubst shim-tests/c13/%.c,$(SIM)/bin/%,$(C13_SRCS))
HDR13   := target/cuda13/13.5.37/include
NVMLHDR := target/nvml/include
SO_SRCS := $(wildcard shim-tests/interposers/*.c)
SO_LIBS := $(patsubst shim-tests/interposers/%.c,$(SIM)/lib/lib%.so,$(SO_SRCS))
# Native libraries of the simulated engines (shim-tests/native, shim-tests/py/engines).
NATIVE  := $(SIM)/lib/libc10_cuda.so $(SIM)/lib/libnccl.so.2 $(SIM)/lib/cumem_allocator.abi3.so
NATIVE_DEPS := shim-tests/native/simtruth.h $(HDR)/cuda.h

# The minimal-cost driver (benchmarks), and its variants for the bad-input tests: one that
# exports only the resolver, one without the resolver (a driver older than CUDA 11.3).
MIN_LIBS := $(SIM)/min/libcuda.so.1 $(SIM)/min-sparse/libcuda.so.1 $(SIM)/min-noresolver/libcuda.so.1
MIN_CC = mkdir -p $(@D) && $(CC) -O2 -g -Wall -Wextra -Werror -fPIC -shared -I$(HDR) -Wl,-soname,libcuda.so.1

.PHONY: all build lib cli sim headers pythons frameworks sglang vllm test-deps cprogs test test-aarch64 demo bench valgrind wheel dist clean
all: build sim

build:
	$(CARGO) build --release --workspace --all-targets

lib:
	$(CARGO) build --release -p culedger

cli:
	$(CARGO) build --release -p culedger-cli

# Official CUDA 12.9 headers (and the real libcudart.so.12 the tests run) from PyPI wheels,
# CUDA 13 (13.0 and the newest 13.x: headers and the real libcudart.so.13) into
# target/cuda13/, and NVML's header and Python bindings into target/nvml/; the scripts return
# at once when everything is already unpacked.
headers:
	PYTHON=$(PYTHON) scripts/fetch-cuda-headers.sh
	PYTHON=$(PYTHON) scripts/fetch-cuda13.sh
	PYTHON=$(PYTHON) scripts/fetch-nvml.sh
$(HDR)/cuda.h $(HDR13)/cuda.h $(NVMLHDR)/nvml.h: headers

# Third-party libraries the tests load (LLVM OpenMP from PyPI) into target/test-deps/;
# no root, no system package.
test-deps:
	PYTHON=$(PYTHON) scripts/fetch-test-deps.sh

# The simulated machine: fake libcuda.so.1 and libcudart.so.12 with their sonames,
# plus the C scenario programs compiled against the official CUDA 12.9 headers. The fake
# libraries are copied only when cargo changed them: every scenario depends on them, so a
# copy with nothing changed would recompile them all on the next make.
sim: headers
	$(CARGO) build --release -p fakecuda -p fakecudart
	mkdir -p $(SIM)/lib $(SIM)/bin
	cmp -s $(REL)/libfakecuda.so $(SIM)/lib/libcuda.so.1 || cp -f $(REL)/libfakecuda.so $(SIM)/lib/libcuda.so.1
	ln -sf libcuda.so.1 $(SIM)/lib/libcuda.so
	cmp -s $(REL)/libfakecudart.so $(SIM)/lib/libcudart.so.12 || cp -f $(REL)/libfakecudart.so $(SIM)/lib/libcudart.so.12
	ln -sf libcudart.so.12 $(SIM)/lib/libcudart.so
	$(MAKE) cprogs

# NVML of the simulated machine, next to the fake driver (PyTorch's driver table loads it),
# compiled against NVIDIA's nvml.h.
$(SIM)/lib/libnvidia-ml.so.1: shim-tests/fakenvml/fakenvml.c $(NVMLHDR)/nvml.h
	$(CC) $(CFLAGS) -I$(NVMLHDR) -fPIC -shared -Wl,-soname,libnvidia-ml.so.1 -o $@ $<

cprogs: $(C_BINS) $(C13_BINS) $(SO_LIBS) $(NATIVE) $(MIN_LIBS) $(SIM)/bin/init_reentry $(SIM)/lib/libnvidia-ml.so.1

# A runtime calling the driver from its own initialisation, its entry points waiting for it
# (exported from the program: -rdynamic); no CUDA library linked.
$(SIM)/bin/init_reentry: shim-tests/native/init_reentry.c shim-tests/c/sim.h $(HDR)/cuda.h
	$(CC) $(CFLAGS) -I$(HDR) -rdynamic -o $@ $< -ldl -lpthread

# A caching allocator linked against the runtime, as PyTorch's libc10_cuda.so is.
$(SIM)/lib/libc10_cuda.so: shim-tests/native/c10_cuda_sim.c $(NATIVE_DEPS) $(SIM)/lib/libcudart.so.12
	$(CC) $(CFLAGS) -fPIC -shared -I$(HDR) -o $@ $< -L$(SIM)/lib -l:libcudart.so.12 -lpthread -Wl,-rpath,'$$ORIGIN'

# NCCL-like: no CUDA library linked, the driver reached through dlopen + cuGetProcAddress_v2.
$(SIM)/lib/libnccl.so.2: shim-tests/native/nccl_sim.c $(NATIVE_DEPS)
	$(CC) $(CFLAGS) -fPIC -shared -I$(HDR) -Wl,-soname,libnccl.so.2 -o $@ $< -ldl -lpthread

# vLLM's sleep-mode allocator, linked against the driver like the real extension.
$(SIM)/lib/cumem_allocator.abi3.so: shim-tests/native/cumem_allocator_sim.c $(NATIVE_DEPS) $(SIM)/lib/libcuda.so.1
	$(CC) $(CFLAGS) -fPIC -shared -I$(HDR) -o $@ $< -L$(SIM)/lib -l:libcuda.so.1 -lpthread -Wl,-rpath,'$$ORIGIN'

$(SIM)/min/libcuda.so.1: shim-tests/mincuda/mincuda.c $(HDR)/cuda.h
	$(MIN_CC) -o $@ $< -lpthread

$(SIM)/min-sparse/libcuda.so.1: shim-tests/mincuda/mincuda.c $(HDR)/cuda.h
	$(MIN_CC) -DMINCUDA_SPARSE -o $@ $< -lpthread

$(SIM)/min-noresolver/libcuda.so.1: shim-tests/mincuda/mincuda.c $(HDR)/cuda.h
	$(MIN_CC) -DMINCUDA_NO_RESOLVER -o $@ $< -lpthread

# Helper shared libraries for the scenario tests (a second LD_PRELOAD interposer, a library
# whose constructor allocates).
$(SIM)/lib/lib%.so: shim-tests/interposers/%.c $(HDR)/cuda.h
	$(CC) $(CFLAGS) -fPIC -shared -I$(HDR) -o $@ $< -ldl

# drv_*.c talk to the driver directly; everything else links the runtime.
$(SIM)/bin/drv_%: shim-tests/c/drv_%.c $(wildcard shim-tests/c/*.h) $(HDR)/cuda.h $(SIM)/lib/libcuda.so.1
	$(CC) $(CFLAGS) -I$(HDR) -Ishim-tests/c -o $@ $< -L$(SIM)/lib -l:libcuda.so.1 -lpthread -Wl,-rpath,'$$ORIGIN/../lib'

# cu13_*.c: driver programs built against the CUDA 13 headers (make headers fetches them).
$(SIM)/bin/cu13_%: shim-tests/c13/cu13_%.c shim-tests/c/sim.h $(HDR13)/cuda.h $(SIM)/lib/libcuda.so.1
	$(CC) $(CFLAGS) -I$(HDR13) -Ishim-tests/c -o $@ $< -L$(SIM)/lib -l:libcuda.so.1 -lpthread -Wl,-rpath,'$$ORIGIN/../lib'

$(SIM)/bin/%: shim-tests/c/%.c $(wildcard shim-tests/c/*.h) $(HDR)/cuda.h $(SIM)/lib/libcudart.so.12
	$(CC) $(CFLAGS) -I$(HDR) -Ishim-tests/c -o $@ $< -L$(SIM)/lib -l:libcudart.so.12 -lpthread -Wl,-rpath,'$$ORIGIN/../lib'

# Real PyTorch, CuPy and NCCL wheels (pinned, about 2.7 GB) for the framework tests, into
# target/frameworks/site; without network the tests skip with one line (scripts/fetch-frameworks.sh).
frameworks:
	PYTHON=$(PYTHON) scripts/fetch-frameworks.sh

# The real SGLang server (sglang 0.5.23, sglang-kernel 0.4.10 and what it imports, pinned, about
# 830 MB) into target/sglang over the frameworks' torch; without network its tests skip with one
# line (scripts/fetch-sglang.sh).
sglang: frameworks
	PYTHON=$(PYTHON) scripts/fetch-sglang.sh

# The real vLLM server (vllm 0.33.0 and the 197 packages pip resolves for it, pinned: torch
# 2.14.0+cu130, triton 3.8.0, NCCL 2.30.7; 4.0 GB of wheels, 8.9 GB installed) in a venv of its own,
# target/vllm/venv; without network its tests skip with one line (scripts/fetch-vllm.sh).
vllm:
	PYTHON=$(PYTHON) scripts/fetch-vllm.sh

# Extra CPython interpreters for the call-site tests (Debian's 3.13 and 3.14 under
# target/pythons); a version that cannot be fetched is skipped with one line.
pythons:
	scripts/fetch-pythons.sh

# The packaging tests read the wheels and tarballs of `make dist`; then the interposer's
# integration tests run again on aarch64 under qemu (scripts/aarch64.sh).
test: all pythons test-deps frameworks sglang vllm dist
	$(CARGO) test --release --workspace --no-fail-fast
	PYTHON=$(PYTHON) scripts/aarch64.sh test

test-aarch64: all
	PYTHON=$(PYTHON) scripts/aarch64.sh test

demo: all
	scripts/demo.sh

# BENCH_ARGS: e.g. --quick, --only pair, --json FILE (see scripts/bench.sh)
bench: all
	scripts/bench.sh $(BENCH_ARGS)

valgrind: all
	scripts/valgrind.sh

# Portable packages, linked by zig from PyPI against glibc 2.17 (scripts/package.sh);
# ARCHES=x86_64 builds one architecture only.
ARCHES ?= x86_64 aarch64
wheel:
	PYTHON=$(PYTHON) scripts/package.sh wheel $(ARCHES)

dist:
	PYTHON=$(PYTHON) scripts/package.sh dist $(ARCHES)

clean:
	$(CARGO) clean
