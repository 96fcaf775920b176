# culedger build entry points. See README.md.
#   make        release build of everything (library, CLI, simulated CUDA stack, C scenarios)
#   make test   everything CI runs
#   make demo   the main job on the simulated stack
#   make bench  the benchmarks
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
SO_SRCS := $(wildcard shim-tests/interposers/*.c)
SO_LIBS := $(patsubst shim-tests/interposers/%.c,$(SIM)/lib/lib%.so,$(SO_SRCS))
# The minimal-cost driver (benchmarks), and its variants for the bad-input tests: one that
# exports only the resolver, one without the resolver (a driver older than CUDA 11.3).
MIN_LIBS := $(SIM)/min/libcuda.so.1 $(SIM)/min-sparse/libcuda.so.1 $(SIM)/min-noresolver/libcuda.so.1
MIN_CC = mkdir -p $(@D) && $(CC) -O2 -g -Wall -Wextra -Werror -fPIC -shared -I$(HDR) -Wl,-soname,libcuda.so.1

.PHONY: all build lib cli sim headers cprogs test demo bench valgrind clean
all: build sim

build:
	$(CARGO) build --release --workspace --all-targets

lib:
	$(CARGO) build --release -p culedger

cli:
	$(CARGO) build --release -p culedger-cli

# Official CUDA 12.9 headers (and the real libcudart.so.12 the tests run) from PyPI wheels;
# the script returns at once when they are already unpacked.
headers:
	PYTHON=$(PYTHON) scripts/fetch-cuda-headers.sh
$(HDR)/cuda.h: headers

# The simulated machine: fake libcuda.so.1 and libcudart.so.12 with their sonames,
# plus the C scenario programs compiled against the official CUDA 12.9 headers.
sim: headers
	$(CARGO) build --release -p fakecuda -p fakecudart
	mkdir -p $(SIM)/lib $(SIM)/bin
	cp -f $(REL)/libfakecuda.so $(SIM)/lib/libcuda.so.1
	ln -sf libcuda.so.1 $(SIM)/lib/libcuda.so
	cp -f $(REL)/libfakecudart.so $(SIM)/lib/libcudart.so.12
	ln -sf libcudart.so.12 $(SIM)/lib/libcudart.so
	$(MAKE) cprogs

cprogs: $(C_BINS) $(SO_LIBS) $(MIN_LIBS)

$(SIM)/min/libcuda.so.1: shim-tests/mincuda/mincuda.c $(HDR)/cuda.h
	$(MIN_CC) -o $@ $< -lpthread

$(SIM)/min-sparse/libcuda.so.1: shim-tests/mincuda/mincuda.c $(HDR)/cuda.h
	$(MIN_CC) -DMINCUDA_SPARSE -o $@ $< -lpthread

$(SIM)/min-noresolver/libcuda.so.1: shim-tests/mincuda/mincuda.c $(HDR)/cuda.h
	$(MIN_CC) -DMINCUDA_NO_RESOLVER -o $@ $< -lpthread

# Helper shared libraries for the interposer tests (e.g. a second LD_PRELOAD interposer).
$(SIM)/lib/lib%.so: shim-tests/interposers/%.c $(HDR)/cuda.h
	$(CC) $(CFLAGS) -fPIC -shared -I$(HDR) -o $@ $< -ldl

# drv_*.c talk to the driver directly; everything else links the runtime.
$(SIM)/bin/drv_%: shim-tests/c/drv_%.c $(wildcard shim-tests/c/*.h) $(HDR)/cuda.h $(SIM)/lib/libcuda.so.1
	$(CC) $(CFLAGS) -I$(HDR) -Ishim-tests/c -o $@ $< -L$(SIM)/lib -l:libcuda.so.1 -lpthread -Wl,-rpath,'$$ORIGIN/../lib'

$(SIM)/bin/%: shim-tests/c/%.c $(wildcard shim-tests/c/*.h) $(HDR)/cuda.h $(SIM)/lib/libcudart.so.12
	$(CC) $(CFLAGS) -I$(HDR) -Ishim-tests/c -o $@ $< -L$(SIM)/lib -l:libcudart.so.12 -lpthread -Wl,-rpath,'$$ORIGIN/../lib'

test: all
	$(CARGO) test --release --workspace

demo: all
	scripts/demo.sh

# BENCH_ARGS: e.g. --quick, --only pair, --json FILE (see scripts/bench.sh)
bench: all
	scripts/bench.sh $(BENCH_ARGS)

valgrind: all
	scripts/valgrind.sh

clean:
	$(CARGO) clean
