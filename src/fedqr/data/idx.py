"""Reader for the IDX format of the MNIST files (optionally gzip-compressed).

An IDX file starts with a 4-byte big-endian magic number ``0x0000TTDD`` (``TT``
the element type, ``0x08`` for unsigned bytes; ``DD`` the number of dimensions),
then ``DD`` big-endian 4-byte sizes, then the elements in C order.
"""

from __future__ import annotations

import gzip
import math
import zlib
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

#: Magic number of an IDX file of unsigned bytes with 3 dimensions (images).
IDX_IMAGES_MAGIC = 0x00000803
#: Magic number of an IDX file of unsigned bytes with 1 dimension (labels).
IDX_LABELS_MAGIC = 0x00000801


class IdxFormatError(ValueError):
    """An IDX file is truncated, has trailing bytes or an unexpected header."""


def parse_idx(raw: bytes, *, expected_magic: int, source: str = "<bytes>") -> NDArray[np.uint8]:
    """Parse the bytes of an uncompressed IDX file of unsigned bytes.

    Parameters
    ----------
    raw : bytes
        The whole (decompressed) file.
    expected_magic : int
        :data:`IDX_IMAGES_MAGIC` or :data:`IDX_LABELS_MAGIC` (any ``0x000008DD``).
    source : str, optional
        Name used in error messages.

    Returns
    -------
    numpy.ndarray
        ``uint8`` array with the shape given by the header (a fresh, writable copy).

    Raises
    ------
    IdxFormatError
        If the magic number, dimensions or payload length are wrong.
    """
    if expected_magic >> 8 != 0x08 or not 1 <= expected_magic & 0xFF <= 4:
        raise ValueError(
            f"expected_magic must be 0x000008DD with 1 <= DD <= 4, "
            f"got expected_magic={expected_magic:#010x}"
        )
    if len(raw) < 4:
        raise IdxFormatError(f"{source}: too short for an IDX header ({len(raw)} bytes)")
    magic = int.from_bytes(raw[:4], "big")
    if magic != expected_magic:
        raise IdxFormatError(
            f"{source}: bad IDX magic number {magic:#010x}, expected {expected_magic:#010x}"
        )
    ndim = magic & 0xFF
    header_len = 4 + 4 * ndim
    if len(raw) < header_len:
        raise IdxFormatError(f"{source}: truncated IDX header ({len(raw)} < {header_len} bytes)")
    shape = tuple(int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    expected_len = header_len + math.prod(shape)
    if len(raw) != expected_len:
        raise IdxFormatError(
            f"{source}: IDX header announces shape {shape} ({expected_len} bytes in all), "
            f"but the file holds {len(raw)} bytes"
        )
    return np.frombuffer(raw, dtype=np.uint8, offset=header_len).reshape(shape).copy()


def read_idx(path: Path, *, expected_magic: int) -> NDArray[np.uint8]:
    """Read an IDX file, gunzipping it when its name ends in ``.gz``.

    Parameters
    ----------
    path : Path
        The file.
    expected_magic : int
        See :func:`parse_idx`.

    Returns
    -------
    numpy.ndarray
        ``uint8`` array with the shape given by the header.

    Raises
    ------
    IdxFormatError
        If the file is not valid gzip or not a valid IDX file.
    """
    data = path.read_bytes()
    if path.name.endswith(".gz"):
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as exc:
            raise IdxFormatError(f"{path}: not a valid gzip file ({exc})") from exc
    return parse_idx(data, expected_magic=expected_magic, source=str(path))
