"""Every requirement ID of spec/ is cited by a test that checks it (scripts/spec_id_coverage.py).

The first test is the CI gate: it fails while tests cite less than 95% of the live IDs.
The others pin how the script reads IDs from Markdown and citations from Python.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "spec_id_coverage.py"


def load_script():
    spec = importlib.util.spec_from_file_location("spec_id_coverage", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("spec_id_coverage", module)
    spec.loader.exec_module(module)
    return module


cov_script = load_script()


def test_tests_cite_at_least_95_percent_of_requirement_ids():
    cov = cov_script.coverage(ROOT / "spec", ROOT / "tests")
    assert len(cov.defined) > 200, "the spec's requirement IDs were not found"
    assert cov.ratio >= cov_script.DEFAULT_MIN, cov_script.report(cov)


SPEC_MD = """\
# Alpha

- **ALPHA-1** A bullet rule.
- **ALPHA-2** *Withdrawn.*
**ALPHA-3** A paragraph rule that mentions **ALPHA-9** in bold mid-line, which defines nothing.
1. **ALPHA-4** A numbered step.
> - **ALPHA-5** Inside a quote.
  - **ALPHA-12** Indented.

```
- **ALPHA-6** inside a code block is an example, not a rule
```
- **ALPHA-7** Withdrawn
- **ALPHA-8** Withdrawn rules keep their ID; this one is live (its text is not just "Withdrawn").
"""

OTHER_MD = "- **BETA-1** Another area.\n- **ALPHA-1** repeated in a second file counts once.\n"

TEST_PY = '''\
"""Checks ALPHA-1 and ALPHA-12."""
import re

ALPHA = 3
x = ALPHA-4            # code, not a citation: only strings and comments are read
y = "ALPHA-3x"         # glued to a letter: no citation
z = "ALPHA-10"         # a different ID, not ALPHA-1
w = "BETA-1"           # the only BETA rule is cited
# comment citing ALPHA-2 (withdrawn: not counted) and ALPHA-8.
'''


@pytest.fixture
def fixture_tree(tmp_path: Path) -> tuple[Path, Path]:
    spec, tests = tmp_path / "spec", tmp_path / "tests"
    (tests / "sub").mkdir(parents=True)
    spec.mkdir()
    (spec / "alpha.md").write_text(SPEC_MD)
    (spec / "beta.md").write_text(OTHER_MD)
    (spec / "notes.txt").write_text("- **GAMMA-1** not Markdown\n")
    (tests / "sub" / "test_alpha.py").write_text(TEST_PY)
    (tests / "helpers.py").write_text('"""ALPHA-4 cited outside a test file does not count."""\n')
    return spec, tests


def test_definitions_are_bold_ids_at_paragraph_starts():
    live, withdrawn = cov_script.defined_ids(SPEC_MD)
    assert live == ["ALPHA-1", "ALPHA-3", "ALPHA-4", "ALPHA-5", "ALPHA-12", "ALPHA-8"]
    assert withdrawn == ["ALPHA-2", "ALPHA-7"]


def test_citations_are_whole_words_in_strings_and_comments():
    assert cov_script.cited_ids(TEST_PY) == {"ALPHA-1", "ALPHA-12", "ALPHA-10", "BETA-1", "ALPHA-2", "ALPHA-8"}
    # A file that does not tokenize is read as plain text.
    assert cov_script.cited_ids('"""ALPHA-1\n') == {"ALPHA-1"}


def test_coverage_of_a_fixture_tree(fixture_tree):
    spec, tests = fixture_tree
    cov = cov_script.coverage(spec, tests)
    assert cov.defined == ("ALPHA-1", "ALPHA-3", "ALPHA-4", "ALPHA-5", "ALPHA-12", "ALPHA-8", "BETA-1")
    assert cov.withdrawn == ("ALPHA-2", "ALPHA-7")
    assert cov.cited == {"ALPHA-1", "ALPHA-12", "ALPHA-8", "BETA-1"}
    assert cov.uncited == ("ALPHA-3", "ALPHA-4", "ALPHA-5")
    assert cov.ratio == pytest.approx(4 / 7)
    assert cov.by_area() == {"ALPHA": (3, 6), "BETA": (1, 1)}


def test_main_prints_uncited_ids_and_exits_1_below_the_minimum(fixture_tree, capsys):
    spec, tests = fixture_tree
    args = ["--spec", str(spec), "--tests", str(tests)]
    assert cov_script.main(args) == 1  # 57% < the default 95%
    out, err = capsys.readouterr()
    assert "4 of 7 (57.1%)" in out and "uncited (3): ALPHA-3 ALPHA-4 ALPHA-5" in out
    assert "below the minimum 95.0%" in err
    assert cov_script.main([*args, "--min", "0.57"]) == 0
    assert cov_script.main([*args, "--min", "0.58"]) == 1
    with pytest.raises(SystemExit):
        cov_script.main([*args, "--min", "95"])  # a percentage, not a fraction: refused


def test_a_spec_folder_without_ids_fails(tmp_path, capsys):
    (tmp_path / "spec").mkdir()
    (tmp_path / "tests").mkdir()
    assert cov_script.main(["--spec", str(tmp_path / "spec"), "--tests", str(tmp_path / "tests"), "--min", "0"]) == 1
    assert "no requirement IDs found" in capsys.readouterr().err
