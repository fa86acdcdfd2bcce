# lacs: Linear-Attention Conformance Suite.
#
#   make                 liblacs (static and shared) and the self-check, in build/
#   make check           the main job: `lacs check` of IMPL (default builtin:cpu) over the core vectors
#   make test-cpu        builtin:cpu over the core vectors under each instruction set (LACS_ISA)
#   make cuda            builtin:cuda (nvcc, sm_80 + sm_90): build/liblacs_cuda.so and build/lacs-bench-cuda
#   make cuda-emulated   the same kernels for the CPU emulation (optimized/cuda/emulation.h)
#   make test-cuda       builtin:cuda's kernels under emulation, a wrong twin rejected, and the device if any
#   make bench-cuda      builtin:cuda against cuBLAS bf16 GEMM and a device copy (needs a GPU)
#   make bench           builtin:cpu's speed against OpenBLAS sgemm, a stream copy and the reference
#   make bench-quick     the same on small shapes (CI)
#   make selfcheck       build and print the reference's self-check
#   make test            install missing test dependencies (ci/deps.sh), build, test-layers, test-names, the Criterion suites,
#                        test-cpu, test-cuda, the Python suites (readers, oracle, schemas, CLI), the hostile-input
#                        suite (test-hostile), vectors-check, vectors-full-check and a bounded fuzz
#   make test-clients    the field's own code as clients, from PyPI (tests/clients/requirements.txt, in the venv
#                        build/venv-clients): ONNX's LinearAttention reference evaluator and fla's adapter
#                        (examples/onnx, examples/fla); part of make test
#   make test-sanitize   the C suites and vectors-check under AddressSanitizer + UBSan, in build-sanitize/
#   make vectors         regenerate the committed core vectors (vectors/core, MANIFEST.json)
#   make vectors-full    generate the full set into vectors/full and check it against MANIFEST-full.json
#   make vectors-check   regenerate the core set in build/ and compare it with the committed one
#   make vectors-full-check  whether vectors/MANIFEST-full.json is stale (versions, list, inputs, two cases rebuilt)
#   make fuzz            fuzz the C safetensors reader (clang libFuzzer) for FUZZ_SECONDS
#   make install         PREFIX (default /usr/local), DESTDIR: the headers, liblacs.so (soname liblacs.so.1) and
#                        liblacs.a, the lacs program, lacs.pc for pkg-config, the core vectors in share/lacs
#   make clean
#
# The reference (reference/*.c except error.c and validate.c) is compiled twice:
# in double (lacs_ref_*) and in long double (lacs_ref_*_ld, -DLACS_REAL_LONG_DOUBLE). Each function is
# written once under its double name; -include reference/rename_ld.h renames it in the second build.

CC ?= cc
SANITIZE ?= 0

ifeq ($(SANITIZE),1)
BUILD ?= build-sanitize
OPT := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all
else
BUILD ?= build
OPT := -O2
endif

# -ffp-contract=off: every a * b + c is two roundings, as written, on every
# machine (SPEC.md 10.3, 10.7: reproducible inputs and goldens).
CFLAGS_LACS := -std=c11 -Wall -Wextra -Werror $(OPT) -ffp-contract=off -fPIC -Iinclude -D_POSIX_C_SOURCE=200809L
LDFLAGS_LACS := $(filter -fsanitize%,$(OPT))
LIBS := -lcjson -lopenblas -lpthread -lm
PYTHON := /usr/bin/python3
FUZZ_SECONDS ?= 30

REF_SRC := reference/driver.c reference/linalg.c reference/linear_attn.c reference/delta_rule.c \
           reference/gated_delta_rule.c reference/efla.c reference/softmax_attn.c \
           reference/preprocess.c reference/ttt.c reference/deltaformer.c reference/path_attn.c \
           reference/mesa_net.c reference/norms.c
# The layers, bottom-up (include/lacs/LAYERS; README.md's layout): core, reference, tolerance, then generators
# and optimized, and checker (the tools) on top.
CORE_SRC := core/error.c core/values.c core/prng.c core/safetensors.c core/compare.c core/output.c
ONCE_SRC := $(CORE_SRC) reference/validate.c reference/noise.c reference/ops.c reference/forms.c \
            tolerance/gauge.c tolerance/check.c tolerance/verdict.c \
            generators/catalog.c generators/golden.c generators/vector_set.c generators/user_case.c \
            optimized/validate.c checker/cases.c checker/report_html.c
# builtin:cpu (optimized/cpu/README.md): optimized/cpu/*.c; a file named *_avx2.c or *_avx512.c is compiled for that
# instruction set (and called only where the CPU has it: dispatch.c), the others for the baseline.
CPU_SRC := $(wildcard optimized/cpu/*.c)
CPU_OBJ := $(patsubst %.c,$(BUILD)/obj/cpu/%.o,$(CPU_SRC))
CPU_HEADERS := $(wildcard optimized/cpu/*.h)
CPU_ISA_FLAGS_avx2 := -mavx2 -mfma
CPU_ISA_FLAGS_avx512 := -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512bf16 -mfma -mavx2
cpu_isa_flags = $(if $(filter %_avx512.c,$(1)),$(CPU_ISA_FLAGS_avx512),$(if $(filter %_avx2.c,$(1)),$(CPU_ISA_FLAGS_avx2)))
TEST_SRC := $(wildcard tests/*.c)
HEADERS := $(wildcard include/lacs/*.h) $(wildcard core/*.h reference/*.h)

REF_D_OBJ := $(patsubst %.c,$(BUILD)/obj/double/%.o,$(REF_SRC))
REF_LD_OBJ := $(patsubst %.c,$(BUILD)/obj/ld/%.o,$(REF_SRC))
ONCE_OBJ := $(patsubst %.c,$(BUILD)/obj/once/%.o,$(ONCE_SRC))
LIB_OBJ := $(REF_D_OBJ) $(REF_LD_OBJ) $(ONCE_OBJ) $(CPU_OBJ)
TEST_OBJ := $(patsubst %.c,$(BUILD)/obj/tests/%.o,$(TEST_SRC))

.PHONY: all lib check selfcheck test test-layers test-names test-c test-cpu test-python test-hostile test-clients test-sanitize deps clean fuzz vectors vectors-full \
        vectors-check vectors-full-check zoo install test-install \
        bench bench-quick cuda cuda-emulated test-cuda bench-cuda nvcc-present

all: lib $(BUILD)/lacs-selfcheck $(BUILD)/lacs-dump $(BUILD)/lacs-generate $(BUILD)/lacs

lib: $(BUILD)/liblacs.a $(BUILD)/liblacs.so

$(BUILD)/obj/double/%.o: %.c $(HEADERS) | deps
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_LACS) -c $< -o $@

$(BUILD)/obj/ld/%.o: %.c $(HEADERS) reference/rename_ld.h | deps
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_LACS) -DLACS_REAL_LONG_DOUBLE -include reference/rename_ld.h -c $< -o $@

$(BUILD)/obj/once/%.o: %.c $(HEADERS) | deps
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_LACS) -c $< -o $@

# builtin:cpu: -O3, and the instruction set of the file's name.
$(BUILD)/obj/cpu/%.o: %.c $(HEADERS) $(CPU_HEADERS) | deps
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_LACS) $(if $(filter 1,$(SANITIZE)),,-O3) $(call cpu_isa_flags,$<) -c $< -o $@

$(BUILD)/liblacs.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

# The shared library's soname carries the ABI's major version (LACS_SO_MAJOR): a program linked against
# liblacs.so.1 keeps loading any 1.x (make install).
LACS_SO_MAJOR := 1
$(BUILD)/liblacs.so: $(LIB_OBJ)
	$(CC) -shared -Wl,-soname,liblacs.so.$(LACS_SO_MAJOR) $(LDFLAGS_LACS) -o $@ $^ $(LIBS)

$(BUILD)/lacs-selfcheck: checker/selfcheck.c $(BUILD)/liblacs.a $(HEADERS)
	$(CC) $(CFLAGS_LACS) -o $@ checker/selfcheck.c $(BUILD)/liblacs.a $(LDFLAGS_LACS) $(LIBS)

# The generator of the golden vectors (SPEC.md 10).
$(BUILD)/lacs-generate: checker/lacs_generate.c $(BUILD)/liblacs.a $(HEADERS)
	$(CC) $(CFLAGS_LACS) -pthread -o $@ checker/lacs_generate.c $(BUILD)/liblacs.a $(LDFLAGS_LACS) $(LIBS)

# make vectors: regenerate the committed core set in place (replacing it: that is what it is for).
vectors: $(BUILD)/lacs-generate
	./$(BUILD)/lacs-generate --set core --out vectors --force

# make vectors-full: generate the full set into vectors/full (not committed) and
# check it against the committed hashes in vectors/MANIFEST-full.json (a difference is listed case by case;
# lacs-generate --set full --force replaces the manifest).
vectors-full: $(BUILD)/lacs-generate
	./$(BUILD)/lacs-generate --set full --out vectors --force-files

# make vectors-full-check (part of make test): whether vectors/MANIFEST-full.json is what the code generates,
# without generating the set: the spec and generator versions, the case list, every case's inputs hash, and
# one gated case of each tier (gates, beta, the fp32 state noise) regenerated whole and compared byte for byte
# (SPEC.md 10.7).
FULL_CHECK_CASES := gated_delta_rule-fp32-t16384,gated_delta_rule-bf16-t16384
vectors-full-check: $(BUILD)/lacs-generate
	./$(BUILD)/lacs-generate --set full --check-manifest vectors/MANIFEST-full.json --regenerate $(FULL_CHECK_CASES)

# make vectors-check: regenerate the core set in memory and compare it with the committed files.
vectors-check: $(BUILD)/lacs-generate
	./$(BUILD)/lacs-generate --set core --check vectors

# The C dump of a safetensors file, compared with the Python reader's (tests/python).
$(BUILD)/lacs-dump: tests/tools/dump.c $(BUILD)/liblacs.a $(HEADERS)
	$(CC) $(CFLAGS_LACS) -o $@ tests/tools/dump.c $(BUILD)/liblacs.a $(LDFLAGS_LACS) $(LIBS)

# The lacs command-line checker (checker/cli*.c: list, check, compare, run, explain).
CLI_SRC := $(wildcard checker/cli*.c)
$(BUILD)/lacs: $(CLI_SRC) checker/cli.h $(BUILD)/liblacs.a $(HEADERS)
	$(CC) $(CFLAGS_LACS) -o $@ $(CLI_SRC) $(BUILD)/liblacs.a $(LDFLAGS_LACS) -ldl $(LIBS)

# The example plugins of the CLI's tests (tests/plugins/NAME.c -> $(BUILD)/plugins/NAME.so), written from
# include/lacs/plugin.h alone, as a plugin author would.
TEST_PLUGIN_SO := $(patsubst tests/plugins/%.c,$(BUILD)/plugins/%.so,$(wildcard tests/plugins/*.c))
$(BUILD)/plugins/%.so: tests/plugins/%.c $(wildcard tests/plugins/*.h) include/lacs/plugin.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_LACS) -shared -o $@ $< -lm

# make check: the main job, the conformance check of an implementation over the core vectors
# (IMPL=builtin:cpu, the optimized CPU implementation, by default; builtin:reference or any plugin path works).
IMPL ?= builtin:cpu
check: $(BUILD)/lacs
	./$(BUILD)/lacs check --impl $(IMPL)

# make test-cpu: builtin:cpu over every core vector under each instruction set (LACS_ISA=avx512, avx2,
# scalar), the bf16 cases with the other bf16 products and the recurrent gradients with every sequence
# checkpointed: every case must pass, none skipped (tests/test_cpu.sh); an instruction set this CPU lacks is
# skipped with the reason `lacs list` gives.
test-cpu: $(BUILD)/lacs
	@BUILD=$(BUILD) bash tests/test_cpu.sh

# make bench: builtin:cpu against the machine (OpenBLAS sgemm, a stream copy) and the scalar reference, one
# line per configuration (bench/README.md); BENCH_ARGS=--quick for a short run (make bench-quick).
BENCH_ARGS ?=
$(BUILD)/lacs-bench: bench/lacs_bench.c $(BUILD)/liblacs.a $(HEADERS) $(CPU_HEADERS)
	$(CC) $(CFLAGS_LACS) -pthread -Ioptimized/cpu -o $@ bench/lacs_bench.c $(BUILD)/liblacs.a $(LDFLAGS_LACS) $(LIBS)

# lacs-bench-gemm: GFLOP/s of builtin:cpu's GEMM kernels next to OpenBLAS's at the chunk shapes.
$(BUILD)/lacs-bench-gemm: bench/bench_gemm.c $(BUILD)/liblacs.a $(HEADERS) $(CPU_HEADERS)
	$(CC) $(CFLAGS_LACS) -pthread -Ioptimized/cpu -o $@ bench/bench_gemm.c $(BUILD)/liblacs.a $(LDFLAGS_LACS) $(LIBS)

bench: $(BUILD)/lacs-bench $(BUILD)/lacs-bench-gemm
	./$(BUILD)/lacs-bench $(BENCH_ARGS)

bench-quick: $(BUILD)/lacs-bench
	./$(BUILD)/lacs-bench --quick

selfcheck: $(BUILD)/lacs-selfcheck
	./$(BUILD)/lacs-selfcheck

deps:
	@bash ci/deps.sh

# The test objects need Criterion: ci/deps.sh installs it when missing.
$(BUILD)/obj/tests/%.o: %.c $(HEADERS) $(CPU_HEADERS) tests/support.h | deps
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_LACS) -c $< -o $@

$(BUILD)/lacs-tests: $(TEST_OBJ) $(BUILD)/liblacs.a
	$(CC) -o $@ $(TEST_OBJ) $(BUILD)/liblacs.a $(LDFLAGS_LACS) -lcriterion $(LIBS)

# make test: the C suites, the Python reader/oracle/schema suites, the hostile-input suite, the
# reproduction of the committed core vectors, and a bounded fuzzing run.
test: test-layers test-names test-c test-cpu test-cuda test-python test-hostile test-clients test-install vectors-check vectors-full-check fuzz

# No include runs upward (tests/check_layers.py): every include of every C, C++ and CUDA file against the layers of
# include/lacs/LAYERS (core, reference, tolerance, generators and optimized, checker; tests, bench and examples on
# top); then the check itself is shown to reject a copy with an upward, sibling or private include.
test-layers:
	$(PYTHON) tests/check_layers.py
	$(PYTHON) tests/check_layers.py --self-test

# Names that grep finds (tests/check_names.sh): every lacs_ref_* declared in include/lacs/ is defined literally in
# reference/, the long-double twins by reference/rename_ld.h, and no macro builds a name; then the check itself is
# shown to reject a tree that breaks each rule.
test-names:
	bash tests/check_names.sh
	bash tests/check_names.sh --self-test

# Under the sanitizers the suites run one at a time (--jobs 1): Criterion 2.4's runner (Debian's libcriterion3)
# with two workers leaks one 48-byte calloc of its own, the report's only frame libcriterion.so.3 (measured
# 2026-11-25: every run of the whole suite with --jobs 2, never with --jobs 1). A suppression would match every
# leak of a test too (Criterion's runner is on each test's stack), so the runner is changed instead.
test-c: $(BUILD)/lacs-tests
	./$(BUILD)/lacs-tests $(if $(filter 1,$(SANITIZE)),--jobs 1)

# The Python reader and its agreement with the C one (interpreter: Debian's, for NumPy).
test-python: $(BUILD)/lacs-dump $(BUILD)/lacs-generate $(BUILD)/liblacs.so $(BUILD)/lacs $(TEST_PLUGIN_SO) $(BUILD)/liblacs_cuda_emulated.so \
             $(BUILD)/lacs-zoo zoo | deps
	PYTHONPATH=python LACS_BUILD=$(BUILD) $(PYTHON) -m unittest discover -s tests/python -t . $(if $(V),-v,)

# The hostile-input suite (tests/hostile/, issue 17): corrupt and tampered vectors, hostile plugins and Python
# functions, planted links and FIFOs, signals; it compiles its own plugins from tests/hostile/plugins/ into a
# temporary directory. LACS_BUILD and LACS_PYTHON point it at another checker (to show what an older one got wrong).
test-hostile: $(BUILD)/lacs $(BUILD)/liblacs.so | deps
	PYTHONPATH=python LACS_BUILD=$(BUILD) $(PYTHON) -m unittest discover -s tests/hostile -t tests/hostile $(if $(V),-v,)

# The field's own code as clients of lacs (tests/clients/): the onnx package's reference evaluator for
# LinearAttention and fla-core's naive functions behind examples/fla's mapping, both from PyPI at the versions
# of tests/clients/requirements.txt, in a virtual environment of Debian's interpreter that sees Debian's NumPy
# and torch (no CUDA stack is downloaded; about 6 s and 96 MB). The venv is made again when the
# requirements change.
CLIENTS_VENV := $(BUILD)/venv-clients
$(CLIENTS_VENV)/installed: tests/clients/requirements.txt | deps
	rm -rf $(CLIENTS_VENV)
	$(PYTHON) -m venv --system-site-packages $(CLIENTS_VENV)
	$(CLIENTS_VENV)/bin/python -m pip install --disable-pip-version-check -q -r tests/clients/requirements.txt || \
	    { echo "make test-clients: pip could not install tests/clients/requirements.txt (it needs PyPI)" >&2; exit 1; }
	touch $@

test-clients: $(BUILD)/liblacs.so $(BUILD)/lacs $(CLIENTS_VENV)/installed
	PYTHONPATH=python LACS_BUILD=$(BUILD) $(CLIENTS_VENV)/bin/python -m unittest discover -s tests/clients \
	    -t tests/clients $(if $(V),-v,)

# libFuzzer (clang) on the C reader, seeded with the test corpus, for FUZZ_SECONDS.
FUZZ_BUILD := build-fuzz
$(FUZZ_BUILD)/fuzz-safetensors: tests/fuzz/fuzz_safetensors.c core/safetensors.c core/output.c core/values.c core/error.c \
                                $(HEADERS) | deps
	@mkdir -p $(FUZZ_BUILD)/corpus
	clang -std=c11 -g -O1 -Iinclude -D_POSIX_C_SOURCE=200809L -fsanitize=fuzzer,address,undefined \
	    -o $@ tests/fuzz/fuzz_safetensors.c core/safetensors.c core/output.c core/values.c core/error.c -lcjson -lm

fuzz: $(FUZZ_BUILD)/fuzz-safetensors
	./$(FUZZ_BUILD)/fuzz-safetensors -max_total_time=$(FUZZ_SECONDS) -timeout=5 -rss_limit_mb=2048 \
	    $(FUZZ_BUILD)/corpus tests/data/malformed tests/data/valid

# The C suites, the regeneration of the core vectors, the reference's and builtin:cpu's checks (under each
# instruction set) under ASan + UBSan.
test-sanitize:
	$(MAKE) SANITIZE=1 test-c vectors-check test-cpu
	$(MAKE) SANITIZE=1 check IMPL=builtin:reference

clean:
	rm -rf build build-sanitize build-fuzz

# make install: what a C project needs to build a plugin or call the reference (`pkg-config --cflags --libs lacs`),
# the lacs program, and the core vectors (LACS_VECTORS=$(PREFIX)/share/lacs/vectors/core for lacs outside the
# repository). The version is the spec's (include/lacs/types.h). tests/test_install.sh checks it (make test).
PREFIX ?= /usr/local
DESTDIR ?=
LACS_VERSION := $(shell sed -n 's/^\#define LACS_SPEC_VERSION "\(.*\)"/\1/p' include/lacs/types.h)
install: $(BUILD)/liblacs.so $(BUILD)/liblacs.a $(BUILD)/lacs
	@test -n "$(LACS_VERSION)" || { echo "make install: no LACS_SPEC_VERSION in include/lacs/types.h" >&2; exit 1; }
	install -d $(DESTDIR)$(PREFIX)/include/lacs $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/bin \
	    $(DESTDIR)$(PREFIX)/share/lacs/vectors
	install -m 644 include/lacs/*.h $(DESTDIR)$(PREFIX)/include/lacs/
	install -m 755 $(BUILD)/liblacs.so $(DESTDIR)$(PREFIX)/lib/liblacs.so.$(LACS_VERSION)
	ln -sf liblacs.so.$(LACS_VERSION) $(DESTDIR)$(PREFIX)/lib/liblacs.so.$(LACS_SO_MAJOR)
	ln -sf liblacs.so.$(LACS_SO_MAJOR) $(DESTDIR)$(PREFIX)/lib/liblacs.so
	install -m 644 $(BUILD)/liblacs.a $(DESTDIR)$(PREFIX)/lib/liblacs.a
	install -m 755 $(BUILD)/lacs $(DESTDIR)$(PREFIX)/bin/lacs
	cp -R vectors/core vectors/MANIFEST.json vectors/schema $(DESTDIR)$(PREFIX)/share/lacs/vectors/
	{ echo 'prefix=$(PREFIX)'; echo 'libdir=$${prefix}/lib'; echo 'includedir=$${prefix}/include'; echo; \
	  echo 'Name: lacs'; echo 'Description: Linear-Attention Conformance Suite: the reference, the checker, the plugin ABI'; \
	  echo 'Version: $(LACS_VERSION)'; echo 'Cflags: -I$${includedir}'; echo 'Libs: -L$${libdir} -llacs'; \
	  echo 'Libs.private: $(LIBS)'; } > $(DESTDIR)$(PREFIX)/lib/pkgconfig/lacs.pc
	@echo "make install: lacs $(LACS_VERSION) in $(DESTDIR)$(PREFIX) (pkg-config: PKG_CONFIG_PATH=$(DESTDIR)$(PREFIX)/lib/pkgconfig)"

test-install: $(BUILD)/liblacs.so $(BUILD)/liblacs.a $(BUILD)/lacs
	BUILD=$(BUILD) bash tests/test_install.sh

# ---- the zoo (SPEC.md 11.6): legitimate implementations and realistic bugs, as ABI v1 plugins ----
# tests/zoo/NAME.c -> $(BUILD)/zoo/NAME.so; -DZOO_FMA=1 variants -> $(BUILD)/zoo/NAME_fma.so (explicit fmaf(),
# so that the same plugin runs on machines without FMA instructions).
ZOO_SRC := $(filter-out tests/zoo/zoo_run.c,$(wildcard tests/zoo/*.c))
ZOO_SO := $(patsubst tests/zoo/%.c,$(BUILD)/zoo/%.so,$(ZOO_SRC))
ZOO_FMA_SO := $(patsubst tests/zoo/%.c,$(BUILD)/zoo/%_fma.so,$(ZOO_SRC))

$(BUILD)/zoo/%.so: tests/zoo/%.c $(wildcard tests/zoo/*.h) $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_LACS) -shared -o $@ $< -lm

$(BUILD)/zoo/%_fma.so: tests/zoo/%.c $(wildcard tests/zoo/*.h) $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_LACS) -DZOO_FMA=1 -shared -o $@ $< -lm

zoo: $(ZOO_SO) $(ZOO_FMA_SO)

# The zoo's binary32 reference (tests/zoo/float_reference.c): the reference compiled a third time with
# -DLACS_REAL_FLOAT (real = float, names lacs_ref_*_f32) and reference/ops.c with it, so that
# lacs_reference_run's second precision is float there. The double reference (with what it links:
# errors, validation, the gauge's noise and its generator) comes along only because ops.c names it, and
# is never run. Every symbol but lacs_plugin_run is hidden, so the plugin cannot clash with liblacs.
# Its prototypes are generated from include/lacs/reference_ld.h, so the three builds cannot drift apart.
FLOAT_REF := $(BUILD)/zoo/float_reference
FLOAT_REF_HEADERS := $(BUILD)/zoo/include/lacs/reference_f32.h $(BUILD)/zoo/include/lacs/reference_f32_as_ld.h \
                     $(BUILD)/zoo/include/rename_f32.h
# The reference's own files get their _f32 names from rename_f32.h (reference/rename_ld.h with _ld read _f32).
float_ref_rename = $(if $(filter $(REF_SRC),$(1)),-include $(BUILD)/zoo/include/rename_f32.h)
FLOAT_REF_D_OBJ := $(patsubst %.c,$(FLOAT_REF)/double/%.o,$(REF_SRC) core/error.c reference/validate.c \
                     reference/noise.c core/prng.c core/values.c)
FLOAT_REF_F32_OBJ := $(patsubst %.c,$(FLOAT_REF)/f32/%.o,$(REF_SRC) reference/ops.c)
FLOAT_REF_FMA_OBJ := $(patsubst %.c,$(FLOAT_REF)/f32_fma/%.o,$(REF_SRC) reference/ops.c)
# The _fma variant lets the compiler contract a * b + c into fused multiply-adds (-ffp-contract=fast)
# instead of the reference's explicit roundings. On x86-64 that needs -mfma, whose instructions a CPU
# without FMA cannot run: it is added only where /proc/cpuinfo lists fma (the CI machine's does), and the
# plugin checks again at run time. Acceptable for a test artifact; elsewhere the variant is plain float.
FLOAT_REF_FMA_FLAGS := -ffp-contract=fast $(if $(shell grep -qw fma /proc/cpuinfo 2>/dev/null && echo yes),-mfma)

$(BUILD)/zoo/include/lacs/reference_f32.h: include/lacs/reference_ld.h
	@mkdir -p $(dir $@)
	{ echo '/* Generated by the Makefile from include/lacs/reference_ld.h: the reference in binary32'; \
	  echo ' * (-DLACS_REAL_FLOAT), for the zoo member tests/zoo/float_reference.c only. */'; \
	  sed -e '1,/\*\//d' -e 's/_ld\b/_f32/g' -e 's/long double/float/g' -e 's/LACS_REFERENCE_LD_H/LACS_REFERENCE_F32_H/g' $<; } > $@

$(BUILD)/zoo/include/lacs/reference_f32_as_ld.h: include/lacs/reference_ld.h
	@mkdir -p $(dir $@)
	{ echo '/* Generated by the Makefile from include/lacs/reference_ld.h: in reference/ops.c compiled with'; \
	  echo ' * -DLACS_REAL_FLOAT, each lacs_ref_*_ld name means its lacs_ref_*_f32 twin. */'; \
	  echo '#ifndef LACS_REFERENCE_F32_AS_LD_H'; echo '#define LACS_REFERENCE_F32_AS_LD_H'; \
	  grep -o 'lacs_ref_[a-z0-9_]*_ld\b' $< | sort -u | sed 's/\(.*\)_ld$$/#define \1_ld \1_f32/'; \
	  echo '#endif'; } > $@

$(BUILD)/zoo/include/rename_f32.h: reference/rename_ld.h
	@mkdir -p $(dir $@)
	{ echo '/* Generated by the Makefile from reference/rename_ld.h: the binary32 build'"'"'s names. */'; \
	  sed -e '1,/\*\//d' -e 's/_ld\b/_f32/g' -e 's/_LD_H/_F32_H/g' $<; } > $@

$(FLOAT_REF)/double/%.o: %.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_LACS) -fvisibility=hidden -c $< -o $@

$(FLOAT_REF)/f32/%.o: %.c $(HEADERS) $(FLOAT_REF_HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_LACS) -I$(BUILD)/zoo/include -DLACS_REAL_FLOAT $(call float_ref_rename,$<) -fvisibility=hidden \
	    -c $< -o $@

$(FLOAT_REF)/f32_fma/%.o: %.c $(HEADERS) $(FLOAT_REF_HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_LACS) $(FLOAT_REF_FMA_FLAGS) -I$(BUILD)/zoo/include -DLACS_REAL_FLOAT $(call float_ref_rename,$<) \
	    -fvisibility=hidden -c $< -o $@

$(BUILD)/zoo/float_reference.so: tests/zoo/float_reference.c $(FLOAT_REF_F32_OBJ) $(FLOAT_REF_D_OBJ) $(HEADERS)
	$(CC) $(CFLAGS_LACS) -fvisibility=hidden -shared -o $@ $< $(FLOAT_REF_F32_OBJ) $(FLOAT_REF_D_OBJ) -lm

$(BUILD)/zoo/float_reference_fma.so: tests/zoo/float_reference.c $(FLOAT_REF_FMA_OBJ) $(FLOAT_REF_D_OBJ) $(HEADERS)
	$(CC) $(CFLAGS_LACS) $(FLOAT_REF_FMA_FLAGS) -DZOO_FMA=1 -fvisibility=hidden -shared -o $@ $< \
	    $(FLOAT_REF_FMA_OBJ) $(FLOAT_REF_D_OBJ) -lm

# lacs-zoo: runs one zoo plugin in-process over the vectors (tests/zoo/zoo_run.c; a test tool).
$(BUILD)/lacs-zoo: tests/zoo/zoo_run.c $(BUILD)/liblacs.a $(HEADERS)
	$(CC) $(CFLAGS_LACS) -o $@ tests/zoo/zoo_run.c $(BUILD)/liblacs.a $(LDFLAGS_LACS) -ldl $(LIBS)

# ---- builtin:cuda (optimized/cuda/README.md): optimized/cuda/ ----
# make cuda: build/liblacs_cuda.so, the kernels for sm_80 and sm_90 (nvcc, every warning an error), loaded
# by the checker for --impl builtin:cuda; it runs where there is a device. make cuda-emulated: the same
# kernels compiled by the host C++ compiler against optimized/cuda/emulation.h, run on the CPU
# (build/liblacs_cuda_emulated.so; LACS_CUDA_LIBRARY points builtin:cuda at it).
NVCC ?= $(shell command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)
CXX ?= g++
CUDA_ARCH_FLAGS := -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90
NVCCFLAGS := -std=c++17 -O3 $(CUDA_ARCH_FLAGS) -Werror all-warnings -Xcompiler -Wall,-Wextra,-Werror,-fPIC \
             -Iinclude -Ioptimized/cuda
CUDA_EMULATION_FLAGS := -std=c++17 -O2 -g -x c++ -DLACS_CUDA_EMULATION -Wall -Wextra -Werror -fPIC \
                        -Iinclude -Ioptimized/cuda
CUDA_CU := $(wildcard optimized/cuda/*.cu)
CUDA_HEADERS := $(wildcard optimized/cuda/*.h optimized/cuda/*.cuh) optimized/validate.h
CUDA_OBJ := $(patsubst %.cu,$(BUILD)/obj/cuda/%.o,$(CUDA_CU))
CUDA_EMULATED_OBJ := $(patsubst %.cu,$(BUILD)/obj/cuda-emulated/%.o,$(CUDA_CU)) \
                     $(BUILD)/obj/cuda-emulated/optimized/cuda/emulation.o
CUDA_DISPATCH_OBJ := $(BUILD)/obj/cuda-host/optimized/cuda/dispatch.o

$(BUILD)/obj/cuda/%.o: %.cu $(HEADERS) $(CUDA_HEADERS) | deps nvcc-present
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@

nvcc-present:
	@command -v $(NVCC) >/dev/null 2>&1 || { echo "make cuda: nvcc not found at '$(NVCC)': builtin:cuda needs the CUDA \
	toolkit (nvcc 12 or later; NVCC=/path/to/nvcc)" >&2; exit 1; }

$(BUILD)/obj/cuda-emulated/%.o: %.cu $(HEADERS) $(CUDA_HEADERS) | deps
	@mkdir -p $(dir $@)
	$(CXX) $(CUDA_EMULATION_FLAGS) -c $< -o $@

$(BUILD)/obj/cuda-emulated/optimized/cuda/emulation.o: optimized/cuda/emulation.cpp optimized/cuda/emulation.h | deps
	@mkdir -p $(dir $@)
	$(CXX) $(filter-out -x c++,$(CUDA_EMULATION_FLAGS)) -c $< -o $@

$(CUDA_DISPATCH_OBJ): optimized/cuda/dispatch.c $(HEADERS) $(CUDA_HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_LACS) -c $< -o $@

# Only the lacs_cuda_* entry points and the plugin ABI's lacs_plugin_run, lacs_plugin_describe and
# lacs_plugin_last_error are exported: liblacs and the CUDA runtime, linked statically, stay inside.
$(BUILD)/liblacs_cuda.so: $(CUDA_OBJ) $(CUDA_DISPATCH_OBJ) $(BUILD)/liblacs.a
	$(NVCC) -shared $(CUDA_ARCH_FLAGS) -cudart static -o $@ $(CUDA_OBJ) $(CUDA_DISPATCH_OBJ) $(BUILD)/liblacs.a \
	    -Xlinker --exclude-libs,ALL $(LIBS)

$(BUILD)/liblacs_cuda_emulated.so: $(CUDA_EMULATED_OBJ) $(CUDA_DISPATCH_OBJ) $(BUILD)/liblacs.a
	$(CXX) -shared $(LDFLAGS_LACS) -o $@ $(CUDA_EMULATED_OBJ) $(CUDA_DISPATCH_OBJ) $(BUILD)/liblacs.a \
	    -Wl,--exclude-libs,ALL -Wl,--no-undefined $(LIBS)

# make bench-cuda: builtin:cuda against cuBLAS bf16 GEMM and a device copy, measured in the same run
# (bench/lacs_bench_cuda.cu; BENCH_ARGS=--quick for shorter shapes); without a device it says why, exit 2.
$(BUILD)/lacs-bench-cuda: bench/lacs_bench_cuda.cu $(CUDA_OBJ) $(CUDA_DISPATCH_OBJ) $(BUILD)/liblacs.a $(HEADERS) \
                          $(CUDA_HEADERS)
	$(NVCC) $(NVCCFLAGS) -o $@ bench/lacs_bench_cuda.cu $(CUDA_OBJ) $(CUDA_DISPATCH_OBJ) $(BUILD)/liblacs.a -lcublas \
	    $(LIBS)

cuda: $(BUILD)/liblacs_cuda.so $(BUILD)/lacs-bench-cuda
cuda-emulated: $(BUILD)/liblacs_cuda_emulated.so

bench-cuda: $(BUILD)/lacs-bench-cuda
	./$(BUILD)/lacs-bench-cuda $(BENCH_ARGS)

# The deliberately wrong twins of the emulated library, for make test-cuda: every kernel compiled with
# -DLACS_CUDA_MUTANTS, where LACS_CUDA_MUTANT=<name> selects one bug per family (cuda_common.cuh's
# lacs_cuda_mutant_kind; without it the library is right). The suite must reject every one.
CUDA_MUTANT_OBJ := $(patsubst %.cu,$(BUILD)/obj/cuda-mutant/%.o,$(CUDA_CU)) \
                   $(BUILD)/obj/cuda-emulated/optimized/cuda/emulation.o
$(BUILD)/obj/cuda-mutant/%.o: %.cu $(HEADERS) $(CUDA_HEADERS) | deps
	@mkdir -p $(dir $@)
	$(CXX) $(CUDA_EMULATION_FLAGS) -DLACS_CUDA_MUTANTS -c $< -o $@

$(BUILD)/liblacs_cuda_mutant.so: $(CUDA_MUTANT_OBJ) $(CUDA_DISPATCH_OBJ) $(BUILD)/liblacs.a
	$(CXX) -shared $(LDFLAGS_LACS) -o $@ $(CUDA_MUTANT_OBJ) $(CUDA_DISPATCH_OBJ) $(BUILD)/liblacs.a \
	    -Wl,--exclude-libs,ALL -Wl,--no-undefined $(LIBS)

# make test-cuda (part of make test; tests/test_cuda.sh): make cuda must compile (where nvcc is found); the
# emulation must pass its own tests and refuse the rule-breaking kernels of tests/test_cuda_rules.cu; the
# kernels under emulation must pass every core vector of every op, with the same bits under the forward
# and the reverse schedule; every family's mutant must fail; on a machine with a GPU, builtin:cuda itself
# must pass the vectors, else that part is skipped with the reason. Without nvcc, the emulated parts still
# run and the nvcc build and the device part are skipped, with the reason.
NVCC_FOUND := $(shell command -v $(NVCC) >/dev/null 2>&1 && echo yes)
test-cuda: $(BUILD)/lacs $(if $(NVCC_FOUND),$(BUILD)/liblacs_cuda.so) $(BUILD)/liblacs_cuda_emulated.so \
           $(BUILD)/liblacs_cuda_mutant.so $(BUILD)/lacs-test-cuda-emulation
	BUILD=$(BUILD) NVCC='$(NVCC)' NVCC_FOUND=$(NVCC_FOUND) CUDA_RULES_CXX='$(CXX) $(CUDA_EMULATION_FLAGS)' \
	    bash tests/test_cuda.sh

# The emulation's own tests (tests/test_cuda_emulation.cu): it tells a right kernel from a wrong one.
$(BUILD)/lacs-test-cuda-emulation: tests/test_cuda_emulation.cu $(BUILD)/obj/cuda-emulated/optimized/cuda/emulation.o \
                                   $(HEADERS) $(CUDA_HEADERS)
	$(CXX) $(CUDA_EMULATION_FLAGS) -o $@ tests/test_cuda_emulation.cu -x none \
	    $(BUILD)/obj/cuda-emulated/optimized/cuda/emulation.o
