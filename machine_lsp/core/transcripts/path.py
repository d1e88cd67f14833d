"""Conversation prefixes shared between the turns of a tree-shaped log, so reading a log stays linear.

A session log of N exchanges has N turns whose conversations are prefixes of one another. Holding each as its own
list costs O(N^2) time and memory; here each turn's conversation is a chain of small chunks pointing at its parent
chunk, so the turns share everything they have in common. A conversation is turned into a list only when someone
reads it (one turn is tagged or hovered), at O(its length).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Generic, TypeVar, overload

T = TypeVar("T")


class Chunk(Generic[T]):
    """Items appended after `parent` (None: the start). Never mutated, so any number of children share it."""

    __slots__ = ("items", "parent", "size")

    def __init__(self, parent: Chunk[T] | None, items: tuple[T, ...]) -> None:
        self.parent = parent
        self.items = items
        self.size: int = (parent.size if parent is not None else 0) + len(items)

    def then(self, items: Sequence[T]) -> Chunk[T]:
        """This prefix followed by `items` (itself when there is nothing to add)."""
        return Chunk(self, tuple(items)) if items else self


EMPTY: Chunk[Any] = Chunk(None, ())


def chunk(parent: Chunk[T] | None, items: Sequence[T]) -> Chunk[T]:
    return (parent or EMPTY).then(items)


class SharedPath(Sequence[T]):
    """A read-only sequence over a chunk chain: len() is O(1), anything else reads the chain once (O(length))."""

    __slots__ = ("_end",)

    def __init__(self, end: Chunk[T] | None) -> None:
        self._end = end if end is not None else EMPTY

    def to_list(self) -> list[T]:
        chunks: list[tuple[T, ...]] = []
        node: Chunk[T] | None = self._end
        while node is not None:
            if node.items:
                chunks.append(node.items)
            node = node.parent
        out: list[T] = []
        for items in reversed(chunks):
            out.extend(items)
        return out

    def __len__(self) -> int:
        return self._end.size

    @overload
    def __getitem__(self, index: int) -> T: ...
    @overload
    def __getitem__(self, index: slice) -> list[T]: ...
    def __getitem__(self, index: int | slice) -> T | list[T]:
        if isinstance(index, slice):
            return self.to_list()[index]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError("conversation index out of range")
        node: Chunk[T] | None = self._end
        while node is not None:  # walk back: the answer and recent messages are the ones usually asked for
            start = node.size - len(node.items)
            if index >= start:
                return node.items[index - start]
            node = node.parent
        raise IndexError("conversation index out of range")  # pragma: no cover - sizes are consistent

    def __iter__(self) -> Iterator[T]:
        return iter(self.to_list())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, SharedPath):
            return self.to_list() == other.to_list()
        if isinstance(other, (list, tuple)):
            return self.to_list() == list(other)
        return NotImplemented

    def __hash__(self) -> int:  # pragma: no cover - a conversation is not a dict key
        raise TypeError("unhashable type: 'SharedPath'")

    def __repr__(self) -> str:
        return f"SharedPath({self.to_list()!r})"
