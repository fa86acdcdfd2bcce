"""The kernel repository's own tests, with lacs's golden cases:

    pytest                                   # these tests (lacs installed: pip install ./python)
    pytest --lacs-impl python:my_kernels.py:run_correct --lacs-op delta_rule   # and every case through the plugin
"""

import lacs
import lacs.pytest

import my_kernels


@lacs.pytest.cases(op="delta_rule", tier="fp32")
def test_correct_delta_rule(case):
    lacs.assert_conforms(case, my_kernels.run_correct(case.op, case.inputs, case.params))


@lacs.pytest.cases(op="delta_rule", tier="fp32")
def test_wrong_delta_rule(case):
    lacs.assert_conforms(case, my_kernels.run_wrong(case.op, case.inputs, case.params))
