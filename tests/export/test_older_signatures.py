"""The older signatures (`serving_default`, `translate_with_options`,
`translate_with_attention`, `complete_with_options`,
`complete_by_sampling`) answer every case as they did before they became
wrappers over the search path of CTranslate2's signatures: the same texts,
the same errors, plain and under XLA. The answers were written by
fixtures/older_signatures/make_answers.py with the code they replaced;
the cases are in tests/older_signatures_cases.py."""

import json
from pathlib import Path

import numpy as np
import pytest
from older_signatures_cases import CASES, answer, build_models, load_weights, servers

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "older_signatures"
ANSWERS = {
    saved["case"]: saved["answer"]
    for saved in json.loads((FIXTURES / "answers.json").read_text("utf-8"))
}


@pytest.fixture(scope="module")
def made():
    return servers(load_weights(build_models(), FIXTURES / "weights.npz"))


def test_every_case_has_its_answer():
    assert sorted(ANSWERS) == sorted(CASES)


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_answer_is_the_one_before(made, case):
    expected, got = ANSWERS[case], answer(made, CASES[case])
    assert sorted(got) == sorted(expected)
    for name, value in expected.items():
        if name == "attention":
            np.testing.assert_allclose(got[name], value, atol=1e-4)
        else:
            assert got[name] == value, name
