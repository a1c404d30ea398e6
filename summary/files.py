"""Proton's capture files, in and out: finding them under the paths given (docs/summary.md's
"The command line" names them), decoding them, and writing outputs without losing a file."""

import gzip
import json
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from summary import Refused
from summary.run import epoch_ns, printable

CAPTURE = re.compile(r"(.+?)(\.part_\d+)?\.(hatchet|hatchet_msgpack|chrome_trace)(\.gz)?", re.S)
TRIAL = re.compile(r"trial(\d+)")
DEEP = 10**6  # levels of the pure-Python decoder, for trees too deep for the C ones
PROVENANCE = (
    "triton torch backend_asked backend_used mode_asked mode_used run_id world_size"
).split()


def why(error: OSError) -> str:
    return (error.strerror or str(error)).lower()


def format_path(path: object) -> str:
    return printable(str(path)[:200])


@dataclass
class Found:
    """What the paths given hold, each file once: the captures, sorted; what was skipped (as
    proton_unread's entries); provenance files; a run of trials' folders and captures."""

    files: list = field(default_factory=list)
    skipped: list = field(default_factory=list)
    provenance: list = field(default_factory=list)
    trials: list = field(default_factory=list)  # (folder, [captures])
    seen: dict = field(default_factory=dict)  # real path -> the path it was first found by

    def skip(self, path: object, why: str, **same_as: str) -> None:
        self.skipped.append({"file": str(path), "why": why, **same_as})


def find(paths: list[str]) -> Found:
    found = Found()
    for given in paths:
        path = Path(given)
        if not given:
            raise Refused("an empty path names nothing")
        if not path.exists():
            raise Refused(f"{format_path(given)}: no such file or directory")
        if path.is_dir():
            search(found, path, top=True)
        elif add(found, path):
            found.provenance.append(path.parent / "provenance.json")
    real = {os.path.realpath(p) for p in found.files}
    for path in [p for p in found.files if str(p).endswith(".gz")]:
        if (capture := os.path.realpath(path)[:-3]) in real:  # `gzip -k` left both
            found.files.remove(path)
            found.skip(path, "a gzip copy of a capture read", same_as=capture)
    if found.trials and len(found.files) != sum(len(files) for _, files in found.trials):
        raise Refused("a run of trials (trial<K> folders) is read alone, with no other captures")
    found.provenance = [p for p in found.provenance if p.is_file()]
    found.seen.update((os.path.realpath(p), p) for p in found.provenance)
    found.files.sort()
    return found


def search(found: Found, folder: Path, top: bool = False) -> None:
    """Adds the captures in folder and below; at the top, trial<K> folders are trials."""
    trials = {}
    for entry in listed(found, folder, top):
        before = len(found.files)
        if visit(found, entry) and top and (trial := TRIAL.fullmatch(entry.name)):
            if (number := int(trial[1])) in trials:
                raise Refused(f"{format_path(folder)}: two folders are trial {number}")
            trials[number] = (Path(entry.path), sorted(found.files[before:]))
    if trials and sorted(trials) != list(range(1, len(trials) + 1)):
        raise Refused(f"{format_path(folder)}: trial folders not numbered 1 to N")
    found.trials = found.trials or [trials[k] for k in sorted(trials)]


def listed(found: Found, folder: Path, top: bool) -> list:
    """folder's entries by name; none for one reached again, or that cannot be listed."""
    if (real := os.path.realpath(folder)) in found.seen:
        return []
    found.seen[real] = folder
    try:
        return sorted(os.scandir(folder), key=lambda entry: entry.name)
    except OSError as e:
        if top:
            raise Refused(f"{format_path(folder)}: {why(e)}") from None
        found.skip(folder, f"a folder that cannot be listed: {why(e)}")
        return []


def visit(found: Found, entry: os.DirEntry) -> bool:
    """Adds what a folder's entry holds; whether it is a folder."""
    try:
        folder = entry.is_dir()
    except OSError as e:  # a link in a loop, or to where this user may not look
        found.skip(entry.path, why(e))
        return False
    if folder:
        search(found, Path(entry.path))
    elif entry.name == "provenance.json":
        found.provenance.append(Path(entry.path))
    elif CAPTURE.fullmatch(entry.name):
        add(found, Path(entry.path), named=False)
    return folder


def add(found: Found, path: Path, named: bool = True) -> bool:
    """Adds path if it is a regular file that no other name reached first."""
    if not path.is_file():  # a pipe or a device would block a reader; a broken link
        if named:
            raise Refused(f"{format_path(path)}: not a regular file")
        found.skip(path, "not a regular file")
        return False
    if same := found.seen.get(real := os.path.realpath(path)):
        found.skip(path, f"the same file as {same}", same_as=str(same))
        return False
    found.seen[real] = path
    found.files.append(path)
    return True


def kind(path: Path) -> str:
    return "trace" if path.name.removesuffix(".gz").endswith(".chrome_trace") else "tree"


def rank_of(path: Path) -> int | None:
    """The rank a launcher gave the process that wrote path (.rank<R> in its name)."""
    found = re.search(r"\.rank(\d+)\.", path.name)
    return int(found[1]) if found else None


def load(path: Path) -> object:
    """A decoded capture; ValueError says why not."""
    try:
        data = path.read_bytes()
        data = gzip.decompress(data) if path.name.endswith(".gz") else data
    except (OSError, EOFError) as e:  # gzip.BadGzipFile is an OSError
        raise ValueError(getattr(e, "strerror", None) or str(e) or type(e).__name__) from None
    if path.name.removesuffix(".gz").endswith("msgpack"):
        try:
            return msgspec.msgpack.decode(data)
        except RecursionError:  # the JSON decoders below have a deep mode; msgspec has none
            raise ValueError("nested deeper than msgspec decodes: capture it as .hatchet") from None
        except msgspec.DecodeError as e:
            raise ValueError(f"not valid MessagePack: {' '.join(str(e).split())[:200]}") from None
    try:
        return msgspec.json.decode(data)
    except (msgspec.DecodeError, RecursionError) as e:  # the standard library's rules decide
        try:
            return decode(data.decode("utf-8"), deep=isinstance(e, RecursionError))
        except UnicodeDecodeError:
            raise ValueError("not UTF-8 text") from None


def decode(text: str, deep: bool) -> object:
    """JSON text, its documents joined where there are several (one for each stream a CUDA
    graph used); deep: by the pure-Python decoder, off the C stack in Python 3.11+."""
    decoder, at, docs, limit = json.JSONDecoder(), 0, [], sys.getrecursionlimit()
    if deep:
        decoder.scan_once = json.scanner.py_make_scanner(decoder)
        sys.setrecursionlimit(DEEP)
    try:
        while (at := json.decoder.WHITESPACE.match(text, at).end()) < len(text) or not docs:
            doc, at = decoder.raw_decode(text, at)
            docs.append(doc)
    except RecursionError:  # a document after the first, deeper than the C decoder goes
        if deep:
            raise ValueError(f"not valid JSON: nested deeper than {DEEP} levels") from None
        return decode(text, deep=True)
    except ValueError as e:
        raise ValueError(f"not valid JSON: {' '.join(str(e).split())[:200]}") from None
    finally:
        sys.setrecursionlimit(limit)
    return docs[0] if len(docs) == 1 else joined(docs)


def joined(docs: list) -> dict:
    """One trace of several documents' events, each document's on the first's clock where
    both say where theirs starts (baseTimeNanoseconds, ns since the epoch)."""
    if not all(isinstance(d, dict) and isinstance(d.get("traceEvents"), list) for d in docs):
        raise ValueError("not a Proton trace: several documents, not all traces")
    base, events = epoch_ns(docs[0]), []
    for doc in docs:
        shift = epoch_ns(doc)
        shift = (shift - base) / 1e3 if None not in (base, shift) else 0.0
        for e in doc["traceEvents"]:
            if shift and isinstance(e, dict) and type(e.get("ts")) in (int, float):
                e = {**e, "ts": e["ts"] + shift}
            events.append(e)
    return {"traceEvents": events, "baseTimeNanoseconds": base}


def records(found: Found, unread: list) -> dict:
    """Each provenance.json found, by its folder, its keys picked; one unread named in unread."""
    out = {}
    for path in found.provenance:
        try:
            record = json.loads(path.read_bytes())
            out[path.parent] = {key: record.get(key) for key in PROVENANCE}
        except (OSError, ValueError, AttributeError) as e:  # AttributeError: no object
            unread.append({"file": str(path), "why": f"not a provenance record: {str(e)[:100]}"})
    return out


def record_of(path: Path, records: dict) -> dict | None:
    """The provenance of path's run: the record in its folder or the nearest one above."""
    return next((records[f] for f in [path.parent, *path.parents] if f in records), None)


def write_output(path: str | Path, data: bytes | str, inputs: set = frozenset()) -> None:
    """Writes data to path as docs/summary.md's -o says; refuses any of inputs (real paths)
    and a path that names no file."""
    data = data if isinstance(data, bytes) else data.encode("utf-8", "backslashreplace")
    path = os.fspath(path)
    if not path or path.endswith("/") or os.path.isdir(path):
        raise Refused(f"{format_path(path)!r} names no file to write")
    target = Path(os.path.realpath(path))
    if str(target) in inputs:
        raise Refused(f"{format_path(path)} is one of the inputs; not written over")
    if os.path.exists(path) and not os.path.isfile(path):  # /dev/stdout to a pipe, say
        Path(path).write_bytes(data)
        return
    if not target.parent.is_dir():
        raise Refused(f"no folder {format_path(target.parent)} to write in")
    import tempfile  # here: most runs write no file

    fd, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name[:32]}.")
    try:
        os.umask(umask := os.umask(0))  # the only way to read it
        os.fchmod(fd, 0o666 & ~umask)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(temporary, target)
    except BaseException:  # Ctrl-C included: nothing left behind
        os.unlink(temporary)
        raise


def emit(data: bytes, status: int) -> int:
    """Writes data to stdout and returns status; OSError where stdout cannot take it
    (closed, full), which then takes nothing more."""
    try:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
    except (AttributeError, OSError, ValueError) as e:  # stdout None, closed or gone
        if sys.stdout is not None:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise OSError(f"cannot write to stdout: {getattr(e, 'strerror', None) or e}") from None
    return status
