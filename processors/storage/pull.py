"""Model repository pull: the step a triton replica runs before ``tritonserver`` starts.

The triton processor (``openeas processor pull`` and ``openeas processor run``) calls
:func:`pull`. For ``oss://`` it lists the prefix, fetches files in parallel, checks each
against OSS's CRC64 (or the ETag's MD5), links files unchanged since the last pull instead of
fetching them, and swaps the finished tree into place atomically. A big file comes in parts,
each checked and kept to resume an interrupted pull (:mod:`~processors.storage.partial`),
read by ranged streams that go on from part to part (:mod:`~processors.storage.runs`): one
alone where it keeps a CPU busy, more where one waits on the network; a small one
(:func:`~processors.storage.plan.fetched_whole`) in one GET, read whole and written straight
into the tree, with only as many in flight as OSS's latency needs
(:mod:`~processors.storage.throttle`), and many of them shared with a second process
(:mod:`~processors.storage.helper`). For a local URI it copies the tree the same way (the
processor normally uses a local repository in place, see
:func:`processors.storage.uri.resolve_local`).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import processors.storage.helper as helper
from processors.progress import Meter, Sink
from processors.storage.buffers import page_aligned
from processors.storage.check import check
from processors.storage.crc64 import Crc64, checksum
from processors.storage.crew import Crew, Task
from processors.storage.errors import PermanentStorageError, TemporaryStorageError
from processors.storage.manifest import Entry, Manifest
from processors.storage.node_cache import NodeCache
from processors.storage.oss import ObjectBody, OssBucket, RemoteObject
from processors.storage.partial import Partial
from processors.storage.plan import (
    LocalStat,
    RemoteFile,
    fetched_whole,
    file_part_size,
    plan,
    remote_files,
)
from processors.storage.retry import Backoff
from processors.storage.runs import Claims
from processors.storage.staging import Workspace
from processors.storage.throttle import StreamProbe, Throttle, stream_count
from processors.storage.uri import LocalLocation, OssLocation, parse_uri

BACKOFF = Backoff()  # module-level so tests can shorten the waits
_CHUNK = 1 << 20  # bytes read per call: bounds memory at workers x 1 MiB
PROGRESS_INTERVAL = 0.5  # seconds between progress reports (module-level for tests)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PullReport:
    dest: Path
    files: int
    bytes_downloaded: int  # fetched (or copied, for a local URI) by this pull
    bytes_reused: int  # linked from the previous copy or resumed from an interrupted pull
    seconds: float
    bytes_from_cache: int = 0  # taken from the node's model cache instead of OSS


def pull(
    uri: str,
    dest: Path,
    *,
    endpoint: str | None = None,
    workers: int = 8,
    part_size: int | None = None,
    progress: Sink | None = None,
    node_cache: NodeCache | None = None,
) -> PullReport:
    """Make ``dest`` an exact, verified copy of the repository at ``uri``.

    ``endpoint`` overrides ``OSS_ENDPOINT`` (the service's ``oss_endpoint``). Raises
    :class:`~processors.storage.errors.PermanentStorageError` when the user must fix something
    and :class:`~processors.storage.errors.TemporaryStorageError` when a later retry may work.
    ``progress`` hears how far an ``oss://`` pull is, at most twice a second and at the end.
    ``node_cache``: asked for each file before OSS, and offered what came from OSS.
    ``part_size``: the size of a big file's parts (each checked, and kept for a resumed
    pull; where streams may start); by default its share of the
    ``workers``, 8-64 MiB (:func:`~processors.storage.plan.file_part_size`).
    """
    if workers < 1 or (part_size is not None and part_size < 1):
        raise ValueError(f"workers and part_size must be positive, not {workers}, {part_size}")
    started = time.monotonic()
    location = parse_uri(uri)
    dest = Path(os.path.abspath(dest))
    bucket = (
        OssBucket(location, endpoint=endpoint, pool_size=workers)
        if isinstance(location, OssLocation)
        else None
    )
    with Workspace(dest).locked() as work:
        tree = work.new_tree()
        try:
            cached = 0
            if bucket is None:
                assert isinstance(location, LocalLocation)
                files, downloaded, reused = _copy_local(location, work, tree)
            else:
                sink = progress or _ignore
                files, downloaded, reused, cached = _pull_oss(
                    bucket, work, tree, workers, part_size, sink, node_cache
                )
            work.commit(tree)
        except OSError as e:  # network errors were translated at the OSS boundary: this is disk
            raise PermanentStorageError(f"cannot write the repository beside {dest}: {e}") from e
        finally:
            shutil.rmtree(tree, ignore_errors=True)
    report = PullReport(dest, files, downloaded, reused, time.monotonic() - started, cached)
    log.info(
        "pulled %s into %s: %d files, %d bytes downloaded, %d reused, %d from the node "
        "cache, %.2fs",
        location,
        dest,
        files,
        downloaded,
        reused,
        cached,
        report.seconds,
    )
    return report


def _ignore(_progress: object) -> None:
    pass


def _pull_oss(
    bucket: OssBucket,
    work: Workspace,
    tree: Path,
    workers: int,
    part_size: int | None,
    sink: Sink,
    node_cache: NodeCache | None,
) -> tuple[int, int, int, int]:
    files = remote_files(bucket.location, _list(bucket))
    previous = Manifest.load(work.dest)
    entries = previous.files if previous else {}
    todo = plan(files, entries, _local_stats(work.dest, entries))
    hits = _from_cache(node_cache, todo.fetch, work.partials, workers)
    cached = sum(f.size for f in todo.fetch if f.path in hits)
    whole: list[RemoteFile] = []
    partials: list[Partial] = []
    for f in todo.fetch:
        if f.path in hits:
            continue
        size = part_size or file_part_size(f.size, workers)
        if fetched_whole(f.size, size):
            whole.append(f)
        else:
            partials.append(Partial(work.partials, f, size))
    log.info(
        "%s: %d files, %d to fetch (%d bytes), %d unchanged",
        bucket.location,
        len(files),
        len(todo.fetch),
        sum(f.size for f in todo.fetch),
        len(todo.reuse),
    )
    reused = sum(f.size for f in todo.reuse) + sum(p.resumed_bytes for p in partials)
    meter = Meter(
        sink,
        files_total=len(files),
        bytes_total=sum(f.size for f in files),
        files_done=len(files) - len(partials) - len(whole),
        bytes_done=reused + cached,
        interval=PROGRESS_INTERVAL,
    )
    crcs: dict[str, int] = {f.path: entries[f.path].crc for f in todo.reuse}
    mtimes: dict[str, int] = {}  # of the files written whole, known without a stat
    made: set[Path] = set()
    for f in todo.reuse:
        _place(work.dest / f.path, tree / f.path, made)
    for path, (data, crc) in hits.items():
        crcs[path] = crc
        _place(data, tree / path, made)

    def finish(p: Partial) -> None:
        # In the worker that fetched the file's last part: the per-file tail (a stat, the
        # CRC combine, a link) runs in parallel too, not file after file at the end.
        crcs[p.file.path] = p.verify()
        _place(p.data, tree / p.file.path, made)

    def fetched(f: RemoteFile, crc: int, mtime_ns: int) -> None:
        crcs[f.path], mtimes[f.path] = crc, mtime_ns
        meter.add(f.size, files=1)

    for p in partials:
        if not p.pending:  # empty, or every part kept from an interrupted pull
            p.prepare()
            finish(p)
    streams = functools.partial(_Streams, bucket, partials, workers, meter, finish)
    _fetch(bucket, tree, streams, whole, workers, made, fetched)
    if node_cache is not None:
        offered = [(p.file, p.data, crcs[p.file.path]) for p in partials]
        offered += [(f, tree / f.path, crcs[f.path]) for f in whole]
        _offer(node_cache, offered, workers)
    manifest = {f.path: _entry(f, crcs[f.path], tree, mtimes.get(f.path)) for f in files}
    Manifest(str(bucket.location), manifest).save(tree)
    meter.finish()
    return len(files), meter.fetched, reused, cached


def _fetch(
    bucket: OssBucket,
    tree: Path,
    streams: Callable[[Crew], _Streams],
    whole: list[RemoteFile],
    workers: int,
    made: set[Path],
    fetched: Callable[[RemoteFile, int, int], None],
) -> None:
    """Fetch the pending parts (biggest files first, so that their parts are not the tail)
    and the small files: half of these in a helper process when :func:`helper.wanted`."""
    mine = sorted(whole, key=lambda f: -f.size)
    limit = workers  # small-file GETs in flight in this process, at most
    other: helper.Helper | None = None
    if helper.wanted(len(mine), workers, helper.cpus(), threading.active_count()):
        # Every other file (biggest first, so the halves weigh alike), with half the workers.
        mine, theirs, share = mine[0::2], mine[1::2], workers // 2
        log.info("fetching %d of %d small files in a second process", len(theirs), len(whole))
        other = helper.start(
            lambda report: _fetch_wholes(bucket.copy(share), theirs, tree, share, report)
        )
        limit -= share
    # Threads besides this one; one more when a helper runs: the one reading its reports.
    crew = Crew(workers - 1 + (other is not None))
    try:
        tasks: list[Task] = []
        if other is not None:
            tasks.append(functools.partial(_read_helper, other, theirs, fetched))
        # A worker of each kind to begin with: their throttles start the others.
        for work in (streams(crew), _Wholes(bucket, tree, mine, limit, made, fetched, crew)):
            tasks += [work.task] * min(1, work.workers)
        crew.run(tasks)
    finally:
        if other is not None:
            other.close()


def _from_cache(
    node_cache: NodeCache | None, files: list[RemoteFile], into: Path, workers: int
) -> dict[str, tuple[Path, int]]:
    """Files the node cache had, checked: path -> (local copy, CRC-64)."""
    if node_cache is None or not files:
        return {}

    def one(numbered: tuple[int, RemoteFile]) -> tuple[str, Path, int | None]:
        i, f = numbered
        data = into / f"cached-{i}"
        return f.path, data, node_cache.fetch(f, data)

    with ThreadPoolExecutor(max(1, min(workers, len(files))), "cache-fetch") as pool:
        found = pool.map(one, enumerate(files))
        return {path: (data, crc) for path, data, crc in found if crc is not None}


def _offer(
    node_cache: NodeCache, fetched: list[tuple[RemoteFile, Path, int]], workers: int
) -> None:
    if fetched:
        with ThreadPoolExecutor(max(1, min(workers, len(fetched))), "cache-offer") as pool:
            list(pool.map(lambda item: node_cache.offer(*item), fetched))


def _list(bucket: OssBucket) -> list[RemoteObject]:
    objects: list[RemoteObject] = []
    token: str | None = ""
    while token is not None:
        page, token = BACKOFF.run(functools.partial(bucket.list_page, token))
        objects.extend(page)
    return objects


class _Stopped(Exception):
    """Another part failed: this one gives up quietly."""


class _Streams:
    """The big files' pending parts, fetched by ranged streams that each read run after run
    of parts (:class:`~processors.storage.runs.Claims`): the first alone, then as many as
    its reads call for (:func:`~processors.storage.throttle.stream_count`), each a thread of
    ``crew`` running :meth:`task` (the throttle starts all but the first, up to
    :attr:`workers`); a file whose last part is in is finished at once (and the meter
    counts it)."""

    def __init__(
        self,
        bucket: OssBucket,
        partials: list[Partial],
        workers: int,
        meter: Meter,
        finish: Callable[[Partial], None],
        crew: Crew,
    ) -> None:
        self._bucket = bucket
        # Biggest first: Claims starts the first stream on the first of the largest runs.
        self._partials = sorted(partials, key=lambda p: -p.file.size)
        self._claims = Claims(
            [p.pending for p in self._partials], [p.part_size for p in self._partials]
        )
        self._left = [len(p.pending) for p in self._partials]
        self.workers = min(workers, sum(self._left))
        self._throttle = Throttle(
            self.workers,
            stream_count,
            probes=1,
            warm_up=0,
            widened=functools.partial(crew.start, self.task),
        )
        self._lock = threading.Lock()
        self._meter = meter
        self._finish = finish

    def task(self, stop: threading.Event) -> None:
        with self._throttle.turn() as granted:
            buffer: memoryview | None = None  # read into, checksummed, written from
            probe = StreamProbe(self._throttle, self._claims.outlook)
            while granted and not stop.is_set() and (where := self._claims.begin()) is not None:
                buffer = buffer or page_aligned(_CHUNK)  # not for a turn that ends
                try:
                    self._stream(*where, buffer, probe, stop)
                except _Stopped:
                    return
            self._throttle.close()  # every part is taken: no stream is to start

    def _stream(
        self,
        file: int,
        index: int,
        buffer: memoryview,
        probe: StreamProbe,
        stop: threading.Event,
    ) -> None:
        """Read part ``index`` of file ``file`` and on into the next while no other stream
        has taken it, in one GET (more after a broken connection: each retry resumes at the
        first byte not yet written, with the part's CRC carried over)."""
        partial = self._partials[file]
        key, etag, ranges = partial.file.key, partial.file.etag, partial.ranges
        position = ranges[index][0]
        crc = Crc64()
        body: ObjectBody | None = None
        first = end = 0  # of the GET's range

        def read_part() -> None:
            nonlocal body, first, end, position
            if body is None:
                first, end = position, ranges[self._claims.reach(file, index)][1]
                with probe.request():
                    body = self._bucket.open_range(key, first, end, etag)
                partial.note_object_crc(body.object_crc)
            part_end = ranges[index][1]
            try:
                while position <= part_end:
                    if stop.is_set():
                        raise _Stopped
                    got = body.readinto(buffer[: min(len(buffer), part_end - position + 1)])
                    if not got:
                        raise _closed_early(
                            self._bucket, partial.file, position - first, end - first + 1
                        )
                    chunk = buffer[:got]
                    _write_at(fd, chunk, position, partial.data)
                    crc.update(chunk)
                    position += got
                    self._meter.add(got)
                    probe.read(got)
            except BaseException:
                body.close()
                body = None
                raise

        partial.prepare()
        fd = os.open(partial.data, os.O_WRONLY)
        try:
            while True:
                BACKOFF.run(read_part, stop)
                assert body is not None
                partial.record(index, crc.value, body.object_crc)
                self._part_done(file)
                if position > end or not self._claims.advance(file, index + 1):
                    self._claims.end(file, index)
                    return  # the rest, if any, is another stream's: hang up on it
                index, crc = index + 1, Crc64()
        finally:
            if body is not None:
                body.close()
            os.close(fd)

    def _part_done(self, file: int) -> None:
        with self._lock:
            self._left[file] -= 1
            whole = self._left[file] == 0
        if whole:
            self._finish(self._partials[file])
            self._meter.file_done()


class _Wholes:
    """Small files to fetch into ``tree`` (:func:`_fetch_whole`) by up to :attr:`workers`
    threads of ``crew``, each taking file after file (:meth:`task`) while a
    :class:`~processors.storage.throttle.Throttle` lets it (and starting all but the first
    as it widens); ``fetched`` hears each one."""

    def __init__(
        self,
        bucket: OssBucket,
        tree: Path,
        files: list[RemoteFile],
        workers: int,
        made: set[Path],
        fetched: Callable[[RemoteFile, int, int], None],
        crew: Crew,
    ) -> None:
        self._bucket = bucket
        self._tree = tree
        self._files = iter(files)  # next() is atomic: each file goes to one worker
        self.workers = min(workers, len(files))
        self._throttle = Throttle(self.workers, widened=functools.partial(crew.start, self.task))
        self._made = made
        self._fetched = fetched

    def task(self, stop: threading.Event) -> None:
        with self._throttle.turn() as granted:
            while granted and not stop.is_set() and (file := next(self._files, None)) is not None:
                target = self._tree / file.path
                _make_parent(target, self._made)
                with self._throttle.timed():
                    crc, mtime_ns = _fetch_whole(self._bucket, file, target, stop)
                self._fetched(file, crc, mtime_ns)
            self._throttle.close()  # every file is taken


def _fetch_wholes(
    bucket: OssBucket, files: list[RemoteFile], tree: Path, workers: int, report: helper.Report
) -> None:
    """In the helper process: fetch ``files``, reporting each by its index in ``files``."""
    index = {id(f): i for i, f in enumerate(files)}
    crew = Crew(workers - 1)
    wholes = _Wholes(
        bucket,
        tree,
        files,
        workers,
        set(),
        lambda f, crc, mtime: report(f"{index[id(f)]} {crc} {mtime}"),
        crew,
    )
    crew.run([wholes.task] * min(1, wholes.workers))


def _read_helper(
    other: helper.Helper,
    files: list[RemoteFile],
    fetched: Callable[[RemoteFile, int, int], None],
    stop: threading.Event,
) -> None:
    """In one of the pull's threads: pass on what the helper process fetched."""
    for line in other.lines(stop):
        i, crc, mtime_ns = map(int, line.split())
        fetched(files[i], crc, mtime_ns)


def _fetch_whole(
    bucket: OssBucket, file: RemoteFile, target: Path, stop: threading.Event
) -> tuple[int, int]:
    """Fetch a small file in one GET, check it, and write it as ``target``: its CRC-64 and
    mtime. A failed check fails the pull (as a part's does), a broken transfer is retried."""

    def attempt() -> tuple[bytes, int | None]:
        if not file.size:
            return b"", None  # nothing to ask OSS for: checked by the ETag (MD5 of nothing)
        with bucket.open_range(file.key, 0, file.size - 1, file.etag) as body:
            data = body.read(file.size)
            while len(data) < file.size and (more := body.read(file.size - len(data))):
                data += more
            if len(data) < file.size:
                raise _closed_early(bucket, file, len(data), file.size)
            return data, body.object_crc

    data, object_crc = BACKOFF.run(attempt, stop)
    crc = checksum(data)
    check(file, crc, object_crc, lambda: hashlib.md5(data, usedforsecurity=False).hexdigest())
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        _write_at(fd, data, 0, target)
        return crc, os.fstat(fd).st_mtime_ns
    finally:
        os.close(fd)


def _closed_early(
    bucket: OssBucket, file: RemoteFile, written: int, length: int
) -> TemporaryStorageError:
    return TemporaryStorageError(
        f"oss://{bucket.location.bucket}/{file.key}: connection ended after {written} of "
        f"{length} bytes"
    )


def _write_at(fd: int, data: bytes | memoryview, offset: int, path: Path) -> None:
    view = memoryview(data)
    try:
        while view:
            n = os.pwrite(fd, view, offset)
            view, offset = view[n:], offset + n
    except OSError as e:
        raise PermanentStorageError(f"cannot write {path}: {e.strerror}") from e


def _local_stats(dest: Path, entries: Mapping[str, Entry]) -> dict[str, LocalStat]:
    stats: dict[str, LocalStat] = {}
    for path in entries:
        try:
            st = (dest / path).lstat()
        except OSError:
            continue
        stats[path] = LocalStat(st.st_size, st.st_mtime_ns)
    return stats


def _make_parent(path: Path, made: set[Path]) -> None:
    """Create ``path``'s directory unless ``made`` (the directories created so far: a
    repository has few, and files many) holds it."""
    if path.parent not in made:
        path.parent.mkdir(parents=True, exist_ok=True)
        made.add(path.parent)


def _place(src: Path, dst: Path, made: set[Path]) -> None:
    """Put ``src``'s content at ``dst``: a hard link (free) where possible, else a copy."""
    _make_parent(dst, made)
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _entry(file: RemoteFile, crc: int, tree: Path, mtime_ns: int | None) -> Entry:
    if mtime_ns is None:
        mtime_ns = (tree / file.path).stat().st_mtime_ns
    return Entry(file.key, file.etag, file.size, crc, mtime_ns)


def _copy_local(location: LocalLocation, work: Workspace, tree: Path) -> tuple[int, int, int]:
    source = location.path
    if not source.is_dir():
        raise PermanentStorageError(f"model repository {source} is not a directory: check the path")
    if source == work.dest:
        raise PermanentStorageError(f"{source} is both source and destination: pick another dest")
    shutil.copytree(source, tree, dirs_exist_ok=True)
    copied = [p for p in tree.rglob("*") if p.is_file()]
    if not copied:
        raise PermanentStorageError(f"model repository {source} is empty: put the models there")
    Manifest(str(source)).save(tree)
    return len(copied), sum(p.stat().st_size for p in copied), 0
