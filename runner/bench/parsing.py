"""The workload parsers' common part: the `Parser` every kind subclasses, the registry of kinds (`register`, `make`)
and what every parser gives besides its figures (their definitions, their printed resolution, every loss it read).
parsers.py holds the built-in kinds and re-exports these. Standard library only, Python 3.6 syntax."""

import importlib
import re

from .readings import LossSeen, out_of_domain

# Kind -> parser class, filled by @register (the built-ins of parsers.py, and each parser_KIND.py module).
PARSERS = {}  # type: dict
KIND_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def register(cls):
    """Make a Parser subclass the parser of its `kind` (the kind of its settings model in runner/backends/workloads/)."""
    if not KIND_RE.match(cls.kind or ""):
        raise TypeError("%s: kind %r is not a name (letters, digits, _)" % (cls.__name__, cls.kind))
    if cls.kind in PARSERS and PARSERS[cls.kind] is not cls:
        raise TypeError("workload parser %r is registered twice: by %s and by %s"
                        % (cls.kind, PARSERS[cls.kind].__name__, cls.__name__))
    PARSERS[cls.kind] = cls
    return cls


class Parser(object):
    """Fed line by line; `outcome()` says what was found. A parser of a new kind subclasses it, sets `kind`,
    implements `feed` (calling Parser.feed) and `measured`, hands every loss it reads to `loss()` (NaN included), and
    is decorated with @register."""

    kind = ""

    def __init__(self, config):
        self.config = config
        self.lines = 0
        self.records = 0
        self.definitions = {}  # metric -> {how, unit}: how this parser obtained each figure it gives
        # metric -> the resolution its figure was printed at, in the store's unit (a mean of printed values, a
        # scale, a figure derived from another carry it along): the controller counts it as uncertainty
        self.resolution = {}
        # Every loss the output gave (warm-up too: a NaN anywhere is a training that did not stay finite).
        self.loss_seen = LossSeen()

    def feed(self, line):
        self.lines += 1

    def loss(self, value, source):
        """One loss the output gave, NaN and infinities included, and None for a loss logged as null (a strict JSON
        encoder's NaN: not finite); `source` says where, in words (the record's `from` names every source, in the
        order they were first seen)."""
        if not self.loss_seen.source:
            self.loss_seen.source = source
        elif source not in self.loss_seen.source.split(", "):
            self.loss_seen.source += ", " + source
        self.loss_seen.add(value)

    def measured(self):
        """(metrics in the store's names, figures of the user's naming, notes, problem or None)."""
        raise NotImplementedError

    def outcome(self):
        metrics, figures, notes, problem = self.measured()
        losses = self.seen_losses(metrics)
        if problem is None:  # a loss that is not finite is no parsing problem: the training diverged (loss_seen)
            problem = out_of_domain(dict((k, v) for k, v in metrics.items() if k != "loss_end"), figures)
        if problem is None:
            missing = [name for name in self.config.get("require", ()) if metrics.get(name) is None
                       and (figures.get(name) or {}).get("value") is None]
            if missing:
                problem = "found no %s in %s" % (" or ".join(missing), self.where())
        notes = dict(notes, records=self.records, lines=self.lines)
        definitions = dict((k, v) for k, v in self.definitions.items() if metrics.get(k) is not None
                           or (figures.get(k) or {}).get("value") is not None)
        resolution = dict((k, q) for k, q in self.resolution.items() if q and metrics.get(k) is not None)
        return {"metrics": metrics, "figures": figures, "notes": notes, "problem": problem,
                "definitions": definitions, "resolution": resolution, "losses": losses}

    def seen_losses(self, metrics):
        """metrics.loss_seen: the losses `loss()` was given; a parser that gave it none, its final loss."""
        if not self.loss_seen.count and metrics.get("loss_end") is not None:
            self.loss(metrics["loss_end"], "%s: the final loss" % self.kind)
        return self.loss_seen.record()

    def where(self):
        source = self.config.get("file")
        what = "%d %s lines" % (self.records, self.kind) if self.records else "no %s line" % self.kind
        return "%s (%s among %d lines)" % ("the log file %s" % source if source else "the program's output",
                                          what, self.lines)


def make(config):
    """The parser a normalised configuration names: a built-in one, or the one the module parser_KIND.py of
    this package registers (imported the first time the kind is asked for)."""
    kind = config["kind"]
    if kind not in PARSERS and KIND_RE.match(kind):
        try:
            importlib.import_module(".parser_" + kind, __package__)
        except ImportError as e:
            if getattr(e, "name", None) != "%s.parser_%s" % (__package__, kind):
                raise ValueError("the workload parser module parser_%s.py cannot be imported here: %s" % (kind, e))
    if kind not in PARSERS:
        raise ValueError("no workload parser %r in this benchmark (it has %s)" % (kind, ", ".join(known_kinds())))
    return PARSERS[kind](config)


def known_kinds():
    """Every kind this benchmark has: registered, or in a parser_KIND.py module of this package (a zipapp too)."""
    import pkgutil
    package = importlib.import_module(__package__)
    found = set(PARSERS)
    for _, name, _ in pkgutil.iter_modules(getattr(package, "__path__", [])):
        if name.startswith("parser_"):
            found.add(name[len("parser_"):])
    return sorted(found)
