# lacs: Linear-Attention Conformance Suite.
#
#   make                 liblacs (static and shared) and the self-check, in build/
#   make selfcheck       build and print the reference's self-check (the main job for now)
#   make test            install missing test dependencies (ci/deps.sh), build, run the Criterion suites
#   make test-sanitize   the same suites under AddressSanitizer + UndefinedBehaviorSanitizer, in build-sanitize/
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

CFLAGS_LACS := -std=c11 -Wall -Wextra -Werror $(OPT) -fPIC -Iinclude -D_POSIX_C_SOURCE=200809L
LDFLAGS_LACS := $(filter -fsanitize%,$(OPT))
LIBS := -lm

REF_SRC := reference/driver.c reference/linalg.c reference/linear_attn.c reference/delta_rule.c \
           reference/gated_delta_rule.c reference/efla.c reference/softmax_attn.c \
           reference/preprocess.c reference/ttt.c reference/deltaformer.c reference/path_attn.c \
           reference/mesa_net.c reference/norms.c
ONCE_SRC := reference/error.c reference/validate.c checker/compare.c checker/forms.c generators/prng.c
TEST_SRC := $(wildcard tests/*.c)
HEADERS := $(wildcard include/lacs/*.h) reference/internal.h

REF_D_OBJ := $(patsubst %.c,$(BUILD)/obj/double/%.o,$(REF_SRC))
REF_LD_OBJ := $(patsubst %.c,$(BUILD)/obj/ld/%.o,$(REF_SRC))
ONCE_OBJ := $(patsubst %.c,$(BUILD)/obj/once/%.o,$(ONCE_SRC))
LIB_OBJ := $(REF_D_OBJ) $(REF_LD_OBJ) $(ONCE_OBJ)
TEST_OBJ := $(patsubst %.c,$(BUILD)/obj/tests/%.o,$(TEST_SRC))

.PHONY: all lib selfcheck test test-sanitize deps clean

all: lib $(BUILD)/lacs-selfcheck

lib: $(BUILD)/liblacs.a $(BUILD)/liblacs.so

$(BUILD)/obj/double/%.o: %.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_LACS) -c $< -o $@

$(BUILD)/obj/ld/%.o: %.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_LACS) -DLACS_REAL_LONG_DOUBLE -c $< -o $@

$(BUILD)/obj/once/%.o: %.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_LACS) -c $< -o $@

$(BUILD)/liblacs.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/liblacs.so: $(LIB_OBJ)
	$(CC) -shared $(LDFLAGS_LACS) -o $@ $^ $(LIBS)

$(BUILD)/lacs-selfcheck: checker/selfcheck.c $(BUILD)/liblacs.a $(HEADERS)
	$(CC) $(CFLAGS_LACS) -o $@ checker/selfcheck.c $(BUILD)/liblacs.a $(LDFLAGS_LACS) $(LIBS)

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

test: $(BUILD)/lacs-tests
	./$(BUILD)/lacs-tests

test-sanitize:
	$(MAKE) SANITIZE=1 test

clean:
	rm -rf build build-sanitize
