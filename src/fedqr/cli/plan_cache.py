"""A repeated ``fedqr plan`` (twin) answered from the cache without torch (issue 24).

The planner caches the twin's simulations (:mod:`fedqr.planner.cache`), but a re-plan
through the CLI still imports torch and dp-accounting and loads the data: seconds. This
module stores the answer itself, the plan document that ``--json`` prints, in
``$FEDQR_CACHE/plans/answers``, under a key of everything the answer depends on that the CLI
sees before those imports:

- every option of the invocation but the output-only ``--json``, ``--plot`` and ``--cache``
  (paths made absolute, enums by value; ``--eps 1`` and ``--eps 1.0`` are different keys);
- fedqr's version, :data:`~fedqr._cache.PLANNER_VERSION`, the twin's product format
  (:func:`fedqr._precision.twin_products`) and the names, sizes and times of fedqr's own
  source files (an edited or reinstalled fedqr plans afresh);
- the input files: ``--data``, ``--test-data``, ``--proxy-data``, the ``--model`` FILE.py
  with the user's modules it imports (:func:`model_imports`: found from its ``import``
  statements without running it, transitively; not the standard library's, installed
  packages' or fedqr's) and a ``--proxy-classes`` label map; for a built-in data set
  (``--dataset`` without ``--data``, ``--proxy-dataset``), every place its loader searches
  (``--data-dir``, ``$FEDQR_DATA``, the download cache ``$XDG_CACHE_HOME/fedqr``), its own
  folders with their subfolders. Each file counts by its name, size, modification and change times
  (``mtime_ns``, ``ctime_ns``: every write moves the change time, which no tool sets back),
  not its content: the whole key takes 2 to 7 ms, hashing MNIST's folder (23 MB) alone 60 to
  150 ms, and a large ``--data`` file seconds.

A hit prints the stored document through the renderer of a fresh plan
(:mod:`fedqr.cli.plan_view`): the same tables, messages and privacy warning; only
``simulated_rounds``, ``wall_time_s`` and ``from_cache`` describe the call itself (0 twin
rounds, its seconds, cached), as for a re-plan from the simulations' cache. A miss plans as
before and stores the document after success. ``--plot`` bypasses the fast path (the figure
needs the planner's predictions; the answer is still stored), ``--no-cache`` neither reads
nor writes, and an unreadable or damaged answer file is a miss. Not in the key: modules a
``--model`` file imports by name at run time (``importlib``), data files it reads, and the
versions of torch and NumPy.
"""

from __future__ import annotations

import ast
import contextlib
import enum
import hashlib
import importlib.machinery
import json
import os
import stat
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from rich.markup import escape

import fedqr
from fedqr._atomic import write_bytes_atomic
from fedqr._cache import PLANNER_VERSION, cache_home
from fedqr._precision import twin_products
from fedqr._user_files import is_user_file
from fedqr.cli._common import err
from fedqr.cli.plan_view import plan_view, show_plan

__all__ = ["ANSWER_FORMAT", "answer_key", "answer_path", "model_imports", "replay", "store"]

ANSWER_FORMAT = 1
"""Version of the answer files (and of what their key covers)."""
_OUTPUT_ONLY = frozenset({"ctx", "as_json", "plot", "cache", "method"})
"""Options not in the key (``method``: the twin's is in ``chosen``, given or not)."""
_MAX_ENTRIES = 20_000
"""Files and folders a key may stat; past that (a huge data folder) there is no fast path."""
_DAMAGED = (KeyError, TypeError, ValueError, IndexError, AttributeError)


class _TooMany(Exception):
    """More than :data:`_MAX_ENTRIES` entries to fingerprint."""


def answer_key(options: Mapping[str, Any]) -> str | None:
    """The key of the answer to ``fedqr plan`` with ``options`` (the keyword arguments of
    :func:`fedqr.cli.plan.plan`); ``None`` with ``--no-cache`` or too many files to
    fingerprint."""
    if not options["cache"]:
        return None
    try:
        products = twin_products()
    except ValueError:  # a bad FEDQR_TWIN_PRODUCTS: no fast path, the plan names it (exit 2)
        return None
    seen = [0]
    try:
        doc = {"format": ANSWER_FORMAT, "fedqr": fedqr.__version__, "planner": PLANNER_VERSION,
               "products": products,
               "source": _tree(Path(fedqr.__file__).parent, deep=True, seen=seen,
                               suffix=".py"),
               "options": {k: _plain(v) for k, v in options.items() if k not in _OUTPUT_ONLY},
               "files": _inputs(options, seen)}
    except _TooMany:
        return None
    text = json.dumps(doc, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def answer_path(key: str) -> Path:
    """The answer file of ``key``: ``$FEDQR_CACHE/plans/answers/KEY.json``."""
    return cache_home() / "plans" / "answers" / f"{key}.json"


def replay(key: str, *, as_json: bool, started: float) -> bool:
    """Print the stored answer of ``key`` (``started``: the call's ``perf_counter``); whether
    there was one. An unreadable or damaged file is reported and is a miss."""
    path = answer_path(key)
    try:
        stored = json.loads(path.read_bytes().decode("utf-8"))
        if stored["format"] != ANSWER_FORMAT or stored["key"] != key:
            raise ValueError("written for another key")
        doc = dict(stored["document"])
        doc.update(simulated_rounds=0, from_cache=True, simulated=None,  # this call's work
                   wall_time_s=time.perf_counter() - started)
        view = plan_view(doc)
    except (FileNotFoundError, NotADirectoryError):  # no answer, or no cache folder there
        return False
    except (OSError, UnicodeDecodeError, *_DAMAGED) as e:
        err.print(f"[yellow]warning:[/] unreadable or damaged cached plan {path}, planning "
                  f"again ({e!r}; --no-cache skips the cache)")
        return False
    for text in doc.get("warnings", ()):  # what the fresh plan's data and planner said
        err.print(f"[yellow]warning:[/] {escape(str(text))}")
    show_plan(view, as_json=as_json)
    return True


def store(key: str, doc: dict[str, Any]) -> None:
    """Store the plan document ``doc`` as the answer of ``key`` (atomically); a cache that
    cannot be written is reported, the plan stands."""
    text = json.dumps({"format": ANSWER_FORMAT, "key": key, "document": doc}, indent=1)
    try:
        write_bytes_atomic(answer_path(key), text.encode("utf-8"))
    except OSError as e:
        err.print(f"[yellow]warning:[/] could not cache the plan in {answer_path(key)} "
                  f"({e.strerror or e})")


def _plain(v: Any) -> Any:
    """An option's value as JSON: enums by value, paths absolute."""
    if isinstance(v, enum.Enum):
        return v.value
    if isinstance(v, Path):
        return os.path.abspath(v)
    if v is None or isinstance(v, str | int | float | bool):
        return v
    return repr(v)


def _inputs(o: Mapping[str, Any], seen: list[int]) -> dict[str, Any]:
    """The fingerprints of the files and data folders the plan reads, by absolute path."""
    files: list[Path] = [o[k] for k in ("data", "test_data", "proxy_data") if o[k] is not None]
    model = o["model"] or ""
    path_s, sep, _ = model.rpartition(":")
    if sep and path_s.endswith(".py"):
        files += [Path(path_s), *model_imports(Path(path_s), seen)]
    classes = (o["proxy_classes"] or "").strip()
    if classes.lower().endswith(".json"):
        files.append(Path(classes))
    places = [(f, False) for f in files]
    names = [] if o["data"] is not None else [o["dataset"] or "mnist"]
    if o["proxy_dataset"] is not None:
        names.append(o["proxy_dataset"])
    for name in names:
        places += _search_places(str(_plain(name)), o["data_dir"])
    return {f"{os.path.abspath(p)}|{'deep' if deep else 'flat'}":
            _tree(p, deep=deep, seen=seen) for p, deep in places}


def model_imports(model_file: Path, seen: list[int]) -> list[Path]:
    """The user's source files that ``model_file`` imports, directly or through each other,
    found without running them: the ``import`` statements of each file (:func:`_imports`),
    resolved as Python would with the model file's folder first on ``sys.path`` (as
    :func:`fedqr.models.zoo.load_factory` loads it), relative ones from the importing file's
    package. Modules of the standard library, installed packages and fedqr are not followed
    (:func:`_user_file`), nor imports made by name at run time (``importlib``)."""
    first = model_file.resolve()
    roots = [first.parent, *(Path(p or os.curdir) for p in sys.path)]
    found: list[Path] = []
    todo, done = [first], {first}
    while todo:
        for name, base in _imports(todo.pop()):
            for path in _resolve(name, base, roots):
                seen[0] += 1
                if seen[0] > _MAX_ENTRIES:
                    raise _TooMany
                if path not in done and _user_file(path):
                    done.add(path)
                    found.append(path)
                    todo.append(path)
    return found


def _imports(file: Path) -> list[tuple[str, Path | None]]:
    """The modules ``file`` may import: dotted names, each with the folder a relative import
    starts from (``None``: absolute). ``from a import b`` names ``a`` and ``a.b`` (``b`` may
    be a submodule); a file that cannot be read or parsed names none (its own fingerprint is
    in the key)."""
    try:
        tree = ast.parse(file.read_bytes(), filename=str(file))
    except (OSError, SyntaxError, ValueError):
        return []
    out: list[tuple[str, Path | None]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(alias.name, None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level > len(file.parents):  # above the file system's root
                continue
            base = file.parents[node.level - 1] if node.level else None
            module = node.module or ""
            out.append((module, base))
            out += [(f"{module}.{a.name}".lstrip("."), base) for a in node.names
                    if a.name != "*"]
    return out


def _resolve(name: str, base: Path | None, roots: list[Path]) -> list[Path]:
    """The source files importing ``name`` runs (each package's ``__init__.py`` on the way,
    then the module's), from ``base`` for a relative import, else from the first of ``roots``
    that holds its top package; none for a module built in, or of the standard library unless
    the model file's folder (``roots[0]``, first on ``sys.path``) shadows it."""
    parts = [p for p in name.split(".") if p]
    if base is None:
        if not parts or parts[0] in sys.builtin_module_names:
            return []
        if parts[0] in sys.stdlib_module_names:
            if _find(roots[0], parts[0]) is None:
                return []
            base = roots[0]
        else:
            base = _top(parts[0], roots)
        if base is None:
            return []
    elif not parts:  # ``from . import x``: the package itself
        return [f for f in [base / "__init__.py"] if f.is_file()]
    return list(_walk_down(base, parts))


def _top(name: str, roots: list[Path]) -> Path | None:
    """The first of ``roots`` with a package or module ``name``, else the first with a
    folder ``name`` (a namespace package, which Python takes only when no root has either);
    ``None``: none has it."""
    found = [(r, _find(r, name)) for r in roots]
    return next((r for r, f in found if f is not None and not f.is_dir()),
                next((r for r, f in found if f is not None), None))


def _walk_down(folder: Path, parts: list[str]) -> Iterator[Path]:
    """The files of ``folder/a/b/c`` for ``parts`` ``[a, b, c]``: each package's
    ``__init__.py``, then the module's; down to the first part not found."""
    for part in parts:
        found = _find(folder, part)
        if found is None:
            return
        if found.is_dir():  # a namespace package: no file of its own
            folder = found
        elif found.name == "__init__.py":
            yield found
            folder = found.parent
        else:  # a module: nothing below it
            yield found
            return


def _find(folder: Path, part: str) -> Path | None:
    """What ``import part`` finds in ``folder``: a package's ``__init__.py``, a module's
    extension or source file, a namespace package's folder; ``None``: nothing."""
    package = folder / part
    if (package / "__init__.py").is_file():
        return package / "__init__.py"
    for suffix in (*importlib.machinery.EXTENSION_SUFFIXES, ".py"):
        if (folder / f"{part}{suffix}").is_file():
            return folder / f"{part}{suffix}"
    return package if package.is_dir() else None


def _user_file(path: Path) -> bool:
    """Whether ``path`` is the user's Python source (:func:`fedqr._user_files.is_user_file`)."""
    return str(path).endswith(".py") and is_user_file(path)


def _search_places(name: str, data_dir: Path | None) -> list[tuple[Path, bool]]:
    """Where the loaders of :mod:`fedqr.data` look for data set ``name`` (a place and
    whether its subfolders count): ``data_dir`` and ``data_dir/NAME``, ``$FEDQR_DATA/NAME``
    and ``$FEDQR_DATA``, the download cache ``$XDG_CACHE_HOME/fedqr/NAME``."""
    places: list[tuple[Path, bool]] = []
    if data_dir is not None:
        places += [(Path(data_dir).expanduser(), False),
                   (Path(data_dir).expanduser() / name, True)]
    env = os.environ.get("FEDQR_DATA")
    if env:
        places += [(Path(env).expanduser() / name, True), (Path(env).expanduser(), False)]
    xdg = os.environ.get("XDG_CACHE_HOME")
    places.append(((Path(xdg) if xdg else Path.home() / ".cache") / "fedqr" / name, True))
    return places


def _tree(path: Path, *, deep: bool, seen: list[int], suffix: str = "") -> Any:
    """A file's ``[size, mtime_ns, ctime_ns]``, a folder's entries by name (its subfolders'
    own entries when ``deep``, else their times), ``None`` when missing; with ``suffix``
    only the files ending so."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    except OSError as e:
        return f"error {e.errno}"
    if not stat.S_ISDIR(st.st_mode):
        return [st.st_size, st.st_mtime_ns, st.st_ctime_ns]
    listing: dict[str, Any] = {}
    with contextlib.suppress(OSError), os.scandir(path) as entries:
        for entry in entries:
            seen[0] += 1
            if seen[0] > _MAX_ENTRIES:
                raise _TooMany
            if entry.name == "__pycache__":
                continue
            try:
                is_dir = entry.is_dir()
                if is_dir and deep:
                    listing[entry.name] = _tree(Path(entry.path), deep=True, seen=seen,
                                                suffix=suffix)
                elif is_dir or entry.name.endswith(suffix):
                    s = entry.stat()
                    listing[entry.name] = [s.st_size, s.st_mtime_ns, s.st_ctime_ns]
            except OSError as e:
                listing[entry.name] = f"error {e.errno}"
    return listing
