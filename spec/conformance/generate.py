"""Regenerate the conformance kit (spec/conformance) with lakefmt.

Usage:
    python spec/conformance/generate.py                 # every case, into this folder
    python spec/conformance/generate.py --case r-types  # one case
    python spec/conformance/generate.py --out /tmp/kit  # elsewhere (the test compares with the committed kit)

Each case is built in a temporary warehouse through lakefmt's public API while an
independent pyarrow model tracks the rows (``_build.py``); the generator refuses to
write a case whose rows lakefmt reads differently from the model. Data comes from fixed
seeds, and so do UUIDs: lakefmt draws file names, snapshot ids and table UUIDs from
``uuid.uuid4``, which the generator seeds per case. Timestamps (``last-updated-ms``,
``timestamp-ms``) are the clock's, so regenerating changes metadata bytes and the
``as-of`` probes, never the meaning of a case. At the end every case is run through
lakefmt's adapter; a case lakefmt fails is reported and the exit status is 1.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import cases_commit  # noqa: F401 - registers cases
import cases_history  # noqa: F401
import cases_negative
import cases_reader  # noqa: F401
import cases_writer  # noqa: F401
from _build import CASES, TableBuild, seeded_uuids

from lakefmt.conformance.lakefmt_adapter import LakefmtAdapter
from lakefmt.conformance.runner import KINDS, format_results, run_case

KIT_VERSION = 1
FOLDERS = {"reader": "reader", "negative": "negative", "writer": "writer", "commit": "commit"}


def case_list() -> list[dict[str, object]]:
    """kit.json's case list: every registered case, readers first."""
    ordered = sorted(CASES.values(), key=lambda c: (KINDS.index(c.kind), c.id))
    return [{"id": c.id, "kind": c.kind, "path": f"{FOLDERS[c.kind]}/{c.id}", "title": c.title, "spec": list(c.spec)}
            for c in ordered]


def dumps(value: object, indent: str = "") -> str:
    """JSON with each value on one line if it fits in 120 characters or is a list of short scalars."""
    flat = json.dumps(value, ensure_ascii=False)
    short = isinstance(value, list) and all(not isinstance(v, (dict, list)) and len(json.dumps(v)) <= 20
                                            for v in value)
    if len(indent) + len(flat) <= 120 or short or not isinstance(value, (dict, list)) or not value:
        return flat
    inner = indent + " "
    if isinstance(value, dict):
        items = [f"{inner}{json.dumps(k, ensure_ascii=False)}: {dumps(v, inner)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + f"\n{indent}}}"
    return "[\n" + ",\n".join(inner + dumps(v, inner) for v in value) + f"\n{indent}]"


def generate_case(case_id: str, out: Path) -> Path:
    """Build one case into ``out/<kind>/<id>`` (replacing what was there)."""
    c = CASES[case_id]
    folder = out / FOLDERS[c.kind] / c.id
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    with tempfile.TemporaryDirectory(prefix="lakefmt-kit-") as tmp, seeded_uuids(c.id):
        doc = c.build(TableBuild(c.id, folder, Path(tmp)))
    head = {"id": c.id, "kind": c.kind, "title": c.title, "spec": list(c.spec)}
    (folder / "case.json").write_text(dumps({**head, **doc}) + "\n")
    return folder


def write_index(out: Path) -> None:
    index = {"kit-version": KIT_VERSION, "format-versions": [1, 2], "cases": case_list()}
    (out / "kit.json").write_text(dumps(index) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(HERE), help="the kit folder to write (default: this folder)")
    parser.add_argument("--case", action="append", help="regenerate only this case (repeatable)")
    parser.add_argument("--no-verify", action="store_true", help="skip running the kit through lakefmt's adapter")
    args = parser.parse_args(argv)
    out = Path(args.out)
    ids = args.case or [c["id"] for c in case_list()]
    unknown = [i for i in ids if i not in CASES]
    if unknown:
        parser.error(f"unknown case(s): {', '.join(unknown)}")
    if args.case is None:
        for kind in FOLDERS.values():  # drop cases that no longer exist
            shutil.rmtree(out / kind, ignore_errors=True)
    folders = [generate_case(i, out) for i in ids]
    write_index(out)
    for gap in cases_negative.GAPS:
        print(f"note: {gap}", file=sys.stderr)
    if args.no_verify:
        return 0
    results = [run_case(LakefmtAdapter(), f) for f in folders]
    print(format_results(results))
    return 0 if all(r.passed for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
