"""What the executors are given: their Python as the user chose it, and this package as a zip
that a Python holding only pyspark and pyarrow can run (no Spark session here: seconds)."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from twisted_broker.codec.kafka import record_values
from twisted_broker.spark import executor_code
from twisted_broker.codec.kafka07.compression import GZIP, NO_COMPRESSION, SNAPPY
from twisted_broker.codec.kafka07.message_set import encode_compressed_message_set

WORKER_PYTHON = Path(__file__).resolve().parents[2] / ".venv-spark-worker" / "bin" / "python"


@pytest.mark.parametrize("master, conf, environ, expected", [
    ("spark://h:7077", {"spark.pyspark.python": "/conf/python"}, {"PYSPARK_PYTHON": "/env/python"}, "/conf/python"),
    ("spark://h:7077", {}, {"PYSPARK_PYTHON": "/env/python"}, "/env/python"),
    ("local[2]", {}, {"PYSPARK_PYTHON": "/env/python"}, "/env/python"),
    ("local[2]", {}, {}, sys.executable),
    ("spark://h:7077", {}, {}, None),  # Spark's default python3 on each worker, not this path
])
def test_workers_python_is_the_users_choice_then_this_interpreter_only_on_local_masters(master, conf, environ,
                                                                                      expected):
    assert executor_code.worker_python(master, conf, environ) == expected


def test_only_this_interpreter_goes_without_the_package():
    assert not executor_code.needs_package_zip(sys.executable)
    assert executor_code.needs_package_zip(None)
    assert executor_code.needs_package_zip(str(WORKER_PYTHON))


def test_the_zip_holds_the_package_and_kazoo_and_is_reused_while_nothing_changes(tmp_path):
    first = executor_code.package_zip(tmp_path)
    names = zipfile.ZipFile(first).namelist()
    assert "twisted_broker/spark/data_source.py" in names and "twisted_broker/codec/kafka07/crc.py" in names
    assert "kazoo/client.py" in names
    # make's mypyc build of record_values (a C extension beside its source) goes as its source
    assert list(Path(record_values.__file__).parent.glob("record_values*.so"))
    assert "twisted_broker/codec/kafka/record_values.py" in names
    assert all(name.endswith(".py") for name in names)
    assert executor_code.package_zip(tmp_path) == first
    assert list(tmp_path.iterdir()) == [first]


# Run by the worker venv's Python with the zip alone on its path: decode a plain and a gzip
# set with their CRCs checked (zlib instead of zlib-ng), then a snappy one.
DECODE = """
import sys
sys.path.insert(0, sys.argv[1])
from twisted_broker.spark.message_columns import decode_message_set
from twisted_broker.codec.kafka07 import crc
assert crc.crcmod_crc32 is None and crc.zlib_ng is None, "the extensions were importable"
for hex_set in sys.argv[2:]:
    try:
        columns = decode_message_set(bytes.fromhex(hex_set), 0, crc="fail")
        print([bytes(p) for p in columns.payload.to_pylist()], columns.crc_valid.to_pylist())
    except ImportError as exc:
        print(type(exc).__module__, type(exc).__name__, exc)
"""


def test_a_python_with_only_pyspark_and_pyarrow_decodes_from_the_zip_and_names_snappy_missing(tmp_path):
    if not WORKER_PYTHON.exists():
        pytest.fail(f"{WORKER_PYTHON} is missing: make test builds it (make .venv-spark-worker/.installed)")
    sets = [encode_compressed_message_set([b"a", b"bc"], codec) for codec in (NO_COMPRESSION, GZIP, SNAPPY)]
    done = subprocess.run([str(WORKER_PYTHON), "-c", DECODE, str(executor_code.package_zip(tmp_path)),
                           *(message_set.hex() for message_set in sets)],
                          capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert done.returncode == 0, done.stderr
    plain, gzip, snappy = done.stdout.splitlines()
    assert plain == gzip == "[b'a', b'bc'] [True, True]"
    assert snappy.startswith("twisted_broker.codec.kafka07.compression CodecUnavailable snappy: the module snappy "
                             f"(pip install python-snappy) is not installed in {WORKER_PYTHON}")
