"""One registry for every kind of plug-in looked up by a name written in matrix.yaml (backends, container
runtimes): a name's module is imported only when the name is asked for, registering a name twice is an error
(not a silent overwrite), and an unknown name lists the known ones."""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from typing import Generic, TypeVar

from runner.base.errors import BackendError, ConfigError

T = TypeVar("T")


def _origin(obj: object) -> str:
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', repr(obj))}"


class Registry(Generic[T]):
    """Names -> plug-ins of one kind (`what`, e.g. "backend"). `modules`: where each built-in name lives;
    importing that module registers it. `ordered`: list the names in the order given (else sorted)."""

    def __init__(self, what: str, modules: Mapping[str, str] | None = None, ordered: bool = False) -> None:
        self.what = what
        self.modules = dict(modules or {})
        self.ordered = ordered
        self._found: dict[str, T] = {}

    def register(self, name: str, obj: T, rename: str = "name") -> T:
        """Make `obj` available under `name`; a name already taken is refused (`rename`: what to change)."""
        known = self._found.get(name)
        if known is not None:
            raise BackendError(f"{self.what} {name!r} is registered twice: by {_origin(known)} and by "
                               f"{_origin(obj)}; give one of them another `{rename}`")
        self._found[name] = obj
        return obj

    def forget(self, name: str) -> None:
        """Take back a name registered for a while (a plug-in a test brings); a built-in module's name stays
        known and is imported again when asked for."""
        self._found.pop(name, None)

    def names(self) -> list[str]:
        """Every name, without importing any module."""
        names = list(dict.fromkeys([*self.modules, *self._found]))
        return names if self.ordered else sorted(names)

    def get(self, name: str) -> T:
        """The plug-in for a name, importing its module the first time."""
        if name not in self._found:
            module = self.modules.get(name)
            if module is None:
                raise ConfigError(f"unknown {self.what} {name!r}; allowed: {', '.join(self.names())}")
            importlib.import_module(module)
            if name not in self._found:
                raise BackendError(f"{module} did not register a {self.what} named {name!r}")
        return self._found[name]

    def loaded(self) -> list[str]:
        """The names whose modules have been imported so far."""
        return sorted(self._found)

    def __contains__(self, name: object) -> bool:
        return name in self.modules or name in self._found

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())
