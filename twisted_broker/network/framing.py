"""Size-prefixed frames (``int32 size`` + body), shared by the broker and the clients.

A sans-I/O decoder: feed it bytes as they arrive, get back complete frames. The size is checked
against the limit as soon as its 4 bytes arrive, before any of the body is buffered, so a peer
cannot make us hold more than ``max_size`` for one frame. (Twisted's ``Int32StringReceiver``
re-joins its whole buffer on every read: quadratic on 0.7's 100 MB requests.)
"""

from __future__ import annotations

import struct

_SIZE = struct.Struct(">i")


class FrameTooLarge(ValueError):
    """A frame's size field is negative, zero when not allowed, or above the limit."""

    def __init__(self, size: int, max_size: int, frames: list[bytes | memoryview] | None = None) -> None:
        super().__init__(f"frame size {size} is outside [1, {max_size}]")
        self.size, self.max_size = size, max_size
        # The complete frames that came before the bad size in the same feed, in order: a
        # peer's requests are served in order up to the bad one, however the bytes were split.
        self.frames = frames or []


class FrameDecoder:
    """Turns a byte stream into frames of at most ``max_size`` bytes (size field excluded)."""

    def __init__(self, max_size: int, min_size: int = 1) -> None:
        self._buf = bytearray()
        self._max_size, self._min_size = max_size, min_size

    @property
    def buffered(self) -> int:
        """Bytes held that do not complete a frame yet."""
        return len(self._buf)

    def next_frame_size(self) -> int | None:
        """The size of the frame being received, once its size field has arrived."""
        if len(self._buf) < 4:
            return None
        return _SIZE.unpack_from(self._buf, 0)[0]

    def feed(self, data: bytes) -> list[bytes | memoryview]:
        """Buffer ``data``; return the frames it completes, in order.

        Raises FrameTooLarge at a bad size field; its ``frames`` are the complete frames before it.
        """
        buf = self._buf
        buf += data
        end = len(buf)
        if end >= 4:
            (size,) = _SIZE.unpack_from(buf, 0)
            if end == 4 + size and self._min_size <= size <= self._max_size:
                # Exactly one frame, the usual end of a big request: hand the buffer over
                # instead of copying it.
                self._buf = bytearray()
                return [memoryview(buf)[4:]]
        frames: list[bytes | memoryview] = []
        pos = 0
        error = None
        with memoryview(buf) as view:
            while end - pos >= 4:
                (size,) = _SIZE.unpack_from(view, pos)
                if not self._min_size <= size <= self._max_size:
                    error = FrameTooLarge(size, self._max_size, frames)
                    break
                if end < pos + 4 + size:
                    break
                frames.append(view[pos + 4:pos + 4 + size].tobytes())
                pos += 4 + size
        if pos:
            del buf[:pos]  # one trim per call keeps big frames O(n)
        if error is not None:  # raised after the trim: its frames are never returned again
            raise error
        return frames


def encode_frame(body: bytes) -> bytes:
    return _SIZE.pack(len(body)) + body
