"""Random scenarios for the commit model, played with the invariants checked after every step.

A **scenario** is: the batches appended before the actors start, each actor's
operations, and a **schedule**, the names of the actors in the order they take their
steps (an actor that has finished skips its turns). Once the schedule is played, each
actor still under way finishes, one after the other.

    python spec/model/explore.py 7            # the trace of scenario 7
    python spec/model/explore.py 7 unlocked   # the same, rebuilding outside the catalog lock
"""

from __future__ import annotations

import random
import sys

from commit_model import RETRIES, Append, Compact, Delete, Expire, Model, Op, Overwrite, Read, Row
from invariants import violations

Scenario = tuple[list[tuple[Row, ...]], dict[str, list[Op]], list[str]]


def random_scenario(rng: random.Random, actors: int = 3, ops: int = 2, x_max: int = 11) -> Scenario:
    """Setup batches, the operations of actors A, B (, C), and a schedule long enough for them all."""
    uid = iter(range(1, 10**6))

    def batch(lo: int = 0, hi: int = x_max, n: int = 3) -> tuple[Row, ...]:
        return tuple((rng.randint(lo, hi), next(uid)) for _ in range(rng.randint(1, n)))

    def operation() -> Op:
        lo = rng.randint(0, x_max)
        hi = min(x_max, lo + rng.randint(0, 4))
        kind = rng.choice(["append", "append", "delete", "delete", "overwrite", "compact", "expire", "read"])
        return {"append": lambda: Append(batch()), "delete": lambda: Delete(lo, hi),
                "overwrite": lambda: Overwrite(lo, hi, batch(lo, hi, 2)), "compact": Compact,
                "expire": Expire, "read": Read}[kind]()

    setup = [batch(n=4) for _ in range(rng.randint(1, 3))]
    names = "ABC"[:actors]
    plan = {name: [operation() for _ in range(rng.randint(1, ops))] for name in names}
    schedule = [rng.choice(names) for _ in range(sum(3 * len(p) for p in plan.values()))]
    return setup, plan, schedule


class InvariantViolation(AssertionError):
    def __init__(self, model: Model, problems: list[str]) -> None:
        steps = "\n".join(f"  {s.actor} {s.step} ({s.op}) -> {s.outcome}" for s in model.trace)
        super().__init__("\n".join(problems) + f"\nafter these steps:\n{steps}")
        self.problems = problems


def run(setup: list[tuple[Row, ...]], actors: dict[str, list[Op]], schedule: list[str], *,
        locked: bool = True, model: type[Model] = Model) -> Model:
    """Play ``schedule``, then let each unfinished actor finish; raise InvariantViolation at the first step
    after which an invariant does not hold."""
    m = model(setup, actors, locked=locked)
    tail = [name for name in sorted(actors) for _ in range(3 * len(actors[name]) * (RETRIES + 2))]
    for name in [*schedule, *tail]:
        if m.step(name):
            problems = violations(m)
            if problems:
                raise InvariantViolation(m, problems)
    return m


if __name__ == "__main__":
    seed = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    setup, actors, schedule = random_scenario(random.Random(seed))
    print("setup:", setup)
    for name, ops in actors.items():
        print(f"{name}:", ops)
    result = run(setup, actors, schedule, locked="unlocked" not in sys.argv[2:])
    for s in result.trace:
        outcome = s.outcome if s.outcome is None or s.op != "Read" else (s.outcome[0], "rows")
        print(f"{s.actor}  {s.step:8} {s.op:10} {outcome or ''}")
    print("rows:", sorted(result.expected.elements()))
