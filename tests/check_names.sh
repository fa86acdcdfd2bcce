#!/usr/bin/env bash
# Names that grep finds (issue 18 item 2; GUIDE: "Names say what a thing is, written literally so grep finds them").
#
#   bash tests/check_names.sh [ROOT]    check the tree at ROOT (default: the repository)
#   bash tests/check_names.sh --self-test   the check must fail on a copy with a name built by a macro, a
#                                           definition removed, and a long-double twin without its rename
#
# Passes when
#   1. every lacs_ref_* function declared in include/lacs/*.h (comments stripped) has a literal definition in
#      reference/*.c: a line at column 0 that names it followed by "(" and is not a prototype;
#   2. every lacs_ref_*_ld declared there is the long-double build of such a definition, by a line
#      "#define lacs_ref_NAME lacs_ref_NAME_ld" in reference/rename_ld.h (the Makefile compiles the second build
#      with -include reference/rename_ld.h), and that header renames nothing else public;
#   3. no macro in reference/ or include/lacs/ pastes tokens (##), the way REF(name) built lacs_ref_##name.
set -u

if [ "${1:-}" = "--self-test" ]; then
    here=$(cd "$(dirname "$0")/.." && pwd)
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    fails=0
    mutate() { # name, then a command run in the copy; the check must then fail
        rm -rf "$tmp/copy" && mkdir -p "$tmp/copy" && cp -r "$here/reference" "$here/include" "$tmp/copy/"
        (cd "$tmp/copy" && eval "$2")
        if bash "$0" "$tmp/copy" >"$tmp/out" 2>&1; then
            echo "check_names self-test: the check passed a tree with $1"; fails=1
        else
            echo "check_names self-test: rejected $1: $(grep -m1 FAIL "$tmp/out")"
        fi
    }
    mutate "a name built by a macro" \
        "printf '#define REF(name) lacs_ref_##name\n' >> reference/internal.h"
    mutate "a definition written through a macro" \
        "sed -i 's/^int lacs_ref_delta_rule(/int REF(delta_rule)(/' reference/delta_rule.c"
    mutate "a long-double twin without its rename" \
        "sed -i '/^#define lacs_ref_delta_rule lacs_ref_delta_rule_ld\$/d' reference/rename_ld.h"
    mutate "a declared function never defined" \
        "sed -i 's/^int lacs_ref_delta_rule(const/int lacs_ref_delta_rule_missing(const lacs_dims *d);\nint lacs_ref_delta_rule(const/' include/lacs/reference.h"
    # and the unmodified copy passes
    rm -rf "$tmp/copy" && mkdir -p "$tmp/copy" && cp -r "$here/reference" "$here/include" "$tmp/copy/"
    if ! bash "$0" "$tmp/copy" >"$tmp/out" 2>&1; then
        echo "check_names self-test: the unmodified copy fails:"; cat "$tmp/out"; fails=1
    fi
    [ $fails = 0 ] && echo "check_names self-test: ok"
    exit $fails
fi

root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$root" || exit 2
CC=${CC:-cc}
status=0
fail() { echo "FAIL: $*"; status=1; }

# The declared names: function declarators (a name then "("), comments removed by the preprocessor.
declared=$(for h in include/lacs/*.h; do
               "$CC" -fpreprocessed -dD -E -P "$h" 2>/dev/null
           done | grep -oE '\blacs_ref_[a-z0-9_]+[[:space:]]*\(' | grep -oE 'lacs_ref_[a-z0-9_]+' | sort -u)
[ -n "$declared" ] || fail "no lacs_ref_* function found in include/lacs/*.h"

defined_literally() { # a definition at column 0 in reference/*.c (not a prototype ending in ';')
    grep -nE "^[A-Za-z_].*\\b$1\\(" reference/*.c | grep -vE ';[[:space:]]*$' | grep -q .
}

n=0
for name in $declared; do
    n=$((n + 1))
    case $name in
    *_ld)
        base=${name%_ld}
        grep -qE "^#define $base $name\$" reference/rename_ld.h ||
            fail "$name (include/lacs/) has no line '#define $base $name' in reference/rename_ld.h"
        defined_literally "$base" || fail "$name: its double name $base has no literal definition in reference/*.c"
        ;;
    *)
        defined_literally "$name" ||
            fail "$name (declared in $(grep -lw "$name" include/lacs/*.h | tr '\n' ' ')) has no literal definition in reference/*.c"
        ;;
    esac
done

# rename_ld.h renames only what the long-double header declares.
for name in $(grep -oE '^#define lacs_ref_[a-z0-9_]+ lacs_ref_[a-z0-9_]+_ld$' reference/rename_ld.h | awk '{print $3}'); do
    echo "$declared" | grep -qx "$name" || fail "reference/rename_ld.h renames to $name, which include/lacs/ does not declare"
done

pasted=$(grep -rnE '##' reference include/lacs)
[ -z "$pasted" ] || fail "a macro builds names by token pasting (##):"$'\n'"$pasted"

if [ $status = 0 ]; then
    echo "check_names: $n lacs_ref_* functions declared in include/lacs/, each defined literally in reference/; no ## macro"
fi
exit $status
