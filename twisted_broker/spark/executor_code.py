"""What a Spark job's Python workers need from this project: which Python, and this package.

The data source's classes are pickled by reference, so every Python worker that runs them
imports this package: the executors (``read``) and, for a Python data source, the workers
Spark starts on the driver to plan (``schema``, ``partitions``). Both run ``PYSPARK_PYTHON``.

**Which Python** (``worker_python``): ``spark.pyspark.python`` if the session's configuration
gives it, else ``PYSPARK_PYTHON`` from the environment, as Spark ranks them; else, on a
``local`` master, this very interpreter (it can import the project); else nothing, and Spark
runs its default ``python3`` on each machine. A PySpark program that starts its own JVM reads
only the environment variable (``SparkContext.pythonExec``), so session.py copies the
property into it before the JVM starts.

**This package** (``package_zip``), when that Python is not this interpreter: this project's
``twisted_broker`` package and the pure-Python libraries it imports on the Python workers
(kazoo, for ``zk.connect`` planning), zipped from the installed files and handed to
``SparkContext.addPyFile``, i.e. Spark's ``spark.submit.pyFiles`` mechanism: Spark copies the
zip to every executor and puts it first on its Python workers' ``sys.path``, so they run
exactly the driver's code. A zip cannot hold C extensions; the workers then need only pyspark
and pyarrow, because the wire codecs fall back to the stdlib where theirs are missing
(codec/kafka07/crc.py: ``zlib.crc32`` is the same CRC-32; gzip is zlib) and a snappy wrapper fails
the task with ``CodecUnavailable`` naming the module (codec/kafka07/compression.py). A cluster whose
executors must read snappy installs python-snappy beside pyspark, or ships a whole packed
environment itself (``--conf spark.archives=env.tar.gz#env`` with
``spark.pyspark.python=./env/bin/python``): this module does not do that for it, because a
packed copy of the driver's environment (pyspark alone is 450 MB) would go to every executor
on every run to carry three small codec bindings.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import tempfile
import zipfile
from collections.abc import Iterator, Mapping
from pathlib import Path

PYTHON_CONF = "spark.pyspark.python"
PYTHON_ENV = "PYSPARK_PYTHON"
PACKAGE = "twisted_broker"
# Imported on the Python workers besides the stdlib, pyspark and pyarrow, and pure Python.
PURE_DEPENDENCIES = ("kazoo",)


def is_local(master: str) -> bool:
    """Whether ``master`` runs every executor on this machine (local, local[N], local-cluster[...])."""
    return master.startswith("local")


def worker_python(master: str, conf: Mapping[str, str], environ: Mapping[str, str]) -> str | None:
    """The interpreter of the job's Python workers; None leaves Spark's default (``python3``)."""
    given = conf.get(PYTHON_CONF) or environ.get(PYTHON_ENV)
    if given:
        return given
    return sys.executable if is_local(master) else None


def needs_package_zip(python: str | None) -> bool:
    """Whether workers running ``python`` must be given this package (any Python but this one).

    Paths are compared as given: a virtualenv's python is a symlink to a base interpreter that
    cannot import what the virtualenv holds.
    """
    return python != sys.executable


def package_zip(directory: Path | None = None) -> Path:
    """This package and PURE_DEPENDENCIES as one zip for ``addPyFile``; returns its path.

    The zip is named for a hash of its contents (Spark refuses a second file of the same name
    with other contents), written once into ``directory`` (default: a per-user folder of the
    temp directory) and reused while the sources do not change. Raises ValueError if a
    dependency turns out to hold a C extension, which a zip cannot carry.
    """
    directory = directory or Path(tempfile.gettempdir()) / f"twisted-broker-spark-{os.getuid()}"
    files = sorted(_package_files())
    digest = hashlib.sha256()
    for name, path in files:
        digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    target = directory / f"{PACKAGE}-py-{digest.hexdigest()[:16]}.zip"
    if target.exists():
        return target
    directory.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(f"{target.name}.{os.getpid()}.tmp")
    with zipfile.ZipFile(temporary, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, path in files:
            archive.write(path, name)
    os.replace(temporary, target)  # another process building the same zip writes the same bytes
    return target


def _package_files() -> Iterator[tuple[str, Path]]:
    """(name in the zip, file) for each module of the package and its pure dependencies."""
    for top in (PACKAGE, *PURE_DEPENDENCIES):
        spec = importlib.util.find_spec(top)
        if spec is None or not spec.submodule_search_locations:
            raise ValueError(f"cannot find the package {top} to ship to the Spark executors")
        for root in map(Path, spec.submodule_search_locations):
            for path in root.rglob("*"):
                if "__pycache__" in path.parts or not path.is_file():
                    continue
                if path.suffix in (".so", ".pyd"):
                    if top == PACKAGE and _compiled_from_source(path):
                        continue  # make's mypyc build of a module: its source goes instead
                    raise ValueError(f"{path} is a C extension: it cannot go to the executors in a zip")
                if path.suffix == ".py":
                    yield f"{top}/{path.relative_to(root).as_posix()}", path


def _compiled_from_source(path: Path) -> bool:
    """Whether ``path`` is mypyc's build of a module whose source sits beside it (the module,
    or its ``<name>__mypyc`` runtime part): the zip carries the source, which runs the same."""
    stem = path.name.split(".")[0].removesuffix("__mypyc")
    return (path.parent / f"{stem}.py").exists()
