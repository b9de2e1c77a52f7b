"""docs/tutorial.md runs as written: every bash and python block in order, and prints what the page shows.

The ``bash`` blocks run through ``bash`` with ``lakefmt`` (and ``python``) on ``PATH`` bound to this
environment's interpreter and this checkout; the ``python`` blocks run with ``exec`` in one namespace.
A ``text`` block right after a code block is that block's output: each line must match the real
output, in order, with random names, ids, times and sizes masked; ``...`` stands for omitted lines
or, inside a line, for an omitted part. Key facts of the prose are asserted on top, and every link
to a spec requirement must land on the section that defines it.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
TUTORIAL = REPO / "docs" / "tutorial.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)


@dataclass
class Block:
    lang: str
    code: str
    line: int  # line of the opening fence in the tutorial
    shown: str | None = None  # the text block that follows, if any: the output the page shows


@dataclass
class Run:
    block: Block
    output: str


def parse(text: str) -> list[Block]:
    """The bash and python blocks, each with the text block that directly follows it (if any)."""
    fences = [(m, m.group(1), m.group(2)) for m in FENCE.finditer(text)]
    blocks: list[Block] = []
    for i, (m, lang, code) in enumerate(fences):
        assert lang in ("bash", "python", "text"), f"line {text.count(chr(10), 0, m.start()) + 1}: use bash, " \
                                                   f"python or text, not {lang!r}"
        if lang == "text":
            continue
        block = Block(lang, code, text.count("\n", 0, m.start()) + 1)
        if i + 1 < len(fences):
            following, next_lang, next_code = fences[i + 1]
            if next_lang == "text" and not text[m.end():following.start()].strip():
                block.shown = next_code
        blocks.append(block)
    return blocks


def shims(bin_dir: Path) -> None:
    """``lakefmt`` and ``python`` commands of this environment and this checkout."""
    bin_dir.mkdir()
    for name, argv in (("lakefmt", f'"{sys.executable}" -m lakefmt.cli'), ("python", f'"{sys.executable}"')):
        path = bin_dir / name
        path.write_text(f'#!/bin/sh\nexec {argv} "$@"\n')
        path.chmod(0o755)


def run_tutorial(work: Path) -> tuple[list[Run], dict[str, Any]]:
    blocks = parse(TUTORIAL.read_text())
    shims(work / ".bin")
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKEFMT_")}
    env["PATH"] = str(work / ".bin") + os.pathsep + env.get("PATH", "")
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env["PYTHONUNBUFFERED"] = "1"
    namespace: dict[str, Any] = {"__name__": "tutorial"}
    runs: list[Run] = []
    cwd = Path.cwd()
    os.chdir(work)  # the python blocks use relative paths, like the bash blocks
    try:
        for block in blocks:
            if block.lang == "bash":
                # Both streams, in the order a terminal shows them (summaries of some commands go to stderr).
                proc = subprocess.run(["bash", "-eo", "pipefail", "-c", block.code], cwd=work, env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300,
                                      check=False)
                assert proc.returncode == 0, f"docs/tutorial.md:{block.line} failed:\n{block.code}\n{proc.stdout}"
                assert "Traceback" not in proc.stdout, proc.stdout
                runs.append(Run(block, proc.stdout))
            else:
                out = io.StringIO()
                with contextlib.redirect_stdout(out):
                    exec(compile(block.code, f"{TUTORIAL}:{block.line}", "exec"), namespace)  # noqa: S102
                runs.append(Run(block, out.getvalue()))
    finally:
        os.chdir(cwd)
        if "t" in namespace:
            namespace["t"].release_write_token()
    return runs, namespace


@pytest.fixture(scope="module")
def tutorial(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Run], dict[str, Any]]:
    return run_tutorial(tmp_path_factory.mktemp("tutorial"))


def output_of(runs: list[Run], code: str, nth: int = 0) -> str:
    """The output of the ``nth`` bash block that is exactly ``code``, or python block that contains it."""
    found = [r.output for r in runs
             if (r.block.lang == "bash" and r.block.code.strip() == code)
             or (r.block.lang == "python" and code in r.block.code)]
    assert len(found) > nth, f"no block {nth} is {code!r}"
    return found[nth]


# -- the shown output is the real output ------------------------------------------------------------

VOLATILE = [
    (re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"), "<uuid>"),
    (re.compile(r"/\S*/warehouse/"), "<dir>/warehouse/"),                     # where the run happened
    (re.compile(r"[0-9a-f]{12,}"), "<hex>"),                                  # unique parts of names, ids
    (re.compile(r"\b\d{9,}\b"), "<id>"),                                      # snapshot ids, epoch ms
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+\+00:00|Z)"), "<time>"),  # commit times, not data
    (re.compile(r"\b\d+(\.\d+)? (B|KiB|MiB|GiB)\b"), "<size>"),
    (re.compile(r"\(\d+ bytes\)"), "(<n> bytes)"),
    (re.compile(r"\b\d+ bytes\b"), "<n> bytes"),
    (re.compile(r"size=\d+"), "size=<n>"),
    (re.compile(r"\b\d+(\.\d+)? (s|ms)\b"), "<duration>"),
    (re.compile(r"\s+"), " "),
]


def normalize(line: str) -> str:
    for pattern, replacement in VOLATILE:
        line = pattern.sub(replacement, line)
    return line.strip()


def line_pattern(shown: str) -> str:
    """A regex for one normalized output line; ``...`` inside the line stands for any text."""
    return ".*".join(re.escape(part) for part in normalize(shown).split("..."))


def matches(shown: str, actual: str) -> bool:
    return re.fullmatch(line_pattern(shown), normalize(actual)) is not None


def block_pattern(shown: list[str], *, rest: bool = False) -> str:
    """A regex for the whole normalized output: each shown line in a group, ``...`` lines any lines between."""
    parts = [r"(?:.*\n)*?" if line.strip() == "..." else f"({line_pattern(line)})\n" for line in shown]
    return "".join(parts) + (r"[\s\S]*" if rest else "")


def shown_lines(shown: str, output: str) -> re.Match[str] | None:
    """The match of ``shown`` against the whole of ``output`` (normalized); its groups are the shown lines."""
    actual = "".join(normalize(line) + "\n" for line in output.splitlines())
    return re.fullmatch(block_pattern(shown.splitlines()), actual)


def mismatch(shown: str, output: str) -> str | None:
    """Why ``shown`` is not ``output`` with elisions marked by ``...``; None when it is."""
    if shown_lines(shown, output):
        return None
    lines = shown.splitlines()
    actual = "".join(normalize(line) + "\n" for line in output.splitlines())
    good = max(k for k in range(len(lines) + 1) if re.match(block_pattern(lines[:k], rest=True), actual))
    if good == len(lines):
        return "the output goes on after the last line shown: show it or end the shown output with '...'"
    return f"no output line matches {lines[good]!r} at its place (after {good} matching lines)"


def test_every_block_runs_and_prints_what_the_page_shows(tutorial):
    runs, _ = tutorial
    assert len(runs) >= 20
    shown = [r for r in runs if r.block.shown is not None]
    assert len(shown) >= 15
    for run in shown:
        problem = mismatch(run.block.shown or "", run.output)
        assert problem is None, f"docs/tutorial.md:{run.block.line}\n{run.block.code}\n{problem}\n\n" \
                                f"real output:\n{run.output}"


def test_normalize_masks_only_what_changes_between_runs():
    assert matches("snapshot  1234567890123456789 (sequence 10, append, ...)",
                   "snapshot  2822050344295151983 (sequence 10, append, 2026-11-24T05:11:08.232+00:00, parent 1)")
    assert not matches("table files: 10 -> 1 ...", "  table files: 10 -> 2   bytes: 11.1 KiB -> 1.9 KiB")
    assert matches("ts 1 10 0 2026-03-01T12:00:00+00:00 ...", "ts  1  10  0  2026-03-01T12:00:00+00:00  x")
    assert not matches("2026-03-01T12:00:00+00:00", "2026-03-01T12:10:00+00:00")  # data times are kept
    assert mismatch("a\n...\nc", "a\nb\nc") is None
    assert mismatch("a\nc", "a\nb\nc") is not None  # an omission needs its '...'
    assert mismatch("a", "a\nb") is not None


# -- the facts the prose states ---------------------------------------------------------------------

INSPECT = "lakefmt inspect sensors.readings"
COMPACT = "lakefmt compact sensors.readings --min-age-seconds 0 --no-progress"


def stored_bytes(stats: str, kind: str) -> float:
    """The bytes of one line of ``lakefmt stats``, e.g. ``metadata  31 files  146.6 KiB``."""
    number, unit = re.search(rf"^  {kind} +\d+ files +([\d.]+) (B|KiB|MiB)$", stats, re.MULTILINE).groups()
    return float(number) * {"B": 1, "KiB": 1024, "MiB": 1024 ** 2}[unit]


def test_appends_make_small_files_and_compaction_makes_one(tutorial):
    runs, ns = tutorial
    files_after_appends = output_of(runs, "show_files()", 0)
    assert " 10 data files, appended" in files_after_appends and " 10 manifests" in files_after_appends
    assert " 11 metadata files" in files_after_appends  # version 1 + one per append
    inspect = output_of(runs, INSPECT, 1)
    assert inspect.count("+-- ADDED  data/ts_day=2026-03-01/part-") == 10
    assert "total     10 live data files, 100 rows" in inspect
    stats = output_of(runs, "lakefmt stats sensors.readings", 0)
    assert re.search(r"live +10 files", stats) and re.search(r"small.*\n.*\nts_day=2026-03-01 +10 ", stats)
    assert stored_bytes(stats, "metadata") > 10 * stored_bytes(stats, "live")  # "many times the data"
    assert output_of(runs, "reading_id = 95") == "1 of 10 data files to read\n"
    assert 0.3 < ns["footer"] / ns["one"].file_size_bytes < 0.7  # "about half the bytes are the footer"
    assert "data files read: 10, rows: 100" in output_of(runs, "measure(t)", 0)
    assert "skipped: too-young" in output_of(runs, "lakefmt compact sensors.readings --dry-run --no-progress")
    compact = output_of(runs, COMPACT, 0)
    assert "table files: 10 -> 1" in compact
    after = output_of(runs, INSPECT + " --no-stats", 0)
    assert after.count("+-- DELETED  data/") == 10 and after.count("+-- ADDED  data/ts_day=2026-03-01/compact-") == 1
    assert "total     1 live data files, 100 rows" in after
    kept = output_of(runs, "measure(t)", 1)
    assert " 10 data files, appended" in kept and "  1 data files, compacted" in kept  # kept until expiry
    assert "data files read: 1, rows: 100" in kept


def test_the_delete_writes_a_deletion_vector_and_compaction_applies_it(tutorial):
    runs, _ = tutorial
    assert "deleted 50 rows" in output_of(runs, "lakefmt delete sensors.readings --filter \"sensor = 'temp'\"")
    inspect = output_of(runs, INSPECT, 2)
    assert "(format version 2)" in inspect
    assert re.search(r"EXISTING  data/ts_day=2026-03-01/compact-.*\n.*100 rows", inspect)
    assert re.search(r"deletion vector  50 deleted, 50 live rows  data/deletes/dv-\S+\.bin", inspect)
    assert "total-records=50" in inspect and "total-delete-vectors=1" in inspect
    assert "(1 manifest)" in inspect  # the manifests of DELETED entries were not carried over
    after_delete = output_of(runs, "print(rows.num_rows")
    assert after_delete.startswith("50 ['imu']\n") and "  1 deletion-vector files" in after_delete
    assert "  1 data files, compacted" in after_delete  # no data file was written
    compact = output_of(runs, COMPACT, 1)
    assert "50 deleted rows dropped" in compact
    after = output_of(runs, INSPECT + " --no-stats", 1)
    assert "total     1 live data files, 50 rows" in after and "total-delete-vectors=0" in after
    assert after.count("deletion vector  ") == 1  # on the DELETED entry only, which readers ignore


def test_time_travel_works_until_expiry(tutorial):
    runs, ns = tutorial
    history = output_of(runs, "t.refresh().snapshots()")
    assert "after the appends: 100 rows" in history and "now: 50 rows" in history
    assert len([line for line in history.splitlines() if "files=" in line]) == 13
    expire = output_of(runs, "lakefmt expire sensors.readings --older-than 0")
    assert expire.startswith("expired 12 snapshot(s)")
    after = output_of(runs, "except lakefmt.NoSuchSnapshotError")
    assert "  0 data files, appended" in after and "  0 deletion-vector files" in after
    assert "  1 data files, compacted" in after
    assert "NoSuchSnapshotError: table sensors.readings has no snapshot" in after
    assert len(ns["t"].snapshots()) == 1


def test_orphan_removal_waits_for_the_writer_lease(tutorial):
    runs, _ = tutorial
    assert "0 orphan(s) found" in output_of(runs, "lakefmt orphans sensors.readings --older-than 0")
    assert "1 in flight" in output_of(runs, "lakefmt orphans sensors.readings --older-than 0")
    deleted = output_of(runs, "lakefmt orphans sensors.readings --older-than 0 --delete")
    assert re.fullmatch(r"data/ts_day=2026-03-01/part-\S+\.parquet\n1 orphan\(s\) deleted, .*\n", deleted)
    end = [r.output for r in runs if "show_files()" in r.block.code][-1]
    assert "  0 data files, appended" in end and "  1 data files, compacted" in end and end.endswith("50 rows\n")
    assert ": OK" in output_of(runs, "lakefmt check sensors.readings")


# -- the spec links ---------------------------------------------------------------------------------

LINK = re.compile(r"\[([^\]]+)\]\((\.\./spec/[\w.-]+\.md)(?:#([\w-]+))?\)")
REQUIREMENT = re.compile(r"\b[A-Z]+-\d+\b")


def sections(path: Path) -> dict[str, str]:
    """Each heading's anchor (as GitHub makes it) -> the text of its section."""
    out: dict[str, str] = {}
    anchor, fenced = "", False
    for line in path.read_text().splitlines():
        fenced ^= line.lstrip().startswith("```")
        heading = None if fenced else re.match(r"#+ (.*)", line)
        if heading:
            anchor = re.sub(r"[^\w\- ]", "", heading.group(1).strip().lower()).replace(" ", "-")
            out[anchor] = ""
        elif anchor:
            out[anchor] += line + "\n"
    return out


def test_spec_links_land_on_the_section_that_defines_each_requirement():
    text = TUTORIAL.read_text()
    links = LINK.findall(text)
    cited = set()
    for label, target, anchor in links:
        path = (TUTORIAL.parent / target).resolve()
        assert path.is_file(), target
        if not anchor:
            continue
        parts = sections(path)
        assert anchor in parts, f"{target}#{anchor}: no such heading"
        for requirement in REQUIREMENT.findall(label):
            cited.add(requirement)
            assert f"**{requirement}**" in parts[anchor], f"{requirement} is not defined in {target}#{anchor}"
    assert len(cited) >= 30


def test_every_step_links_the_spec():
    steps = re.split(r"^## ", TUTORIAL.read_text(), flags=re.MULTILINE)[1:]
    assert len(steps) >= 10
    for step in steps:
        title = step.splitlines()[0]
        if title in ("1. Some data", "10. The end state"):
            continue
        assert LINK.search(step), f"step {title!r} links no spec section"
