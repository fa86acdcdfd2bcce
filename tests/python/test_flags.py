"""The flags of SPEC.md 10.5 are one list: the C catalog's (lacs-generate
--flags), the table in SPEC.md and the metadata schema's enum must agree."""
import json
import os
import re
import subprocess
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("LACS_BUILD", "build")


def flags_from_code():
    exe = os.path.join(ROOT, BUILD, "lacs-generate")
    if not os.path.exists(exe):
        raise AssertionError(f"{exe} is missing: run make")
    out = subprocess.run([exe, "--flags"], check=True, capture_output=True, text=True).stdout
    return [re.match(r"\| `([A-Za-z0-9]+)` \|", line).group(1) for line in out.splitlines()]


def flags_from_spec():
    with open(os.path.join(ROOT, "SPEC.md"), encoding="utf-8") as f:
        text = f.read()
    section = text[text.index("### 10.5"):text.index("### 10.6")]
    return re.findall(r"^\| `([A-Za-z0-9]+)` \|", section, flags=re.M)


def flags_from_schema():
    with open(os.path.join(ROOT, "vectors", "schema", "metadata.schema.json"), encoding="utf-8") as f:
        schema = json.load(f)
    found = []

    def walk(node):
        if isinstance(node, dict):
            if "enum" in node and "Basic" in node["enum"]:
                found.extend(node["enum"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)
    walk(schema)
    return found


class Flags(unittest.TestCase):
    def test_spec_table_is_the_code_list(self):
        self.assertEqual(flags_from_spec(), flags_from_code())

    def test_schema_enum_is_the_code_list(self):
        self.assertEqual(sorted(flags_from_schema()), sorted(flags_from_code()))

    def test_a_missing_flag_is_noticed(self):
        code = flags_from_code()
        self.assertNotEqual(flags_from_spec()[:-1], code)
        self.assertGreater(len(code), 20)


if __name__ == "__main__":
    unittest.main()
