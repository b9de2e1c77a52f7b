"""Column encodings chosen by writers (WRITE-7)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from lakefmt.encoding import DEFAULT, choose_encodings, high_cardinality
from lakefmt.errors import ValidationError

N = 5000


def sample() -> pa.Table:
    return pa.table({
        "ts": pa.array(range(N), pa.timestamp("us", tz="UTC")),
        "seq": pa.array(range(N), pa.int64()),
        "day": pa.array([i % 7 for i in range(N)], pa.date32()),
        "value": pa.array([i * 0.5 for i in range(N)], pa.float64()),
        "name": pa.array([f"n{i}" for i in range(N)]),
        "kind": pa.array(["a", "b"] * (N // 2)),
        "flag": pa.array([i % 2 == 0 for i in range(N)]),
    })


def test_near_unique_columns_lose_the_dictionary():
    enc = choose_encodings(sample())
    assert enc.use_dictionary == ["day", "kind", "flag"]
    assert enc.column_encoding == {"ts": "DELTA_BINARY_PACKED", "seq": "DELTA_BINARY_PACKED"}


@pytest.mark.parametrize("values", [
    [i % 4000 for i in range(5000)],                      # 80% distinct: keeps its dictionary
    [i % 4500 for i in range(5000)],                      # exactly 90%: loses it
    [None if i % 3 == 0 else i for i in range(5000)],     # nulls are not values
    [None if i % 3 == 0 else i % 3000 for i in range(5000)],
    [float("nan") if i % 2 else i * 0.5 for i in range(5000)],  # NaN is one value
    [f"s{i % 4600}" if i % 11 else None for i in range(5000)],
])
def test_high_cardinality_counts_distinct_non_null_values(values):
    column = pa.chunked_array([values[:1200], values[1200:]])
    distinct = pc.count_distinct(column, mode="only_valid").as_py()
    assert high_cardinality(column) == (distinct >= 0.9 * (len(column) - column.null_count))


def test_small_or_repetitive_samples_keep_pyarrows_default():
    assert choose_encodings(sample().slice(0, 100)) == DEFAULT  # too few rows to tell
    assert choose_encodings(sample().select(["kind", "day"])) == DEFAULT
    dictionary = sample().select(["name"]).cast(pa.schema([("name", pa.dictionary(pa.int32(), pa.string()))]))
    assert choose_encodings(dictionary) == DEFAULT  # arrives as a dictionary: keeps it


def test_appended_files_use_the_chosen_encodings(local_catalog):
    t = local_catalog.create_table("db.enc", sample().schema)
    t.append(sample())
    (f,) = t.plan_files()
    footer = pq.ParquetFile(f"{t.location}/{f.path}").metadata
    chunks = {footer.row_group(0).column(i).path_in_schema: footer.row_group(0).column(i)
              for i in range(footer.num_columns)}
    assert "DELTA_BINARY_PACKED" in chunks["ts"].encodings and not chunks["ts"].has_dictionary_page
    assert not chunks["value"].has_dictionary_page and not chunks["name"].has_dictionary_page
    assert chunks["kind"].has_dictionary_page
    assert t.scan().to_arrow().equals(sample())


def test_columns_zstd_cannot_shrink_are_stored_uncompressed(local_catalog):
    import random

    rng = random.Random(7)
    rows = 70_000  # at least four samples' worth: smaller writes skip the trial write
    data = pa.table({
        "noise": pa.array([rng.random() for _ in range(rows)], pa.float64()),  # random mantissas: ZSTD saves ~5%
        "seq": pa.array(range(rows), pa.int64()),  # deltas of 1: ZSTD shrinks them to almost nothing
        "kind": pa.array(["a", "b"] * (rows // 2)),
    })
    assert choose_encodings(data.slice(0, N)).compression == "zstd"  # no trial write for a small file
    enc = choose_encodings(data)
    assert enc.compression == {"noise": "none", "seq": "zstd", "kind": "zstd"}
    assert enc.compression_level(3) == {"seq": 1, "kind": 3}  # deltas of 1: level 1 stores them as small (WRITE-12)
    t = local_catalog.create_table("db.noise", data.schema)
    t.append(data)
    (f,) = t.plan_files()
    footer = pq.ParquetFile(f"{t.location}/{f.path}").metadata
    codecs = {footer.row_group(0).column(i).path_in_schema: footer.row_group(0).column(i).compression
              for i in range(footer.num_columns)}
    assert codecs == {"noise": "UNCOMPRESSED", "seq": "ZSTD", "kind": "ZSTD"}
    assert t.scan().to_arrow().equals(data)


def test_min_compression_saving_zero_compresses_every_column(local_catalog):
    import random

    rng = random.Random(3)
    data = pa.table({"noise": pa.array([rng.random() for _ in range(N)], pa.float64())})
    t = local_catalog.create_table("db.zstd", data.schema,
                                   properties={"write.parquet.min-compression-saving": "0"})
    t.append(data)
    (f,) = t.plan_files()
    assert pq.ParquetFile(f"{t.location}/{f.path}").metadata.row_group(0).column(0).compression == "ZSTD"
    with pytest.raises(ValidationError, match="write.parquet.min-compression-saving must be <= 1"):
        local_catalog.create_table("db.bad", data.schema, properties={"write.parquet.min-compression-saving": "2"})


def test_writer_takes_dictionary_and_plain_chunks_in_one_file(local_catalog):
    """A rolling writer fed dictionary arrays and plain arrays of the same column writes one
    file whose Parquet type is the column's, with every value."""
    from lakefmt.write import RollingFileWriter

    t = local_catalog.create_table("db.mixed", pa.schema([("k", pa.string()), ("n", pa.int64())]))
    plain = pa.table({"k": pa.array(["x", None, "y"] * 700), "n": pa.array(range(2100), pa.int64())},
                     schema=t.schema().to_arrow())
    as_dict = plain.set_column(0, plain.schema.field(0).with_type(pa.dictionary(pa.int32(), pa.string())),
                               plain.column(0).dictionary_encode())
    writer = RollingFileWriter(t.io, t.location, t.schema(), t.metadata.spec, (), t.write_options())
    for chunk in (as_dict, plain, as_dict):
        writer.write(chunk)
    (f,) = writer.close()
    path = f"{t.location}/{f.path}"
    assert pq.read_schema(path).field("k").type == pa.string()
    back = pq.read_table(path)
    assert back.num_rows == f.record_count == 6300
    assert back.column("k").to_pylist() == plain.column("k").to_pylist() * 3


def _fast_and_slow_columns(rows: int) -> pa.Table:
    """``hexish``: random hex digits and a counter, which ZSTD level 1 stores in fewer bytes than
    level 3; ``blocks``: one of 2,000 random 128-digit blocks and a counter, whose repeats far
    apart only level 3 finds (about half level 1's bytes)."""
    import random

    rng = random.Random(3)
    blocks = [bytes(rng.getrandbits(8) for _ in range(64)).hex() for _ in range(2000)]
    return pa.table({
        "hexish": pa.array([f"{rng.getrandbits(64):016x}{i:08d}" for i in range(rows)]),
        "blocks": pa.array([rng.choice(blocks) + str(i) for i in range(rows)]),
        "kind": pa.array(["a", "b"] * (rows // 2)),
    })


def test_fast_zstd_level_only_for_columns_it_stores_as_small(local_catalog):
    """WRITE-12: at level 3 a column that level 1 stores in no more bytes gets level 1, the others
    keep level 3; the file holds the rows, and each column's bytes are at most level 3's."""
    # spec: WRITE-12, WRITE-7
    from dataclasses import replace

    from lakefmt.encoding import FAST_ZSTD_LEVEL
    from lakefmt.write import RollingFileWriter

    data = _fast_and_slow_columns(70_000)  # four samples' worth: the trial writes are made
    enc = choose_encodings(data, 3)
    assert enc.fast == ("hexish",)
    assert enc.compression_level(3) == {"hexish": FAST_ZSTD_LEVEL, "blocks": 3, "kind": 3}
    assert enc.compression_level(1) == {"hexish": 1, "blocks": 1, "kind": 1}  # never above the level asked
    assert choose_encodings(data, 1).fast == ()  # level 1 asked: nothing faster to try
    assert choose_encodings(data.slice(0, N), 3).fast == ()  # a small file: no trial write

    t = local_catalog.create_table("db.levels", data.schema, properties={"write.parquet.compression-level": "3"})
    sizes = []
    for chosen in (None, replace(enc, fast=())):  # as chosen, and every ZSTD column at level 3
        writer = RollingFileWriter(t.io, t.location, t.schema(), t.spec(), (), t.write_options(), encodings=chosen)
        writer.write(data)
        (f,) = writer.close()
        footer = pq.ParquetFile(f"{t.location}/{f.path}").metadata
        sizes.append({footer.row_group(g).column(i).path_in_schema: 0 for i in range(footer.num_columns)
                      for g in range(footer.num_row_groups)})
        for g in range(footer.num_row_groups):
            for i in range(footer.num_columns):
                column = footer.row_group(g).column(i)
                sizes[-1][column.path_in_schema] += column.total_compressed_size
        assert pq.read_table(f"{t.location}/{f.path}").cast(data.schema).equals(data)
    chosen_sizes, level3_sizes = sizes
    assert chosen_sizes["hexish"] < level3_sizes["hexish"]
    assert chosen_sizes["blocks"] == level3_sizes["blocks"]


def test_trial_write_takes_a_few_pages_of_a_wide_column(monkeypatch):
    """WRITE-7, WRITE-12: the trial write takes each column's first rows up to TRIAL_PAGES pages of
    the file's page size; a column of 200-byte strings is tried on 4,096 of the 16,384 sampled rows
    at 256 KiB pages, a column of doubles on all of them, and the choice is the one the whole
    sample gives."""
    # spec: WRITE-7, WRITE-12
    import random

    from lakefmt import encoding

    rng = random.Random(5)
    rows = 40_000
    data = pa.table({
        "wide": pa.array([f"{rng.getrandbits(800):0200x}" for _ in range(rows)]),  # random hex: level 1 as small
        "noise": pa.array([rng.random() for _ in range(rows)], pa.float64()),  # ZSTD saves ~5%: uncompressed
        "kind": pa.array(["a", "b"] * (rows // 2)),
    })
    tried: list[dict[str, int]] = []
    write_table = pq.write_table

    def record(table: pa.Table, *args: object, **kwargs: object) -> None:
        tried.append({name: table.num_rows for name in table.column_names})
        write_table(table, *args, **kwargs)

    monkeypatch.setattr(encoding.pq, "write_table", record)
    enc = choose_encodings(data, 3, 0.1, 256 * 1024)
    trials = [t for t in tried if "kind" not in t]  # leaf_paths writes the whole (empty) schema
    assert {name: n for t in trials for name, n in t.items()} == {"wide": 4096, "noise": 16_384}
    assert enc.compression == {"wide": "zstd", "noise": "none", "kind": "zstd"} and enc.fast == ("wide",)
    monkeypatch.setattr(encoding, "TRIAL_PAGES", 1_000)  # the whole sample of every column
    assert choose_encodings(data, 3, 0.1, 256 * 1024) == enc


def test_a_shared_choice_measures_when_its_rows_together_are_enough():
    """WRITE-7, COMPACT-16: a choice shared by writes of 60,000 rows in all makes the trial write
    from a first file of 12,000 rows; the same file alone, or a share of too few rows, does not."""
    # spec: WRITE-7, WRITE-12, COMPACT-16
    from lakefmt.encoding import MEASURE_MIN_ROWS, SharedChoice

    first = _fast_and_slow_columns(12_000)
    assert first.num_rows < MEASURE_MIN_ROWS <= 60_000
    assert choose_encodings(first, 3).fast == ()
    assert SharedChoice(rows=20_000).choose(first, 3).fast == ()
    shared = SharedChoice(rows=60_000)
    assert shared.choose(first, 3).fast == ("hexish",)
    assert shared.choose(_fast_and_slow_columns(5_000), 3) is shared.choose(first, 3)


def test_writers_asking_while_a_shared_choice_is_made_wait_for_it(monkeypatch):
    """WRITE-11, COMPACT-16: writers that ask while another writer chooses wait for that choice (made
    from the first writer's rows) instead of sampling their own; its error reaches each of them."""
    # spec: WRITE-11, COMPACT-16
    import threading

    from lakefmt import encoding
    from lakefmt.encoding import SharedChoice

    first = _fast_and_slow_columns(20_000)
    expected = SharedChoice(rows=60_000).choose(first, 3)
    entered, release = threading.Event(), threading.Event()
    choose = encoding.choose_encodings

    def held(*args, **kwargs):  # type: ignore[no-untyped-def]
        entered.set()
        assert release.wait(30)
        return choose(*args, **kwargs)

    monkeypatch.setattr(encoding, "choose_encodings", held)
    shared = SharedChoice(rows=60_000)
    got: list[object] = []
    chooser = threading.Thread(target=lambda: got.append(shared.choose(first, 3)))
    chooser.start()
    assert entered.wait(30)
    waiters = [threading.Thread(target=lambda: got.append(shared.choose(first.slice(0, 18_000), 3)))
               for _ in range(2)]
    for w in waiters:
        w.start()
    assert not got  # all wait for the choice under way
    release.set()
    for w in [chooser, *waiters]:
        w.join(30)
    assert got == [expected] * 3 and got[0] is got[1] is got[2]

    def failing(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise ValueError("no sample")

    monkeypatch.setattr(encoding, "choose_encodings", failing)
    shared = SharedChoice(rows=60_000)
    for _ in range(2):
        with pytest.raises(ValueError, match="no sample"):
            shared.choose(first, 3)
