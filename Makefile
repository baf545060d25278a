# Tern — build with `make` (after scripts/setup.sh). Outputs go to build/ (or build-san/ with SAN=1).
#   make            library, CLI, unit-test binaries, examples
#   make test       everything, then the whole test suite (pytest: C unit tests + peer tests)
#   make SAN=1 test-c   the C unit tests under AddressSanitizer + UndefinedBehaviorSanitizer
#   make fuzz       libFuzzer targets (clang)
CC      ?= gcc
CXX     ?= g++
SAN     ?= 0
ARCH    ?= -march=x86-64-v3
OPT     ?= -O3
BUILD   ?= $(if $(filter 1,$(SAN)),build-san,build)

WARN     = -Wall -Wextra -Werror -Wno-unused-parameter -Wno-format-truncation
CPPFLAGS = -Iinclude -Isrc -I/usr/include/x86_64-linux-gnu/openblas-pthread -D_GNU_SOURCE
CFLAGS   = -std=c11 $(OPT) $(ARCH) -g $(WARN) -fopenmp -pthread -fPIC
CXXFLAGS = -std=c++17 $(OPT) $(ARCH) -g $(WARN) -fPIC
LDLIBS   = -ldnnl -lopenblas -lsentencepiece -lsentencepiece_train -lcjson -lutf8proc -lxxhash -lz -lmicrohttpd \
           -lstdc++ -lgomp -lpthread -lm
# MPI (data-parallel `mpirun -np N tern train`): OpenMPI through its pkg-config file when found
# (Debian: libopenmpi-dev, installed by scripts/setup.sh); MPI=0 builds without it (a launch under
# mpirun with more than one process is then refused with a message).
MPI     ?= $(shell pkg-config --exists ompi-c 2>/dev/null && echo 1 || echo 0)
ifeq ($(MPI),1)
  CPPFLAGS += -DTERN_MPI $(shell pkg-config --cflags ompi-c)
  LDLIBS   += $(shell pkg-config --libs ompi-c)
endif
ifeq ($(SAN),1)
  SANFLAGS = -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
  CFLAGS   += $(SANFLAGS)
  CXXFLAGS += $(SANFLAGS)
  LDFLAGS  += $(SANFLAGS)
  OPT      = -O1
endif

LIB_C   := $(sort $(wildcard src/*/*.c))
LIB_CXX := $(sort $(wildcard src/*/*.cc))
LIB_OBJ := $(LIB_C:%.c=$(BUILD)/%.o) $(LIB_CXX:%.cc=$(BUILD)/%.o)
CLI_C   := $(sort $(wildcard tools/*.c))
CLI_OBJ := $(CLI_C:%.c=$(BUILD)/%.o)
TEST_C  := $(sort $(wildcard tests/c/test_*.c))
TEST_BIN:= $(TEST_C:tests/c/%.c=$(BUILD)/tests/%)
EX_C    := $(sort $(wildcard examples/*.c))
EX_BIN  := $(EX_C:examples/%.c=$(BUILD)/examples/%)
EX_SHARED := $(BUILD)/examples/translate_api_shared
BENCH_C := $(sort $(wildcard bench/*.c))
BENCH_BIN := $(BENCH_C:bench/%.c=$(BUILD)/bench/%)

all: $(BUILD)/libtern.a $(BUILD)/libtern.so $(BUILD)/tern $(TEST_BIN) $(EX_BIN) $(BENCH_BIN) $(EX_SHARED)

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/%.o: %.cc
	@mkdir -p $(dir $@)
	$(CXX) $(CPPFLAGS) $(CXXFLAGS) -MMD -MP -c $< -o $@

# The web page and the OpenAPI description of `tern serve`, embedded in the library as byte arrays
# (generated header; od is in coreutils).
SERVE_ASSETS := src/serve/page.html src/serve/openapi.json
$(BUILD)/gen/serve_assets.h: $(SERVE_ASSETS) scripts/embed.sh
	@mkdir -p $(dir $@)
	sh scripts/embed.sh $(SERVE_ASSETS) > $@.tmp && mv $@.tmp $@
$(BUILD)/src/serve/server.o: $(BUILD)/gen/serve_assets.h
$(BUILD)/src/serve/server.o: CPPFLAGS += -I$(BUILD)/gen

$(BUILD)/libtern.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

# The shared library (the Python package and other bindings link it): it exports exactly the
# functions include/tern.h declares, through a version script generated from the header.
$(BUILD)/libtern.map: include/tern.h scripts/export_map.sh
	@mkdir -p $(dir $@)
	sh scripts/export_map.sh "$(CC)" include/tern.h > $@.tmp && mv $@.tmp $@

$(BUILD)/libtern.so: $(LIB_OBJ) $(BUILD)/libtern.map
	$(CC) -shared $(CFLAGS) $(LDFLAGS) -Wl,--version-script=$(BUILD)/libtern.map -Wl,-soname,libtern.so \
	  -Wl,--no-undefined -o $@ $(LIB_OBJ) $(LDLIBS)

# examples/translate_api.c linked against libtern.so (found next to build/ through its rpath)
$(BUILD)/examples/translate_api_shared: examples/translate_api.c $(BUILD)/libtern.so
	@mkdir -p $(dir $@)
	$(CC) -Iinclude -D_GNU_SOURCE $(CFLAGS) $(LDFLAGS) -o $@ $< -L$(BUILD) -ltern -Wl,-rpath,'$$ORIGIN/..'

$(BUILD)/tern: $(CLI_OBJ) $(BUILD)/libtern.a
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $(CLI_OBJ) $(BUILD)/libtern.a $(LDLIBS)

$(BUILD)/tests/%: tests/c/%.c $(BUILD)/libtern.a tests/c/check.h
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) -o $@ $< $(BUILD)/libtern.a $(LDLIBS)

$(BUILD)/examples/%: examples/%.c $(BUILD)/libtern.a
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) -o $@ $< $(BUILD)/libtern.a $(LDLIBS)

$(BUILD)/bench/%: bench/%.c $(BUILD)/libtern.a
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) -o $@ $< $(BUILD)/libtern.a $(LDLIBS)

# Test drivers (tests/tools/*.c): small programs the pytest suite runs, e.g. train_driver, which
# runs the training step for tests/test_train_torch.py (compared with PyTorch), and
# family_train_driver, the same for any family of the training table (rnn-gru, gnmt).
TOOL_C   := $(sort $(wildcard tests/tools/*.c))
TOOL_BIN := $(TOOL_C:tests/tools/%.c=$(BUILD)/tests/tools/%)
all: $(TOOL_BIN)
# Their shared header(s) (tests/tools/*.h, e.g. train_driver_util.h) are included, not linked.
$(BUILD)/tests/tools/%: tests/tools/%.c $(wildcard tests/tools/*.h) $(BUILD)/libtern.a
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) -o $@ $< $(BUILD)/libtern.a $(LDLIBS)

# Fuzz targets: fuzz/fuzz_*.c, built with clang's libFuzzer + ASan/UBSan into build-fuzz/, linked
# with only the library objects the model loaders need, compiled the same way into
# build-fuzz-lib/. -fopenmp=libgomp: clang ignores the OpenMP pragmas (the loaders run
# single-threaded) and links libgomp, the runtime oneDNN itself uses (no libomp alongside it).
# Run them with scripts/fuzz_ci.sh.
FUZZ_C     := $(sort $(wildcard fuzz/fuzz_*.c))
FUZZ_BIN   := $(FUZZ_C:fuzz/%.c=build-fuzz/%)
FUZZ_LIB_C := src/base/file.c src/base/status.c src/model/weights.c src/model/ct2_format.c \
              src/model/safetensors.c src/model/transformer_load.c src/model/transformer_desc.c src/kernels/gemm.c src/kernels/gemm_f32p.c \
              src/kernels/linear.c src/kernels/gemm_s8.c src/kernels/gemm_s8v.c src/kernels/cpu_isa.c src/kernels/ops.c src/kernels/kernels_ref.c \
              src/kernels/screen.c \
              src/serve/segments.c
FUZZ_OBJ   := $(FUZZ_LIB_C:%.c=build-fuzz-lib/%.o)
FUZZ_FLAGS  = -std=c11 -O1 -g $(ARCH) $(filter-out -Wno-format-truncation,$(WARN)) -fopenmp=libgomp -pthread -fno-omit-frame-pointer \
              -fsanitize=address,undefined -fno-sanitize-recover=undefined
fuzz: $(FUZZ_BIN)
build-fuzz-lib/%.o: %.c
	@mkdir -p $(dir $@)
	clang $(CPPFLAGS) $(FUZZ_FLAGS) -fsanitize=fuzzer-no-link -MMD -MP -c $< -o $@
build-fuzz/%: fuzz/%.c fuzz/fuzz_common.h tests/c/mini_model.h $(FUZZ_OBJ)
	@mkdir -p build-fuzz
	clang $(CPPFLAGS) -Itests/c $(FUZZ_FLAGS) -fsanitize=fuzzer -o $@ $< $(FUZZ_OBJ) \
	  -ldnnl -lopenblas -lcjson -lutf8proc -lgomp -lpthread -lm
-include $(FUZZ_OBJ:.o=.d)
.SECONDARY: $(FUZZ_OBJ)

test: all
	.venv/bin/python -m pytest -q tests

test-c: $(TEST_BIN)
	@fail=0; pass=0; for t in $(TEST_BIN); do \
	  if $$t >/tmp/tern-test.log 2>&1; then pass=$$((pass+1)); else fail=$$((fail+1)); echo "FAIL $$t"; tail -20 /tmp/tern-test.log; fi; \
	done; echo "$$pass passed, $$fail failed"; [ $$fail -eq 0 ]

clean:
	rm -rf build build-san build-fuzz build-fuzz-lib

.PHONY: all test test-c clean fuzz
-include $(LIB_OBJ:.o=.d) $(CLI_OBJ:.o=.d)
