"""The CRC-32 of Kafka 0.7 messages (IEEE 802.3, as Java's ``java.util.zip.CRC32``).

crcmod is the project's declared CRC library and its C extension is required: without a
compiler it silently falls back to pure Python at ~25 us per 200-byte message, which would make
validation the bottleneck of the broker. ``zlib.crc32`` computes the identical function about
4x faster (0.12 vs 0.57 us per 200-byte call, ``python -m bench crc``), and zlib-ng's, which
uses the CPU's carry-less multiply, twice as fast again (0.06-0.07 us; 50 GB/s against 6 on a
megabyte), so the hot paths use zlib-ng's; tests check that all three agree.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable

# A Spark executor may have this package alone, zipped (spark/executor_code.py ships it to
# Pythons that hold nothing but pyspark and pyarrow): there the stdlib's zlib computes the
# same CRC, about half as fast, and crcmod, which only the tests and the benchmark call, is
# absent. Everywhere else both come with the package (setup.cfg).
try:
    from zlib_ng import zlib_ng
except ModuleNotFoundError:
    zlib_ng = None

try:
    import crcmod.predefined
    from crcmod.crcmod import _usingExtension
except ModuleNotFoundError:
    crcmod_crc32: Callable[[bytes], int] | None = None
else:
    if not _usingExtension:  # an ImportError, not an assert: asserts vanish under python -O
        raise ImportError("crcmod was built without its C extension; reinstall it with a C compiler present")
    crcmod_crc32 = crcmod.predefined.mkCrcFun("crc-32")

# The function every codec uses. Returns the unsigned CRC (Python 3's zlib already does).
crc32 = zlib.crc32 if zlib_ng is None else zlib_ng.crc32
