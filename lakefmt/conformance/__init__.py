"""The conformance kit's runner: check an implementation of the lakefmt format against spec/conformance.

An implementation exposes a small adapter (:mod:`lakefmt.conformance.adapter`); the runner
plays the kit's reader, negative, writer and commit cases through it and reports each case
with the spec IDs it exercises. lakefmt's own adapter is
:class:`lakefmt.conformance.lakefmt_adapter.LakefmtAdapter`. The core never imports this package.

Example:
    $ lakefmt conformance --adapter my_impl.conformance:Adapter --only reader
    >>> from lakefmt.conformance import load_adapter, run_kit, format_results
    >>> print(format_results(run_kit(load_adapter("my_impl.conformance:Adapter"), only=["reader"])))
"""

from __future__ import annotations

from lakefmt.conformance.adapter import Adapter, Filter, Outcome, Step, TableRef
from lakefmt.conformance.results import CaseResult, Check
from lakefmt.conformance.runner import (
           DEFAULT_ADAPTER,
           KINDS,
           default_kit,
           format_results,
           load_adapter,
           run_kit,
)

__all__ = ["DEFAULT_ADAPTER", "KINDS", "Adapter", "CaseResult", "Check", "Filter", "Outcome", "Step", "TableRef",
           "default_kit", "format_results", "load_adapter", "run_kit"]
