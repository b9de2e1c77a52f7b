"""The invariants of the commit model, checked after every step (README.md, *Invariants*).

I1 the history is linear; I2 no acknowledged commit is lost, and an operation that failed
committed nothing; I3 a reader sees exactly one committed snapshot; I4 no deleted row comes
back: the rows are those of the acknowledged commits applied one after the other, in commit
order; I5 no file that a retained snapshot needs is deleted.
"""

from __future__ import annotations

from commit_model import Model, Read


def violations(m: Model) -> list[str]:
    """What is wrong with the state of ``m`` now; empty when every invariant holds."""
    out: list[str] = []
    prev = m.created
    for old, new, actor, _ in m.log:  # I1
        before, after = m.metadata[old], m.metadata[new]
        if old != prev:
            out.append(f"I1 linear history: {actor}'s commit is not built on the commit before it")
        if after.version != before.version + 1:
            out.append(f"I1 linear history: version {after.version} follows {before.version}")
        if after.current != before.current and after.current_snapshot.parent_id != before.current:
            out.append(f"I1 linear history: the parent of snapshot {after.current} was not current")
        prev = new
    chain, location = set(), m.pointer  # I2
    parents = {new: old for old, new, _, _ in m.log}
    while location in parents:
        chain.add(location)
        location = parents[location]
    committed = {(actor, index): new for _, new, actor, index in m.log}
    for actor in m.actors.values():
        for index, outcome in enumerate(actor.outcomes):
            acknowledged = outcome[0] == "ok" and not isinstance(actor.ops[index], Read)
            if acknowledged and committed.get((actor.name, index)) not in chain:
                out.append(f"I2 lost commit: {actor.name}'s {type(actor.ops[index]).__name__} was "
                           "acknowledged, but the current metadata does not descend from it")
            if not acknowledged and (actor.name, index) in committed:
                out.append(f"I2 {actor.name}'s {type(actor.ops[index]).__name__} failed but committed")
    for sid, rows in m.reads:  # I3
        if rows is not None and rows != m.rows_at.get(sid):
            out.append(f"I3 one snapshot: a read of snapshot {sid} returned rows no commit made")
    current = m.load()
    rows = m.rows_of(current.current_snapshot)  # I4
    if rows is not None:
        back = sorted({uid for _, uid in rows} & m.deleted)
        if back:
            out.append(f"I4 deleted rows are back: uids {back}, deleted by an acknowledged commit")
        if rows != m.expected:
            out.append("I4 rows: the table's rows are not its commits applied in commit order")
    for snap in current.snapshots.values():  # I5
        if m.rows_of(snap) is None:
            out.append(f"I5 storage: a file of retained snapshot {snap.snapshot_id} was deleted")
    return out
