"""The zoo (SPEC.md 11.6, tests/zoo/zoo.py): every legitimate implementation
passes every case of its ops and tier with worst ratio <= 0.5, every bug fails
some case with ratio >= 2. Runs build/lacs-zoo (make test-python builds it and
the plugins)."""

import math
import os
import sys
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "tests", "zoo"))
import zoo  # noqa: E402

BUILD = os.path.join(REPO, os.environ.get("LACS_BUILD", "build"))
VECTORS = os.path.join(REPO, "vectors", "core")


class Zoo(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.results = zoo.run_all(BUILD, VECTORS)

    def test_legitimate_members_pass_with_margin(self):
        for label, _, _, _ in zoo.LEGITIMATE:
            cases = zoo.ran(self.results[("legit", label)])
            with self.subTest(member=label):
                self.assertGreater(len(cases), 0, "ran no case")
                bad = [(c["id"], c["status"], c.get("message")) for c in cases if c["status"] != "PASS"]
                self.assertEqual(bad, [])
                worst = max(cases, key=zoo.ratio_of)
                self.assertLessEqual(zoo.ratio_of(worst), zoo.LEGIT_LIMIT, worst["id"])

    def test_every_op_and_tier_has_a_legitimate_member(self):
        covered = {(c["op"], c["tier"]) for k, v in self.results.items() if k[0] == "legit" for c in zoo.ran(v)}
        every = {(c["op"], c["tier"]) for v in self.results.values() for c in v}
        self.assertEqual(every - covered, set())

    def test_every_bug_is_caught(self):
        self.assertGreaterEqual(len(zoo.BUGS), 25)
        for name, _ in zoo.BUGS:
            cases = zoo.ran(self.results[("bug", name)])
            with self.subTest(bug=name):
                worst = max((zoo.ratio_of(c) for c in cases), default=0.0)
                self.assertGreaterEqual(worst, zoo.BUG_LIMIT)

    def test_known_gaps_are_still_gaps(self):
        # no committed case makes eps matter yet (issue note): when one does, move these to BUGS
        for name, _ in zoo.UNCAUGHT:
            cases = zoo.ran(self.results[("uncaught", name)])
            with self.subTest(bug=name):
                self.assertLess(max(zoo.ratio_of(c) for c in cases), 1.0)

    def test_separation_rows(self):
        rows = zoo.separation(self.results)
        self.assertGreater(len(rows), 40)
        for op, tier, legit, _, caught, touching, smallest, _ in rows:
            self.assertLessEqual(legit, zoo.LEGIT_LIMIT, (op, tier))
            self.assertTrue(caught == 0 or smallest >= zoo.BUG_LIMIT or math.isinf(smallest), (op, tier))


if __name__ == "__main__":
    unittest.main()
