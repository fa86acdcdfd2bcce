# lacs: Linear-Attention Conformance Suite.
#
#   make                 liblacs (static and shared) and the self-check, in build/
#   make selfcheck       build and print the reference's self-check (the main job for now)
#   make test            install missing test dependencies (ci/deps.sh), build, run the Criterion suites,
#                        the Python suites (readers, oracle, schemas), vectors-check and a bounded fuzz
#   make test-sanitize   the C suites and vectors-check under AddressSanitizer + UBSan, in build-sanitize/
#   make vectors         regenerate the committed core vectors (vectors/core, MANIFEST.json)
#   make vectors-full    generate the full set into vectors/full and check it against MANIFEST-full.json
#   make vectors-check   regenerate the core set in build/ and compare it with the committed one
#   make fuzz            fuzz the C safetensors reader (clang libFuzzer) for FUZZ_SECONDS
#   make clean
#
# The reference (reference/*.c except error.c and validate.c) is compiled twice:
# in double (lacs_ref_*) and in long double (lacs_ref_*_ld, -DLACS_REAL_LONG_DOUBLE).

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
LIBS := -lcjson -lm
PYTHON := /usr/bin/python3
FUZZ_SECONDS ?= 30

REF_SRC := reference/driver.c reference/linalg.c reference/linear_attn.c reference/delta_rule.c \
           reference/gated_delta_rule.c reference/efla.c reference/softmax_attn.c \
           reference/preprocess.c reference/ttt.c reference/deltaformer.c reference/path_attn.c \
           reference/mesa_net.c reference/norms.c
ONCE_SRC := reference/error.c reference/validate.c checker/compare.c checker/forms.c generators/prng.c \
            checker/safetensors.c checker/ops.c generators/catalog.c generators/golden.c
TEST_SRC := $(wildcard tests/*.c)
HEADERS := $(wildcard include/lacs/*.h) reference/internal.h

REF_D_OBJ := $(patsubst %.c,$(BUILD)/obj/double/%.o,$(REF_SRC))
REF_LD_OBJ := $(patsubst %.c,$(BUILD)/obj/ld/%.o,$(REF_SRC))
ONCE_OBJ := $(patsubst %.c,$(BUILD)/obj/once/%.o,$(ONCE_SRC))
LIB_OBJ := $(REF_D_OBJ) $(REF_LD_OBJ) $(ONCE_OBJ)
TEST_OBJ := $(patsubst %.c,$(BUILD)/obj/tests/%.o,$(TEST_SRC))

.PHONY: all lib selfcheck test test-c test-python test-sanitize deps clean fuzz vectors vectors-full vectors-check

all: lib $(BUILD)/lacs-selfcheck $(BUILD)/lacs-dump $(BUILD)/lacs-generate

lib: $(BUILD)/liblacs.a $(BUILD)/liblacs.so

$(BUILD)/obj/double/%.o: %.c $(HEADERS) | deps
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_LACS) -c $< -o $@

$(BUILD)/obj/ld/%.o: %.c $(HEADERS) | deps
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_LACS) -DLACS_REAL_LONG_DOUBLE -c $< -o $@

$(BUILD)/obj/once/%.o: %.c $(HEADERS) | deps
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_LACS) -c $< -o $@

$(BUILD)/liblacs.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/liblacs.so: $(LIB_OBJ)
	$(CC) -shared $(LDFLAGS_LACS) -o $@ $^ $(LIBS)

$(BUILD)/lacs-selfcheck: checker/selfcheck.c $(BUILD)/liblacs.a $(HEADERS)
	$(CC) $(CFLAGS_LACS) -o $@ checker/selfcheck.c $(BUILD)/liblacs.a $(LDFLAGS_LACS) $(LIBS)

# The generator of the golden vectors (SPEC.md 10).
$(BUILD)/lacs-generate: generators/generate.c $(BUILD)/liblacs.a $(HEADERS)
	$(CC) $(CFLAGS_LACS) -pthread -o $@ generators/generate.c $(BUILD)/liblacs.a $(LDFLAGS_LACS) $(LIBS)

# make vectors: regenerate the committed core set in place (replacing it: that is what it is for).
vectors: $(BUILD)/lacs-generate
	./$(BUILD)/lacs-generate --set core --out vectors --force

# make vectors-full: generate the full set into vectors/full (not committed) and
# check it against the committed hashes in vectors/MANIFEST-full.json.
vectors-full: $(BUILD)/lacs-generate
	./$(BUILD)/lacs-generate --set full --out vectors --force-files

# make vectors-check: regenerate the core set in memory and compare it with the committed files.
vectors-check: $(BUILD)/lacs-generate
	./$(BUILD)/lacs-generate --set core --check vectors

# The C dump of a safetensors file, compared with the Python reader's (tests/python).
$(BUILD)/lacs-dump: tests/tools/dump.c $(BUILD)/liblacs.a $(HEADERS)
	$(CC) $(CFLAGS_LACS) -o $@ tests/tools/dump.c $(BUILD)/liblacs.a $(LDFLAGS_LACS) $(LIBS)

selfcheck: $(BUILD)/lacs-selfcheck
	./$(BUILD)/lacs-selfcheck

deps:
	@bash ci/deps.sh

# The test objects need Criterion: ci/deps.sh installs it when missing.
$(BUILD)/obj/tests/%.o: %.c $(HEADERS) tests/support.h | deps
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_LACS) -c $< -o $@

$(BUILD)/lacs-tests: $(TEST_OBJ) $(BUILD)/liblacs.a
	$(CC) -o $@ $(TEST_OBJ) $(BUILD)/liblacs.a $(LDFLAGS_LACS) -lcriterion $(LIBS)

# make test: the C suites, the Python reader/oracle/schema suites, the
# reproduction of the committed core vectors, and a bounded fuzzing run.
test: test-c test-python vectors-check fuzz

test-c: $(BUILD)/lacs-tests
	./$(BUILD)/lacs-tests

# The Python reader and its agreement with the C one (interpreter: Debian's, for NumPy).
test-python: $(BUILD)/lacs-dump $(BUILD)/lacs-generate $(BUILD)/liblacs.so | deps
	PYTHONPATH=python LACS_BUILD=$(BUILD) $(PYTHON) -m unittest discover -s tests/python -t . $(if $(V),-v,)

# libFuzzer (clang) on the C reader, seeded with the test corpus, for FUZZ_SECONDS.
FUZZ_BUILD := build-fuzz
$(FUZZ_BUILD)/fuzz-safetensors: tests/fuzz/fuzz_safetensors.c checker/safetensors.c reference/error.c $(HEADERS) | deps
	@mkdir -p $(FUZZ_BUILD)/corpus
	clang -std=c11 -g -O1 -Iinclude -D_POSIX_C_SOURCE=200809L -fsanitize=fuzzer,address,undefined \
	    -o $@ tests/fuzz/fuzz_safetensors.c checker/safetensors.c reference/error.c -lcjson -lm

fuzz: $(FUZZ_BUILD)/fuzz-safetensors
	./$(FUZZ_BUILD)/fuzz-safetensors -max_total_time=$(FUZZ_SECONDS) -timeout=5 -rss_limit_mb=2048 \
	    $(FUZZ_BUILD)/corpus tests/data/malformed tests/data/valid

# The C suites and the regeneration of the core vectors under ASan + UBSan.
test-sanitize:
	$(MAKE) SANITIZE=1 test-c vectors-check

clean:
	rm -rf build build-sanitize build-fuzz
