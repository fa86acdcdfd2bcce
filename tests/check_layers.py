"""No include runs upward (issue 18 item 1; GUIDE: "the folder layout shows the architecture, bottom-up").

    python3 tests/check_layers.py [ROOT]      check the tree at ROOT (default: the repository)
    python3 tests/check_layers.py --self-test  the check must fail on copies that include upward (a public header of
                                               a higher layer, a sibling's header, a private header, a header of
                                               include/lacs/ that includes upward, one that is in no layer) and
                                               pass on the unmodified copy

The layers, their folders and the layer of each public header are read from include/lacs/LAYERS (the one map).
Every #include "..." (and #include <lacs/...>) of every C, C++ and CUDA file is resolved: lacs/NAME to the public
header's layer, anything else relative to the including file (then to -Iinclude) to the top-level folder that holds
it. A file of layer L may include its own folder and the layers below L; a private header only its own folder.
Exit status 0 when every include holds, 1 with one line per breach ("FILE:LINE: includes X (layer ...)").
"""
import os
import re
import shutil
import sys
import tempfile

SOURCE_EXT = (".c", ".h", ".cu", ".cuh", ".cpp")
INCLUDE = re.compile(r'^\s*#\s*include\s*(?:"([^"]+)"|<(lacs/[^>]+)>)')


def read_layers(root):
    path = os.path.join(root, "include", "lacs", "LAYERS")
    folders, headers, top, private = {}, {}, set(), set()
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            words = line.split("#", 1)[0].split()
            if not words:
                continue
            where = f"{path}:{n}"
            if words[0] == "layer":
                if len(words) < 3 or not words[1].isdigit():
                    sys.exit(f"{where}: expected 'layer N FOLDER HEADER...'")
                level, folder = int(words[1]), words[2]
                folders[folder] = level
                for h in words[3:]:
                    if h in headers:
                        sys.exit(f"{where}: {h} is in two layers")
                    headers[h] = folder
            elif words[0] == "top":
                top.update(words[1:])
            elif words[0] == "private":
                private.update(words[1:])
            else:
                sys.exit(f"{where}: unknown line '{words[0]}'")
    return folders, headers, top, private


def source_files(root):
    for dirpath, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        if rel == ".":
            dirnames[:] = [d for d in dirnames if not d.startswith(".") and not d.startswith("build")]
        for name in filenames:
            if name.endswith(SOURCE_EXT):
                yield os.path.normpath(os.path.join(rel, name))


def check(root):
    folders, headers, top, private = read_layers(root)
    problems = []
    public = os.path.join("include", "lacs")
    for h in sorted(os.listdir(os.path.join(root, public))):
        if h.endswith(".h") and h not in headers:
            problems.append(f"{public}/{h}: in no layer of include/lacs/LAYERS")

    def layer_of_file(rel):
        """(folder, level) of a repository file; level None for the top, KeyError when unmapped."""
        parts = rel.split(os.sep)
        if parts[0] == "include" and len(parts) == 3 and parts[1] == "lacs":
            folder = headers.get(parts[2])
            if folder is None:
                raise KeyError(rel)
            return folder, folders[folder]
        if parts[0] in folders:
            return parts[0], folders[parts[0]]
        if parts[0] in top:
            return parts[0], None
        raise KeyError(rel)

    count = 0
    for rel in sorted(source_files(root)):
        try:
            folder, level = layer_of_file(rel)
        except KeyError:
            problems.append(f"{rel}: its folder is in no layer of include/lacs/LAYERS")
            continue
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
            lines = f.readlines()
        for n, line in enumerate(lines, 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            count += 1
            name = m.group(1) or m.group(2)
            if name.startswith("lacs/"):
                target = os.path.join("include", name)
            else:
                target = os.path.normpath(os.path.join(os.path.dirname(rel), name))
                if not os.path.exists(os.path.join(root, target)):
                    target = os.path.normpath(os.path.join("include", name))
            if not os.path.exists(os.path.join(root, target)) and os.path.basename(target) not in headers:
                if level is not None:
                    problems.append(f"{rel}:{n}: includes {name}, found nowhere in the repository")
                continue  # the top builds against third-party headers (examples/ggml)
            if target.startswith(".."):
                problems.append(f"{rel}:{n}: includes {name}, outside the repository")
                continue
            if target in private and target.split(os.sep)[0] != folder:
                problems.append(f"{rel}:{n}: includes {name}, private to {target.split(os.sep)[0]}/")
                continue
            if level is None:
                continue
            try:
                tfolder, tlevel = layer_of_file(target)
            except KeyError:
                problems.append(f"{rel}:{n}: includes {name}, which is in no layer of include/lacs/LAYERS")
                continue
            if tlevel is None:
                problems.append(f"{rel}:{n}: includes {name} from {tfolder}/, above every layer")
            elif tfolder != folder and tlevel >= level:
                how = "a sibling" if tlevel == level else "a higher layer"
                problems.append(f"{rel}:{n}: includes {name} ({tfolder}, layer {tlevel}), {how} of {folder} "
                                f"(layer {level})")
    return count, problems


def self_test(here):
    files = list(source_files(here)) + [os.path.join("include", "lacs", "LAYERS")]

    def copy(tmp):
        dst = os.path.join(tmp, "copy")
        shutil.rmtree(dst, ignore_errors=True)
        for f in files:
            os.makedirs(os.path.join(dst, os.path.dirname(f)), exist_ok=True)
            shutil.copy(os.path.join(here, f), os.path.join(dst, f))
        return dst

    def add_line(path, line):
        with open(path, encoding="utf-8") as f:
            text = f.read()
        with open(path, "w", encoding="utf-8") as f:
            f.write(line + "\n" + text)

    mutations = [
        ("a core file including a tolerance header", "core/values.c", '#include "lacs/check.h"'),
        ("a tolerance file including the reference's private header", "tolerance/check.c",
         '#include "../reference/internal.h"'),
        ("a generator including builtin:cpu's header (a sibling)", "generators/golden.c",
         '#include "../optimized/cpu/cpu.h"'),
        ("a core public header including the op table's", "include/lacs/prng.h", '#include "lacs/ops.h"'),
        ("the reference including the checker's", "reference/ops.c", '#include "../checker/cli.h"'),
        ("a public header in no layer", "include/lacs/unmapped.h", "/* a header nobody placed */"),
    ]
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for what, path, line in mutations:
            dst = copy(tmp)
            target = os.path.join(dst, path)
            if os.path.exists(target):
                add_line(target, line)
            else:
                with open(target, "w", encoding="utf-8") as f:
                    f.write(line + "\n")
            _, problems = check(dst)
            if problems:
                print(f"check_layers self-test: rejected {what}: {problems[0]}")
            else:
                print(f"check_layers self-test: the check passed {what}")
                failed = 1
        _, problems = check(copy(tmp))
        if problems:
            print("check_layers self-test: the unmodified copy fails:\n  " + "\n  ".join(problems))
            failed = 1
    if not failed:
        print("check_layers self-test: ok")
    return failed


def main():
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if sys.argv[1:] == ["--self-test"]:
        return self_test(here)
    root = sys.argv[1] if len(sys.argv) > 1 else here
    count, problems = check(root)
    for p in problems:
        print(f"FAIL: {p}")
    if not problems:
        print(f"check_layers: {count} includes, none upward (layers: include/lacs/LAYERS)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
