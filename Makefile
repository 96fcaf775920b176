# culedger build entry points. See README.md.
#   make        release build of everything (library, CLI, simulated CUDA stack, C scenarios)
#   make test   everything CI runs
#   make demo   the main job on the simulated stack
#   make bench  the benchmarks
#   make wheel  the culedger wheels (x86_64, aarch64; manylinux_2_17) into target/wheels/
#   make dist   the wheels and the tarballs into target/dist/
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

.PHONY: all build lib cli sim headers test-deps cprogs test test-aarch64 demo bench wheel dist clean
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

# Third-party libraries the tests load (LLVM OpenMP from PyPI) into target/test-deps/;
# no root, no system package.
test-deps:
	PYTHON=$(PYTHON) scripts/fetch-test-deps.sh

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

cprogs: $(C_BINS) $(SO_LIBS)

# Helper shared libraries for the interposer tests (e.g. a second LD_PRELOAD interposer).
$(SIM)/lib/lib%.so: shim-tests/interposers/%.c $(HDR)/cuda.h
	$(CC) $(CFLAGS) -fPIC -shared -I$(HDR) -o $@ $< -ldl

# drv_*.c talk to the driver directly; everything else links the runtime.
$(SIM)/bin/drv_%: shim-tests/c/drv_%.c $(wildcard shim-tests/c/*.h) $(HDR)/cuda.h $(SIM)/lib/libcuda.so.1
	$(CC) $(CFLAGS) -I$(HDR) -Ishim-tests/c -o $@ $< -L$(SIM)/lib -l:libcuda.so.1 -lpthread -Wl,-rpath,'$$ORIGIN/../lib'

$(SIM)/bin/%: shim-tests/c/%.c $(wildcard shim-tests/c/*.h) $(HDR)/cuda.h $(SIM)/lib/libcudart.so.12
	$(CC) $(CFLAGS) -I$(HDR) -Ishim-tests/c -o $@ $< -L$(SIM)/lib -l:libcudart.so.12 -lpthread -Wl,-rpath,'$$ORIGIN/../lib'

# The packaging tests read the wheels and tarballs of `make dist`; then the interposer's
# integration tests run again on aarch64 under qemu (scripts/aarch64.sh).
test: all test-deps dist
	$(CARGO) test --release --workspace
	PYTHON=$(PYTHON) scripts/aarch64.sh test

test-aarch64: all
	PYTHON=$(PYTHON) scripts/aarch64.sh test

demo: all
	scripts/demo.sh

bench: all
	scripts/bench.sh

# Portable packages, linked by zig from PyPI against glibc 2.17 (scripts/package.sh);
# ARCHES=x86_64 builds one architecture only.
ARCHES ?= x86_64 aarch64
wheel:
	PYTHON=$(PYTHON) scripts/package.sh wheel $(ARCHES)

dist:
	PYTHON=$(PYTHON) scripts/package.sh dist $(ARCHES)

clean:
	$(CARGO) clean
