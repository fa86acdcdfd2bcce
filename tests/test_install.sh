#!/bin/bash
# make test-install (part of make test): `make install PREFIX=<temporary directory>` installs what a C project
# needs, and a plugin builds against it with pkg-config alone, as a kernel author outside this repository would:
#   1. the installed files: headers, liblacs.so with its soname, liblacs.a, lacs, lacs.pc, the core vectors;
#   2. tests/plugins/good_plugin.c (written from include/lacs/plugin.h alone) built with
#      `pkg-config --cflags --libs lacs`, and the installed lacs passes it on the installed vectors;
#   3. a program calling the reference (lacs_ref_sigmoid) linked with `pkg-config --libs lacs` runs;
#   4. tests/plugins/wrong_plugin.c built the same way fails the installed lacs's check (exit 1).
set -euo pipefail
BUILD=${BUILD:-build}
prefix=$(mktemp -d /tmp/lacs-install.XXXXXX)
trap 'rm -rf "$prefix"' EXIT
make -s --no-print-directory install PREFIX="$prefix" BUILD="$BUILD" >/dev/null
fail() { echo "test-install: $*" >&2; exit 1; }
for f in include/lacs/plugin.h include/lacs/lacs.h lib/liblacs.a lib/liblacs.so lib/liblacs.so.1 bin/lacs \
         lib/pkgconfig/lacs.pc share/lacs/vectors/MANIFEST.json; do
    [ -e "$prefix/$f" ] || fail "make install did not install $f"
done
soname=$(objdump -p "$prefix/lib/liblacs.so" | awk '/SONAME/ {print $2}')
[ "$soname" = liblacs.so.1 ] || fail "liblacs.so's soname is '$soname', not liblacs.so.1"
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
cflags=$(pkg-config --cflags lacs); libs=$(pkg-config --libs lacs)
echo "test-install: make install PREFIX=$prefix; pkg-config lacs $(pkg-config --modversion lacs): $cflags $libs"
work="$prefix/work"; mkdir -p "$work"
# shellcheck disable=SC2086
cc -std=c11 -Wall -Wextra -Werror -shared -fPIC $cflags -o "$work/good.so" tests/plugins/good_plugin.c $libs -lm
# shellcheck disable=SC2086
cc -std=c11 -Wall -Wextra -Werror -shared -fPIC $cflags -o "$work/wrong.so" tests/plugins/wrong_plugin.c $libs -lm
vectors="$prefix/share/lacs/vectors/core"
"$prefix/bin/lacs" check --impl "$work/good.so" --op linear_attn --vectors "$vectors" --quiet >"$work/good.log" 2>&1 \
    || { cat "$work/good.log" >&2; fail "the plugin built with pkg-config fails the installed lacs"; }
echo "test-install: good_plugin.so built with pkg-config: $(tail -n 1 "$work/good.log")"
if "$prefix/bin/lacs" check --impl "$work/wrong.so" --op linear_attn --vectors "$vectors" --quiet >"$work/wrong.log" 2>&1; then
    fail "wrong_plugin.so passed the installed lacs"
fi
echo "test-install: wrong_plugin.so rejected: $(tail -n 1 "$work/wrong.log")"
cat >"$work/call_reference.c" <<'C'
#include <stdio.h>
#include "lacs/lacs.h"
int main(void)
{
    const double x[2] = {0.0, 1.0};
    double y[2];
    lacs_ref_sigmoid(x, 2, y); /* a function of liblacs, not a macro: the link is real */
    if (y[0] != 0.5 || !(y[1] > 0.7310585 && y[1] < 0.7310586))
        return 1;
    printf("%s\n", LACS_SPEC_VERSION);
    return 0;
}
C
# shellcheck disable=SC2086
cc -std=c11 -Wall -Wextra -Werror -Wl,--no-as-needed $cflags -o "$work/call_reference" "$work/call_reference.c" $libs -lm
ldd "$work/call_reference" | grep -F "liblacs.so.1 => $prefix/lib/" >/dev/null 2>/dev/null || LD_LIBRARY_PATH="$prefix/lib" ldd "$work/call_reference" | grep -F "liblacs.so.1 => $prefix/lib/" >/dev/null || fail "the program does not load $prefix/lib/liblacs.so.1"
version=$(LD_LIBRARY_PATH="$prefix/lib" "$work/call_reference")
[ "$version" = "$(pkg-config --modversion lacs)" ] || fail "a program linked with -llacs printed '$version'"
echo "test-install: a program linked with \$(pkg-config --libs lacs) runs against liblacs.so.1 (spec $version)"
