# Tern — build with `make` (after scripts/setup.sh). Outputs go to build/ (or build-san/ with SAN=1).
#   make            libraries, CLI, unit-test binaries, examples
#   make test       everything, then the whole test suite (pytest: C unit tests + peer tests)
#   make SAN=1 test-c   the C unit tests under AddressSanitizer + UndefinedBehaviorSanitizer
#   make fuzz       libFuzzer targets (clang)
#   make install [PREFIX=/usr/local] [DESTDIR=]   tern, libtern (shared + static), tern.h, tern.pc,
#                   man pages, the shipped model; `make uninstall` with the same variables removes them
CC      ?= gcc
CXX     ?= g++
SAN     ?= 0
ARCH    ?= -march=x86-64-v3
OPT     ?= -O3
BUILD   ?= $(if $(filter 1,$(SAN)),build-san,build)
# Where `make install` puts things (DESTDIR, empty by default, is prepended to each for staging).
PREFIX  ?= /usr/local
BINDIR  ?= $(PREFIX)/bin
LIBDIR  ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
DATADIR ?= $(PREFIX)/share
MANDIR  ?= $(DATADIR)/man
DOCDIR  ?= $(DATADIR)/doc/tern
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig

WARN     = -Wall -Wextra -Werror -Wno-unused-parameter -Wno-format-truncation
CPPFLAGS = -Iinclude -Isrc -I/usr/include/x86_64-linux-gnu/openblas-pthread -D_GNU_SOURCE
CFLAGS   = -std=c11 $(OPT) $(ARCH) -g $(WARN) -fopenmp -pthread -fPIC
CXXFLAGS = -std=c++17 $(OPT) $(ARCH) -g $(WARN) -fPIC
# The libraries each part links (docs/library.md): the runtime (libtern: translation, scoring, the
# C API) needs the first line only (its GEMMs are oneDNN's and Tern's own: no object calls
# OpenBLAS); training adds SentencePiece's trainer (and MPI, below), the server libmicrohttpd.
# Language identification (src/text/langid.cc: `tern filter --langid`, the server's /detect) is
# CLD2 (Debian libcld2-dev) with its full table, as pycld2 and so LibreTranslate use it: libcld2
# holds the code and a smaller table, libcld2_full only the full table, whose symbols take the
# small one's place because it comes first in the load order; nothing references it directly, so
# it is linked whatever --as-needed says (push-state/pop-state leaves that flag as it was).
# Programs built here (tern, tests, benches) link all three parts, and OpenBLAS and zlib as before.
# ICU (Debian: libicu-dev): the sentence break iterator of src/text/sentences.c.
ICU_LIBS  := $(shell pkg-config --libs icu-uc 2>/dev/null || echo -licuuc -licudata)
RT_LIBS    = -ldnnl -lsentencepiece -Wl,--push-state,--no-as-needed -lcld2_full -Wl,--pop-state -lcld2 -lcjson -lutf8proc -lxxhash $(ICU_LIBS) -lminizip -lyaml -lstdc++ -lgomp -lpthread -lm
TRAIN_LIBS = -lsentencepiece_train
# /translate_file and `tern translate --file-format` (src/serve/docfile.c): .docx and .odt are zip
# archives of XML: libzip (Debian libzip-dev) and libxml2 (libxml2-dev).
XML_CFLAGS := $(shell pkg-config --cflags libxml-2.0 2>/dev/null || echo -I/usr/include/libxml2)
XML_LIBS   := $(shell pkg-config --libs libxml-2.0 2>/dev/null || echo -lxml2)
SERVE_LIBS = -lmicrohttpd -lzip $(XML_LIBS)
# MPI (data-parallel `mpirun -np N tern train`): OpenMPI through its pkg-config file when found
# (Debian: libopenmpi-dev, installed by scripts/setup.sh); MPI=0 builds without it (a launch under
# mpirun with more than one process is then refused with a message).
MPI     ?= $(shell pkg-config --exists ompi-c 2>/dev/null && echo 1 || echo 0)
ifeq ($(MPI),1)
  CPPFLAGS += -DTERN_MPI $(shell pkg-config --cflags ompi-c)
  TRAIN_LIBS += $(shell pkg-config --libs ompi-c)
endif
LDLIBS   = $(SERVE_LIBS) $(TRAIN_LIBS) $(RT_LIBS) -lopenblas -lz
ifeq ($(SAN),1)
  SANFLAGS = -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
  CFLAGS   += $(SANFLAGS)
  CXXFLAGS += $(SANFLAGS)
  LDFLAGS  += $(SANFLAGS)
  OPT      = -O1
endif

# The version: TERN_VERSION in include/tern.h is the one place it is written. tern --version,
# tern_version(), the shared library's SONAME and file name, tern.pc and the Python package
# (python/setup.py) all read it from there; CHANGELOG.md says what each version holds.
VERSION   := $(shell sed -n 's/^.define TERN_VERSION "\([0-9]*\.[0-9]*\.[0-9]*\)"$$/\1/p' include/tern.h)
$(if $(VERSION),,$(error include/tern.h has no line '#define TERN_VERSION "MAJOR.MINOR.PATCH"'))
SOVERSION := $(firstword $(subst ., ,$(VERSION)))
SONAME    := libtern.so.$(SOVERSION)
SOFILE    := libtern.so.$(VERSION)

# The library in three parts (docs/library.md):
#   libtern (.so and .a)  the runtime: kernels, the layers inference shares with training (src/nn/),
#                         models, search, batching, text, scoring, the C API; no MPI, no
#                         libmicrohttpd, no SentencePiece trainer
#   libtern-train.a       training: the rest of src/train/ (trainer, data, checkpoints, MPI) and
#                         SentencePiece training (src/text/spm_train.cc)
#   libtern-serve.a       the HTTP server of `tern serve` (src/serve/)
# The two others are static and internal (no public header): the tern executable links them.
LIB_C   := $(sort $(wildcard src/*/*.c))
LIB_CXX := $(sort $(wildcard src/*/*.cc))
LIB_OBJ := $(LIB_C:%.c=$(BUILD)/%.o) $(LIB_CXX:%.cc=$(BUILD)/%.o)
TRAIN_SRC := $(filter src/train/%,$(LIB_C)) src/text/spm_train.cc
SERVE_SRC := $(filter src/serve/%,$(LIB_C))
RT_SRC    := $(filter-out $(TRAIN_SRC) $(SERVE_SRC),$(LIB_C) $(LIB_CXX))
obj = $(patsubst %.cc,$(BUILD)/%.o,$(patsubst %.c,$(BUILD)/%.o,$(1)))
RT_OBJ    := $(call obj,$(RT_SRC))
TRAIN_OBJ := $(call obj,$(TRAIN_SRC))
SERVE_OBJ := $(call obj,$(SERVE_SRC))
# What the programs built here link, in link order.
LIBS_A    := $(BUILD)/libtern-serve.a $(BUILD)/libtern-train.a $(BUILD)/libtern.a
CLI_C   := $(sort $(wildcard tools/*.c))
CLI_OBJ := $(CLI_C:%.c=$(BUILD)/%.o)
TEST_C  := $(sort $(wildcard tests/c/test_*.c))
TEST_BIN:= $(TEST_C:tests/c/%.c=$(BUILD)/tests/%)
EX_C    := $(sort $(wildcard examples/*.c))
EX_BIN  := $(EX_C:examples/%.c=$(BUILD)/examples/%)
EX_SHARED := $(BUILD)/examples/translate_api_shared
BENCH_C := $(sort $(wildcard bench/*.c))
BENCH_BIN := $(BENCH_C:bench/%.c=$(BUILD)/bench/%)

all: $(LIBS_A) $(BUILD)/libtern.so $(BUILD)/tern $(TEST_BIN) $(EX_BIN) $(BENCH_BIN) $(EX_SHARED)

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
$(BUILD)/src/serve/docfile.o: CPPFLAGS += $(XML_CFLAGS)

$(BUILD)/libtern.a: $(RT_OBJ)
	@rm -f $@
	ar rcs $@ $^
$(BUILD)/libtern-train.a: $(TRAIN_OBJ)
	@rm -f $@
	ar rcs $@ $^
$(BUILD)/libtern-serve.a: $(SERVE_OBJ)
	@rm -f $@
	ar rcs $@ $^

# The shared library (the Python package and other bindings link it): the runtime objects only,
# exporting exactly the functions include/tern.h declares, through a version script generated
# from the header (symbol version node TERN_$(SOVERSION)). libtern.so.MAJOR.MINOR.PATCH with the
# SONAME libtern.so.MAJOR, and the two links to it a system library has. --no-undefined: the
# runtime may not call into training or the server (the link fails if it does).
$(BUILD)/libtern.map: include/tern.h scripts/export_map.sh
	@mkdir -p $(dir $@)
	sh scripts/export_map.sh "$(CC)" include/tern.h TERN_$(SOVERSION) > $@.tmp && mv $@.tmp $@

$(BUILD)/$(SOFILE): $(RT_OBJ) $(BUILD)/libtern.map
	$(CC) -shared $(CFLAGS) $(LDFLAGS) -Wl,--version-script=$(BUILD)/libtern.map -Wl,-soname,$(SONAME) \
	  -Wl,--no-undefined -Wl,--as-needed -o $@ $(RT_OBJ) $(RT_LIBS)
$(BUILD)/$(SONAME): $(BUILD)/$(SOFILE)
	ln -sfn $(SOFILE) $@
$(BUILD)/libtern.so: $(BUILD)/$(SONAME)
	ln -sfn $(SONAME) $@

# examples/translate_api.c linked against libtern.so (found next to build/ through its rpath)
$(BUILD)/examples/translate_api_shared: examples/translate_api.c $(BUILD)/libtern.so
	@mkdir -p $(dir $@)
	$(CC) -Iinclude -D_GNU_SOURCE $(CFLAGS) $(LDFLAGS) -o $@ $< -L$(BUILD) -ltern -Wl,-rpath,'$$ORIGIN/..'

# The CLI: the three parts linked statically (training and the server live in the executable).
# The models directory it looks in by name (tern translate -m en-de) is found at run time next to
# the executable (BIN/../share/tern/models) and, as a fallback, at the DATADIR of the build.
$(BUILD)/tools/cli_models.o: CPPFLAGS += -DTERN_DATADIR='"$(DATADIR)/tern"'
# tools/cpu_guard.c checks the CPU before any x86-64-v3 code runs, so it alone is baseline x86-64
$(BUILD)/tools/cpu_guard.o: override ARCH = -march=x86-64 -mtune=generic
$(BUILD)/tern: $(CLI_OBJ) $(LIBS_A)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $(CLI_OBJ) $(LIBS_A) $(LDLIBS)

# The CUDA backend's host side (src/kernels/cuda/: the device row kernels' arithmetic run on the
# CPU, and the caching allocator) is built and tested in every build, the device code only with
# CUDA=1 (below). No floating-point contraction where it is compared with the device bit for bit.
CUDA_HOST_OBJ := $(BUILD)/src/kernels/cuda/emulate.o $(BUILD)/src/kernels/cuda/dalloc.o
$(BUILD)/src/kernels/cuda/emulate.o: CFLAGS += -ffp-contract=off
$(BUILD)/tests/test_cuda_host: tests/c/test_cuda_host.c $(CUDA_HOST_OBJ) $(LIBS_A) $(wildcard tests/c/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -ffp-contract=off $(LDFLAGS) -o $@ $< $(CUDA_HOST_OBJ) $(LIBS_A) $(LDLIBS)

# CUDA=1: the device kernels (src/kernels/cuda/*.cu) into $(BUILD)/libtern-cuda.a and their GPU test
# (tests/cuda/), for the H100/H200 (sm_90, with PTX for later GPUs); `make CUDA=1 cuda` builds only
# those. cudart is linked statically into the test, cuBLASLt dynamically (from the toolkit's
# lib64, found through the rpath; the lent GPU's image has the toolkit: scripts/gpu_check.sh). --fmad=false: no contraction beyond rowops.h's explicit fmaf, as the
# host emulation is compiled (-ffp-contract=off). The CPU build never depends on any of it.
ifeq ($(CUDA),1)
NVCC      ?= nvcc
CUDA_ARCH ?= -gencode arch=compute_90,code=[sm_90,compute_90]
NVCCFLAGS ?= -std=c++17 -O3 --fmad=false $(CUDA_ARCH) -Xcompiler -fPIC,-Wall,-Werror
CUDA_LIBDIR ?= $(dir $(shell command -v $(NVCC)))../lib64
CUDA_CU   := $(sort $(wildcard src/kernels/cuda/*.cu))
CUDA_OBJ  := $(CUDA_CU:%.cu=$(BUILD)/%.o)
$(BUILD)/%.o: %.cu $(wildcard src/kernels/cuda/*.h)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -Iinclude -Isrc -c $< -o $@
$(BUILD)/libtern-cuda.a: $(CUDA_OBJ)
	@rm -f $@
	ar rcs $@ $^
$(BUILD)/tests/cuda/test_cuda_kernels: tests/cuda/test_cuda_kernels.cu $(BUILD)/libtern-cuda.a $(CUDA_HOST_OBJ)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -Iinclude -Isrc -cudart static -o $@ $< $(BUILD)/libtern-cuda.a $(CUDA_HOST_OBJ) \
	  -lcublasLt -Xlinker -rpath,$(CUDA_LIBDIR)
cuda: $(BUILD)/libtern-cuda.a $(BUILD)/tests/cuda/test_cuda_kernels
all: cuda
.PHONY: cuda
else
cuda:
	@echo "make cuda: build with CUDA=1 (make CUDA=1 cuda)" >&2; exit 2
endif

$(BUILD)/tests/%: tests/c/%.c $(LIBS_A) $(wildcard tests/c/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) -o $@ $< $(LIBS_A) $(LDLIBS)

# The example links the runtime only (what an application embedding the translator links).
$(BUILD)/examples/%: examples/%.c $(BUILD)/libtern.a
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) -o $@ $< $(BUILD)/libtern.a $(RT_LIBS)

$(BUILD)/bench/%: bench/%.c $(LIBS_A)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) -o $@ $< $(LIBS_A) $(LDLIBS)

# Test drivers (tests/tools/*.c): small programs the pytest suite runs, e.g. train_driver, which
# runs the training step for tests/test_train_torch.py (compared with PyTorch), and
# family_train_driver, the same for any family of the training table (rnn-gru, gnmt).
TOOL_C   := $(sort $(wildcard tests/tools/*.c))
TOOL_BIN := $(TOOL_C:tests/tools/%.c=$(BUILD)/tests/tools/%)
all: $(TOOL_BIN)
# Their shared header(s) (tests/tools/*.h, e.g. train_driver_util.h) are included, not linked.
$(BUILD)/tests/tools/%: tests/tools/%.c $(wildcard tests/tools/*.h) $(LIBS_A)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) -o $@ $< $(LIBS_A) $(LDLIBS)

# Fuzz targets: fuzz/fuzz_*.c, built with clang's libFuzzer + ASan/UBSan into build-fuzz/, linked
# with only the library objects the model loaders need, compiled the same way into
# build-fuzz-lib/. -fopenmp=libgomp: clang ignores the OpenMP pragmas (the loaders run
# single-threaded) and links libgomp, the runtime oneDNN itself uses (no libomp alongside it).
# Run them with scripts/fuzz_ci.sh.
FUZZ_C     := $(sort $(wildcard fuzz/fuzz_*.c))
FUZZ_BIN   := $(FUZZ_C:fuzz/%.c=build-fuzz/%)
FUZZ_LIB_C := src/base/file.c src/base/status.c src/model/weights.c src/model/ct2_format.c \
              src/model/safetensors.c src/model/transformer_load.c src/model/transformer_desc.c src/model/desc.c src/kernels/gemm.c src/kernels/gemm_f32p.c \
              src/kernels/linear.c src/kernels/gemm_s8.c src/kernels/gemm_s8v.c src/kernels/cpu_isa.c src/kernels/ops.c src/kernels/kernels_ref.c \
              src/kernels/screen.c src/nn/layers.c \
              src/serve/segments.c src/serve/tags.c src/text/sentences.c src/serve/docfile.c \
              src/search/shortlist.c src/search/vmap.c src/text/align.c src/text/vocab.c src/base/hash64.c \
              src/model/marian_format.c src/model/hf_format.c
FUZZ_LIB_CC := src/text/spm.cc
FUZZ_OBJ   := $(FUZZ_LIB_C:%.c=build-fuzz-lib/%.o) $(FUZZ_LIB_CC:%.cc=build-fuzz-lib/%.o)
FUZZ_FLAGS  = -std=c11 -O1 -g $(ARCH) $(filter-out -Wno-format-truncation,$(WARN)) -fopenmp=libgomp -pthread -fno-omit-frame-pointer \
              -fsanitize=address,undefined -fno-sanitize-recover=undefined
fuzz: $(FUZZ_BIN)
build-fuzz-lib/src/serve/docfile.o: CPPFLAGS += $(XML_CFLAGS)
build-fuzz-lib/%.o: %.c
	@mkdir -p $(dir $@)
	clang $(CPPFLAGS) $(FUZZ_FLAGS) -fsanitize=fuzzer-no-link -MMD -MP -c $< -o $@
build-fuzz-lib/%.o: %.cc
	@mkdir -p $(dir $@)
	clang++ $(CPPFLAGS) $(filter-out -std=c11,$(FUZZ_FLAGS)) -std=c++17 -fno-sanitize=vptr -fsanitize=fuzzer-no-link -MMD -MP -c $< -o $@
build-fuzz/%: fuzz/%.c fuzz/fuzz_common.h tests/c/mini_model.h $(FUZZ_OBJ)
	@mkdir -p build-fuzz
	clang $(CPPFLAGS) -Itests/c $(FUZZ_FLAGS) -fsanitize=fuzzer -o $@ $< $(FUZZ_OBJ) \
	  -ldnnl -lopenblas -lcjson -lutf8proc $(ICU_LIBS) -lzip $(XML_LIBS) -lminizip -lz -lyaml -lsentencepiece -lstdc++ -lgomp -lpthread -lm
build-fuzz/fuzz_marian_bin: fuzz/fuzz_marian_npz.c # the same target, with the binary format
-include $(FUZZ_OBJ:.o=.d)
.SECONDARY: $(FUZZ_OBJ)

# Man pages, generated from each command's --help (scripts/manpages.sh): $(BUILD)/man/*.1
man: $(BUILD)/man/.stamp
$(BUILD)/man/.stamp: $(BUILD)/tern scripts/manpages.sh
	@rm -rf $(BUILD)/man
	sh scripts/manpages.sh $(BUILD)/tern $(BUILD)/man
	@touch $@

# make install [PREFIX=/usr/local] [DESTDIR=] (and BINDIR, LIBDIR, ... above): scripts/install.sh
# holds the list of files, which make uninstall removes again.
INSTALL_ENV = BUILD='$(BUILD)' DESTDIR='$(DESTDIR)' PREFIX='$(PREFIX)' BINDIR='$(BINDIR)' LIBDIR='$(LIBDIR)' \
  INCLUDEDIR='$(INCLUDEDIR)' DATADIR='$(DATADIR)' MANDIR='$(MANDIR)' DOCDIR='$(DOCDIR)' \
  PKGCONFIGDIR='$(PKGCONFIGDIR)' VERSION='$(VERSION)' SONAME='$(SONAME)' SOFILE='$(SOFILE)' RT_LIBS='$(RT_LIBS)'
install: $(BUILD)/tern $(BUILD)/$(SOFILE) $(BUILD)/libtern.a $(BUILD)/man/.stamp scripts/tern.pc.in
	@$(INSTALL_ENV) sh scripts/install.sh install
uninstall:
	@$(INSTALL_ENV) sh scripts/install.sh uninstall

test: all
	.venv/bin/python -m pytest -q tests

test-c: $(TEST_BIN)
	@fail=0; pass=0; for t in $(TEST_BIN); do \
	  if $$t >/tmp/tern-test.log 2>&1; then pass=$$((pass+1)); else fail=$$((fail+1)); echo "FAIL $$t"; tail -20 /tmp/tern-test.log; fi; \
	done; echo "$$pass passed, $$fail failed"; [ $$fail -eq 0 ]

clean:
	rm -rf build build-san build-fuzz build-fuzz-lib

.PHONY: all test test-c clean fuzz man install uninstall
-include $(LIB_OBJ:.o=.d) $(CLI_OBJ:.o=.d)

# ---- Debian packages: make deb (docs/library.md, "Debian packages") ------------------------------
# tern, libtern1, libtern-dev and tern-model-en-de (debian/), built by dpkg-buildpackage in a copy
# of the source tree, DEB_DIR/tern-VERSION, so that what it writes into the parent folder lands in
# DEB_DIR: the .debs, the .changes and .buildinfo; then lintian, whose report goes to
# DEB_DIR/lintian.log (an error fails the target). debian/changelog is generated in the copy from
# TERN_VERSION and CHANGELOG.md (debian/changelog.sh). DEB_REUSE=1: the copy's build folder starts
# from the objects of $(BUILD) (the same compile flags; only tools/cli_models.c reads the PREFIX),
# whose dependency files make reads, so any object older than its sources is compiled again
# (not from a SAN=1 build; DEB_REUSE=0 compiles everything: ~2.5 min on 2 cores, ~20 s reusing).
DEB_DIR   ?= build-deb
DEB_REUSE ?= 1
DEB_JOBS  ?= $(shell nproc 2>/dev/null || echo 1)
DEB_TOOLS ?= dpkg-buildpackage dh lintian
DEB_SRC    = $(DEB_DIR)/tern-$(VERSION)
DEB_TREE   = Makefile LICENSE CHANGELOG.md README.md include src tools scripts models debian
# what the packages hold (the prerequisites of install): debian/rules builds it
deb-build: $(BUILD)/tern $(BUILD)/$(SOFILE) $(BUILD)/libtern.a $(BUILD)/man/.stamp
deb:
	@for t in $(DEB_TOOLS); do command -v $$t >/dev/null 2>&1 || { echo "make deb: '$$t' is not installed:" \
	  "run scripts/setup.sh (it installs Debian's debhelper, dpkg-dev and lintian)" >&2; exit 1; }; done
	@rm -rf $(DEB_SRC) $(DEB_DIR)/*.deb $(DEB_DIR)/*.changes $(DEB_DIR)/*.buildinfo $(DEB_DIR)/lintian.log
	@mkdir -p $(DEB_SRC)
	tar -cf - $(DEB_TREE) | tar -xf - -C $(DEB_SRC)
	sh debian/changelog.sh $(VERSION) > $(DEB_SRC)/debian/changelog
	@mkdir -p $(DEB_SRC)/build-deb
	@if [ "$(DEB_REUSE)" = 1 ] && [ "$(SAN)" != 1 ] && [ -d $(BUILD)/src ]; then \
	  echo "make deb: starting from the objects of $(BUILD)/"; \
	  (cd $(BUILD) && find src tools gen \( -name '*.o' -o -name '*.h' \) ! -path tools/cli_models.o 2>/dev/null | \
	    xargs -r cp -p --parents -t $(abspath $(DEB_SRC))/build-deb); \
	  (cd $(BUILD) && find src tools -name '*.d') | while read -r d; do \
	    sed 's#\(^\| \)$(BUILD)/#\1build-deb/#g' $(BUILD)/$$d > $(DEB_SRC)/build-deb/$$d; done; \
	fi
	cd $(DEB_SRC) && MAKEFLAGS= MAKELEVEL= dpkg-buildpackage -b -us -uc --no-pre-clean -j$(DEB_JOBS)
	@lintian --fail-on error $(DEB_DIR)/tern_$(VERSION)_*.changes > $(DEB_DIR)/lintian.log 2>&1; rc=$$?; \
	  cat $(DEB_DIR)/lintian.log; echo "lintian: $$(grep -c '^E:' $(DEB_DIR)/lintian.log) errors," \
	  "$$(grep -c '^W:' $(DEB_DIR)/lintian.log) warnings ($(DEB_DIR)/lintian.log)"; [ $$rc = 0 ]
	@ls $(DEB_DIR)/*.deb
.PHONY: deb deb-build
