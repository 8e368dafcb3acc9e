"""Schema'd messages: named arrays as zero-copy views into one contiguous buffer.

Every rank derives the same :class:`Schema` from the config and the environment's
spaces; ranks exchange :meth:`Schema.digest` at start-up so a mismatch is caught
before the first message (gloo would otherwise abort on an oversized message or
silently reinterpret bytes). No pickle ever crosses the wire: a message is raw bytes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

import numpy as np
from numpy.typing import DTypeLike

_ALIGN = 8


@dataclass(frozen=True)
class Field:
    """One named array of a message: its dtype and fixed shape."""

    name: str
    dtype: np.dtype
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize


class Schema:
    """An ordered set of named, fixed-shape arrays laid out in one byte buffer.

    Variable-length data uses a fixed capacity plus a count field (for example
    ``ep_count`` beside ``ep_returns[capacity]``).
    """

    def __init__(self, name: str, fields: Iterable[tuple[str, DTypeLike, tuple[int, ...] | int]]):
        self.name = name
        self.fields: dict[str, Field] = {}
        self.offsets: dict[str, int] = {}
        offset = 0
        for fname, dtype, shape in fields:
            if fname in self.fields:
                raise ValueError(f"schema {name!r}: duplicate field {fname!r}")
            shp = (shape,) if isinstance(shape, int) else tuple(int(s) for s in shape)
            if any(s < 0 for s in shp):
                raise ValueError(f"schema {name!r}: negative dimension in {fname!r}: {shp}")
            f = Field(fname, np.dtype(dtype), shp)
            offset = -(-offset // _ALIGN) * _ALIGN
            self.fields[fname] = f
            self.offsets[fname] = offset
            offset += f.nbytes
        self.nbytes = max(_ALIGN, -(-offset // _ALIGN) * _ALIGN)

    def describe(self) -> list[list[object]]:
        """A canonical, JSON-able description (what the digest hashes)."""
        return [[f.name, f.dtype.str, list(f.shape)] for f in self.fields.values()]

    def digest(self) -> str:
        """A short hash of the layout, exchanged at start-up."""
        blob = json.dumps([self.name, self.describe()], separators=(",", ":")).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    def new(self) -> Message:
        """A fresh zeroed message with its own buffer."""
        return Message(self, np.zeros(self.nbytes, dtype=np.uint8))

    def __repr__(self) -> str:
        inner = ", ".join(f"{f.name}:{f.dtype.name}{list(f.shape)}" for f in self.fields.values())
        return f"Schema({self.name!r}, {self.nbytes} B: {inner})"


class Message(Mapping[str, np.ndarray]):
    """A buffer plus named views into it; ``msg["obs"]`` is a view, writes go to the buffer."""

    __slots__ = ("schema", "buffer", "_views")

    def __init__(self, schema: Schema, buffer: np.ndarray) -> None:
        if buffer.dtype != np.uint8 or buffer.ndim != 1 or buffer.nbytes != schema.nbytes:
            raise ValueError(f"buffer must be uint8[{schema.nbytes}] for {schema.name!r}")
        self.schema = schema
        self.buffer = buffer
        self._views = {
            name: np.ndarray(f.shape, f.dtype, buffer=buffer.data, offset=schema.offsets[name])
            for name, f in schema.fields.items()
        }

    def __getitem__(self, name: str) -> np.ndarray:
        return self._views[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._views)

    def __len__(self) -> int:
        return len(self._views)

    def copy_from(self, other: Message) -> None:
        np.copyto(self.buffer, other.buffer)
