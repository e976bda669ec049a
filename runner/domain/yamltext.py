"""matrix.yaml as the user wrote it: safe_load's constructors, a key given twice refused, and text fields
kept as typed.

PyYAML reads YAML 1.1: an unquoted `yes` is the boolean true, `010` the octal 8, `1.10` the float 1.1 and
`1:30` the base-60 number 90. Where a field wants text (an environment variable, a name, a setup line, a
Slurm time) the value keeps the characters written; where it wants a number, a spelling that YAML 1.1 reads
as something else than it shows (octal, base 60, a boolean) is refused with the number to write.
"""

from __future__ import annotations

import re
import types
from collections.abc import Callable, Sequence
from typing import Any, Literal, Union, get_args, get_origin

import yaml
from pydantic import BaseModel

from runner.base.errors import ConfigError

STR_TAG = "tag:yaml.org,2002:str"
MERGE_TAG = "tag:yaml.org,2002:merge"
OCTAL = re.compile(r"^[-+]?0[0-7_]+$")        # YAML 1.1 octal: 010 is 8 (YAML 1.2 and people read 10)
BASE60 = re.compile(r"^[-+]?[0-9][0-9_]*(:[0-5]?[0-9])+(\.[0-9_]*)?$")  # 1:30 is 90

# What a file may expand to through its aliases, counting an aliased node once per use: a matrix is a few
# hundred nodes; ten nested aliases of ten (a "billion laughs") are 10^10 and exhaust the machine wherever
# the value lands (a workload's argv, an environment's env), so they are refused before anything reads them.
MAX_EXPANDED_NODES = 100_000
# And the text those values hold, aliases expanded: a long value used 50,000 times in a flat list (a workload's
# argv) is few nodes but gigabytes once the cell's key or the launcher's argument is written out.
MAX_EXPANDED_CHARS = 16 * 2**20

Locate = Callable[[Sequence[Any]], str]  # a field path -> "file: a.b[2] (line N)"
Shape = dict[str, Any]  # known keys of a mapping and their annotations; "*": any other key (else left alone)


class TooLarge(yaml.YAMLError):
    def __init__(self, line: int, why: str) -> None:
        super().__init__(why)
        self.line, self.why = line, why


def refuse_expansion(root: yaml.Node) -> None:
    """Raise TooLarge when the node tree, aliases expanded, exceeds MAX_EXPANDED_NODES values or
    MAX_EXPANDED_CHARS characters of text (counted without expanding: each node's size once, memoised)."""
    size: dict[int, int] = {}
    chars: dict[int, int] = {}
    open_: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        if id(node) in size:
            continue
        if not done and id(node) in open_:
            raise TooLarge(node.start_mark.line + 1, "an alias (*name) refers to a value that contains it")
        children: list[yaml.Node] = []
        if isinstance(node, yaml.MappingNode):
            children = [n for pair in node.value for n in pair]
        elif isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        if not done:
            open_.add(id(node))
            stack.append((node, True))
            stack.extend((c, False) for c in children if id(c) not in size)
            continue
        open_.discard(id(node))
        size[id(node)] = 1 + sum(size.get(id(c), 1) for c in children)
        chars[id(node)] = (len(node.value) if isinstance(node, yaml.ScalarNode) else 0) + sum(
            chars.get(id(c), 0) for c in children)
        if size[id(node)] > MAX_EXPANDED_NODES:
            raise TooLarge(node.start_mark.line + 1, f"its aliases (*name) expand to more than "
                                                     f"{MAX_EXPANDED_NODES:,} values")
        if chars[id(node)] > MAX_EXPANDED_CHARS:
            raise TooLarge(node.start_mark.line + 1, f"its aliases (*name) expand to more than "
                                                     f"{MAX_EXPANDED_CHARS:,} characters of text")


class DuplicateKey(yaml.YAMLError):
    def __init__(self, path: tuple[Any, ...], key: str, first: int, again: int) -> None:
        super().__init__(key)
        self.path, self.key, self.first, self.again = path, key, first, again


class MatrixLoader(yaml.SafeLoader):
    """yaml.SafeLoader (plain data only, no Python objects) that refuses a key given twice in one mapping,
    at any depth: YAML keeps only the last one, silently (two `axes:` blocks would lose the first)."""

    def compose_document(self) -> Any:
        node = super().compose_document()
        if node is not None:
            refuse_expansion(node)
            refuse_duplicates(node)
        return node


def refuse_duplicates(root: yaml.Node) -> None:
    """Raise DuplicateKey for the first mapping that names a key twice; merge keys (`<<: *base`) may be
    overridden, as YAML intends. Aliased nodes are checked once."""
    seen: set[int] = set()
    stack: list[tuple[yaml.Node, tuple[Any, ...]]] = [(root, ())]
    while stack:
        node, path = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            first: dict[tuple[str, str], int] = {}
            for k, v in node.value:
                if k.tag == MERGE_TAG:
                    stack.append((v, path))
                    continue
                if isinstance(k, yaml.ScalarNode):
                    ident = (k.tag, k.value)
                    if ident in first:
                        raise DuplicateKey(path, k.value, first[ident], k.start_mark.line + 1)
                    first[ident] = k.start_mark.line + 1
                    stack.append((v, (*path, k.value)))
                else:
                    stack.append((v, path))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((v, (*path, i)) for i, v in enumerate(node.value))


def load(text: str, where: str) -> tuple[Any, yaml.Node | None]:
    """(data, its node tree) from YAML text; any YAML mistake is one ConfigError naming file and line."""
    loader = None
    try:
        loader = MatrixLoader(text)  # reading checks the characters: a control character is a ReaderError
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except DuplicateKey as e:
        where_in = ".".join(f"[{p}]" if isinstance(p, int) else str(p) for p in e.path).replace(".[", "[")
        at = f"{where}: {where_in} (line {e.again})" if where_in else f"{where} (line {e.again})"
        raise ConfigError(f"{at}: the key {e.key!r} is "
                          f"given twice (first on line {e.first}); YAML would silently keep only the last: "
                          "write it once") from None
    except TooLarge as e:
        raise ConfigError(f"{where} (line {e.line}): {e.why}; write the values out, or use fewer nested "
                          "aliases") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = f" (line {mark.line + 1})" if mark else ""
        problem = getattr(e, "problem", None) or str(e).replace("\n", " ")
        raise ConfigError(f"{where}{line}: not valid YAML: {problem}") from e
    except RecursionError:
        raise ConfigError(f"{where}: not a matrix file: nested too deeply") from None
    finally:
        if loader is not None:
            loader.dispose()
    return data, node


# Values as written ----------------------------------------------------------------------------------
def kinds(ann: Any) -> set[str]:
    """What an annotation accepts, coarsely: text, number, bool, null, list, dict, model, shape or any."""
    if isinstance(ann, dict):
        return {"shape"}
    origin = get_origin(ann)
    if origin in (Union, types.UnionType):
        return set().union(*(kinds(a) for a in get_args(ann)))
    if origin is Literal:
        return {"text"} if all(isinstance(a, str) for a in get_args(ann)) else {"any"}
    if origin is list:
        return {"list"}
    if origin is dict:
        return {"dict"}
    if ann is str:
        return {"text"}
    if ann is bool:
        return {"bool"}
    if ann in (int, float):
        return {"number"}
    if ann is type(None):
        return {"null"}
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return {"model"}
    return {"any"}


def _members(ann: Any) -> list[Any]:
    return list(get_args(ann)) if get_origin(ann) in (Union, types.UnionType) else [ann]


def child(node: yaml.Node | None, key: str) -> yaml.Node | None:
    """The value node of `key` in a mapping node (the last one, as YAML keeps), or None."""
    found = None
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            if isinstance(k, yaml.ScalarNode) and k.value == key:
                found = v
    return found


def list_item(ann: Any) -> Any:
    """The item annotation of the list member of ann (list[str] | None -> str), or None."""
    for a in _members(ann):
        if get_origin(a) is list:
            return get_args(a)[0]
    return None


def _fields(ann: Any) -> Shape | None:
    """The known keys of a mapping annotation: a model's fields, or a shape."""
    for a in _members(ann):
        if isinstance(a, dict):
            return a
        if isinstance(a, type) and issubclass(a, BaseModel):
            return {name: f.annotation for name, f in a.model_fields.items()}
    return None


def _dict_value(ann: Any) -> tuple[Any, Any] | None:
    for a in _members(ann):
        if get_origin(a) is dict:
            key, value = get_args(a)
            return key, value
    return None


class Walk:
    """Walks data and its node tree along annotations, restoring text and collecting problems."""

    def __init__(self, locate: Locate) -> None:
        self.locate = locate
        self.problems: list[str] = []
        self._constructor = yaml.SafeLoader("")

    def construct(self, node: yaml.Node) -> Any:
        return self._constructor.construct_object(node, deep=True)

    def value(self, value: Any, node: yaml.Node | None, ann: Any, loc: tuple[Any, ...]) -> Any:
        if node is None or ann is Any:
            return value
        if isinstance(node, yaml.ScalarNode):
            item = list_item(ann)
            if item is not None and not (kinds(ann) - {"list", "null"}):
                ann = item  # a scalar where a list is expected: the one value of an axis
            return self.scalar(value, node, ann, loc)
        if isinstance(node, yaml.SequenceNode) and isinstance(value, list) and len(value) == len(node.value):
            item = list_item(ann)
            if item is None:
                return value
            return [self.value(v, n, item, (*loc, i)) for i, (v, n) in enumerate(zip(value, node.value, strict=True))]
        if isinstance(node, yaml.MappingNode) and isinstance(value, dict):
            fields = _fields(ann)
            if fields is not None:
                out = dict(value)
                for k, v in node.value:
                    field_ann = fields.get(k.value, fields.get("*")) if isinstance(k, yaml.ScalarNode) else None
                    if field_ann is not None and k.value in out:
                        out[k.value] = self.value(out[k.value], v, field_ann, (*loc, k.value))
                return out
            pair = _dict_value(ann)
            if pair is not None:
                key_ann, value_ann = pair
                rebuilt: dict[Any, Any] = {}
                for k, v in node.value:  # from the nodes: `ON` and `on` are two names, not one True
                    key = self.scalar(self.construct(k), k, key_ann, loc) if isinstance(k, yaml.ScalarNode) \
                        else self.construct(k)
                    rebuilt[key] = self.value(self.construct(v), v, value_ann, (*loc, key))
                return rebuilt
        return value

    def scalar(self, value: Any, node: yaml.ScalarNode, ann: Any, loc: tuple[Any, ...]) -> Any:
        if node.tag == STR_TAG or node.style is not None or value is None:
            return value  # text already, quoted (an explicit tag on a quoted value is meant), or null: unset
        want = kinds(ann)
        text = node.value
        if "text" in want and not want & {"number", "bool", "any"}:
            return text  # `yes`, `010`, `1.10`, `1:30`, `2024-01-01` stay the characters written
        if "number" in want and "bool" not in want and isinstance(value, bool):
            self.problems.append(f"{self.locate(loc)}: {text} is read by YAML as the boolean "
                                 f"{str(value).lower()}, not a number; write a number")
        elif "number" in want and isinstance(value, int | float) and not isinstance(value, bool):
            why = ("a leading 0 makes it octal" if OCTAL.match(text)
                   else "a colon makes it base 60" if BASE60.match(text) else "")
            if why:
                self.problems.append(f"{self.locate(loc)}: {text} is read by YAML 1.1 as {value!r} ({why}); "
                                     f"write {value!r} if that is what you mean")
        return value
