"""The raw text of a dataset, the part of prepare its declaration chooses (``datasets/``):
downloads (resumable, verified before they take their final name), plain or gzipped text read
as bytes split on ``\\n`` only, and the local text of one pair (SOURCE=local or multi30k).
The datasets' own download functions are made of these; ``prepare`` does the rest, the same
for every dataset. Below the settings: ``cfg`` is a ``settings.Settings``."""

import gzip
import http.client
import os
import tarfile
import time
import urllib.error
import urllib.request
import zlib
from typing import Iterable, Iterator, List, NamedTuple, Optional, Tuple

from .. import atomic_open
from .errors import SettingError
from ...storage.directories import building, make_dirs, publish
from ...storage.fileio import NotRegularFile, extract_tar, move, open_no_follow, open_regular

DOWNLOAD_ATTEMPTS = 5
RETRY_DELAY_S = 10
PROGRESS_S = 30
SPLITS = ("train", "valid", "test")


class PrepareError(SettingError):
    """Input the prepare step cannot use: one line, saying what to do (exit status 2)."""


# ---- downloads --------------------------------------------------------------------------------

def fetch(url: str, dest: str, say=print) -> str:
    """DEST downloaded from URL once: into DEST.part (resumed where a server allows ranges),
    checked (a .tgz / .tar.gz must list, a .gz must decompress), then renamed to DEST."""
    if os.path.isfile(dest):
        say(f"have {os.path.basename(dest)}")
        return dest
    make_dirs(os.path.dirname(dest))
    part = dest + ".part"
    for attempt in range(1, DOWNLOAD_ATTEMPTS + 1):
        failure, retry = _download(url, part, say)
        if failure is None:
            break
        if not retry or attempt == DOWNLOAD_ATTEMPTS:
            raise PrepareError(f"download of {url} failed ({failure}); run again to resume, or "
                               f"download it yourself to {dest}")
        say(f"download of {url} failed ({failure}); trying again in {RETRY_DELAY_S} s")
        time.sleep(RETRY_DELAY_S)
    _verify(part)
    move(part, dest)
    return dest


def _download(url: str, part: str, say) -> Tuple[Optional[str], bool]:
    """URL into PART from where PART ends; (None, _) when complete, else (what failed, whether
    trying again may help). A progress line every PROGRESS_S seconds."""
    have = os.path.getsize(part) if os.path.isfile(part) else 0
    request = urllib.request.Request(url, headers={"Range": f"bytes={have}-"} if have else {})
    say(f"downloading {url}" + (f" (resuming at {have:,} bytes)" if have else ""))
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            resumed = have and response.status == 206
            total = int(response.headers.get("Content-Length") or 0) + (have if resumed else 0)
            with open_no_follow(part, "ab" if resumed else "wb") as out:
                shown = time.monotonic()
                while True:
                    block = response.read(1 << 20)
                    if not block:
                        return None, False
                    out.write(block)
                    if time.monotonic() - shown > PROGRESS_S:
                        shown = time.monotonic()
                        say(f"  {out.tell() / 1e6:,.0f} of {total / 1e6:,.0f} MB")
    except urllib.error.HTTPError as err:
        if err.code == 416 and have:  # the range starts at the end: the part is complete
            return None, False
        # a missing file (4xx) does not come back on retrying
        return f"HTTP {err.code} {err.reason}", not 400 <= err.code < 500
    except (urllib.error.URLError, http.client.HTTPException, ConnectionError, TimeoutError) as err:
        return str(getattr(err, "reason", err)), True


def _verify(path: str) -> None:
    try:
        if path.endswith((".tgz.part", ".tar.gz.part")):
            with tarfile.open(path, "r:gz") as archive:
                archive.getmembers()
        elif path.endswith(".gz.part"):
            with gzip.open(path) as stream:
                while stream.read(1 << 20):
                    pass
    except (tarfile.TarError, OSError, EOFError) as err:
        raise PrepareError(f"{path} is not a valid archive ({err}); delete it and run again")


def extract(archive: str, directory: str, say=print) -> str:
    """ARCHIVE unpacked once into DIRECTORY (its .done marks a complete extraction); members
    that would land outside it (absolute paths, .., links out) are refused by tarfile's data
    filter."""
    if not os.path.isfile(os.path.join(directory, ".done")):
        say(f"unpacking {os.path.basename(archive)}")
        with building(directory) as tmp:
            try:
                extract_tar(archive, tmp)
            except tarfile.FilterError as err:
                raise PrepareError(f"{archive}: {err}; the archive is not what the recipe expects")
            publish(tmp, directory)
    return directory


# ---- text -------------------------------------------------------------------------------------

def read_lines(path: str, limit: int = 0) -> Iterator[bytes]:
    """The lines of PATH (plain or .gz) as bytes ending in b"\\n", split on \\n only; the first
    LIMIT of them when LIMIT > 0. PATH must be a regular file (a FIFO would block prepare)."""
    try:
        with open_regular(path, "rb") as raw, \
                (gzip.GzipFile(fileobj=raw) if path.endswith(".gz") else raw) as stream:
            yield from first((line if line.endswith(b"\n") else line + b"\n"
                              for line in stream), limit)
    except NotRegularFile as err:
        raise PrepareError(f"{err}, holding the text") from None
    except (gzip.BadGzipFile, EOFError, zlib.error) as err:  # not gzip, truncated, corrupt
        raise PrepareError(f"{path} is not a complete gzip file ({err}); download or copy it "
                           f"again") from None


def first(lines: Iterable[bytes], limit: int) -> Iterator[bytes]:
    """The first LIMIT of LINES (all of them when LIMIT is 0)."""
    for number, line in enumerate(lines, 1):
        if 0 < limit < number:
            return
        yield line


def write_lines(path: str, lines: Iterable[bytes]) -> int:
    """LINES into PATH; returns how many."""
    count = 0
    with atomic_open(path, "wb") as out:
        for count, line in enumerate(lines, 1):
            out.write(line)
    return count


def count_lines(path: str) -> int:
    return sum(1 for _ in read_lines(path))


def find_local(directory: str, name: str) -> Optional[str]:
    """DIRECTORY/NAME or DIRECTORY/NAME.gz, whichever exists; both is refused: prepare would
    read one and leave the other unread, and which one is meant is the user's to say."""
    found = [os.path.join(directory, candidate) for candidate in (name, name + ".gz")
             if os.path.exists(os.path.join(directory, candidate))]
    if len(found) == 2:
        raise PrepareError(f"both {found[0]} and {found[1]} exist: one text, two files; remove "
                           "or rename the one prepare should not read")
    return found[0] if found else None


class LocalText(NamedTuple):
    """One file of the user's text and what prepare makes of it."""
    split: str
    pair: str  # SRC-TGT, as the raw text names it
    lang: str
    path: str  # the user's file
    limit: int  # its first LIMIT lines (0: all)


def check_distinct(files: List[LocalText]) -> None:
    """No file of the user's text serves in two roles (two splits, or both languages): the same
    file (by device and inode, through any link or name) as train and test would score the
    model on what it trained on, as source and target would train a copy task. One file in one
    role for several pairs is what a multi-way corpus is (train.en, the English side of de-en
    and fr-en alike)."""
    seen = {}
    for text in files:
        stat = os.stat(text.path)
        key = (stat.st_dev, stat.st_ino)
        if key in seen and (seen[key].split, seen[key].lang) != (text.split, text.lang):
            first = seen[key]
            same = ("the same file" if first.path == text.path
                    else f"the same file as {first.path}")
            raise PrepareError(f"{text.path} is {same}, read as both the {first.split} text "
                               f"of {first.lang} ({first.pair}) and the {text.split} text of "
                               f"{text.lang}: give each split and language its own file")
        seen[key] = text


def copy_local(files: List[LocalText], out: str) -> None:
    """FILES (``check_distinct``) into OUT/SPLIT.PAIR.LANG, each split of a pair checked as it
    is copied: both sides non-empty and of the same number of lines, an error naming the
    user's files (the copies are temporaries, gone when the error is read)."""
    check_distinct(files)
    counts = {}
    for text in files:
        count = write_lines(f"{out}/{text.split}.{text.pair}.{text.lang}",
                            read_lines(text.path, text.limit))
        if count == 0:
            raise PrepareError(f"{text.path} is empty: the {text.split} text of {text.lang} "
                               f"({text.pair}) needs at least one line")
        other = counts.setdefault((text.split, text.pair), (text, count))
        if other[0] is not text and other[1] != count:
            kept = (f" (the first {text.split.upper()}_LINES={text.limit} kept)" if text.limit
                    else "")
            raise PrepareError(f"{other[0].path} and {text.path} differ in length ({other[1]} "
                               f"and {count} lines{kept}): not line-aligned; the {text.split} "
                               "text of both languages must have a line each for each pair")


def split_limits(cfg):
    """(split, file stem of SOURCE=local, lines to keep) for train, valid and test."""
    return [(split, getattr(cfg.text.data, f"local_{split}"), getattr(cfg.data, f"{split}_lines"))
            for split in SPLITS]


def local_files(cfg, src: str, tgt: str) -> List[LocalText]:
    """The local text of SRC-TGT: each split from PREFIX.SRC and PREFIX.TGT, plain or .gz,
    PREFIX its TRAIN_TEXT / VALID_TEXT / TEST_TEXT when set, else LOCAL_DIR/LOCAL_TRAIN
    (LOCAL_VALID, LOCAL_TEST); a missing one, or one file in two places, is refused."""
    files = []
    for split, stem, limit in split_limits(cfg):
        prefix = cfg.get(f"{split.upper()}_TEXT") or os.path.join(local_dir(cfg), stem)
        for lang in (src, tgt):
            found = find_local(os.path.dirname(prefix), f"{os.path.basename(prefix)}.{lang}")
            if found is None:
                raise PrepareError(f"{prefix}.{lang}[.gz] not found: set {split.upper()}_TEXT "
                                   f"to the path of the {split} text without its .{lang}, or "
                                   f"LOCAL_DIR and LOCAL_{split.upper()} to its directory and "
                                   "file stem")
            files.append(LocalText(split, f"{src}-{tgt}", lang, found, limit))
    check_distinct(files)
    return files


def local_pair(cfg, src: str, tgt: str, out: str) -> None:
    """Local text of SRC-TGT (``local_files``) into OUT/{train,valid,test}.SRC-TGT.{SRC,TGT}."""
    copy_local(local_files(cfg, src, tgt), out)


def check_inputs(cfg) -> None:
    """The local text the raw-text step will read is there (SOURCE=local), or PrepareError:
    prepare calls this before it creates anything, so that a missing input leaves nothing."""
    if cfg.text.data.source != "local":
        return
    if cfg.declaration.check_local:  # its raw_text reads other local text than one pair's
        cfg.declaration.check_local(cfg)
    else:
        local_files(cfg, cfg.text.data.src, cfg.text.data.tgt)


def local_dir(cfg) -> str:
    directory = cfg.optional.data.local_dir
    if not directory or not os.path.isdir(directory):
        raise PrepareError(f"SOURCE=local needs LOCAL_DIR, a directory of text files (now: "
                           f"{directory or 'unset'}), or TRAIN_TEXT, VALID_TEXT and TEST_TEXT, "
                           "the paths of the text without its .SRC / .TGT; or SOURCE=multi30k "
                           "for the shipped corpus")
    return directory


def check_aligned(directory: str, pairs: List[str]) -> None:
    """Every split of every pair is there, non-empty and line-aligned (counted as cleaning
    counts: on \\n, a last line without one is a line)."""
    for pair in pairs:
        src, tgt = pair.split("-")
        for split in SPLITS:
            a, b = (f"{directory}/{split}.{pair}.{lang}" for lang in (src, tgt))
            if not (os.path.getsize(a) and os.path.getsize(b)):
                raise PrepareError(f"{a} or {b} is empty")
            if count_lines(a) != count_lines(b):
                raise PrepareError(f"{a} and {b} differ in length ({count_lines(a)} and "
                                   f"{count_lines(b)} lines): not line-aligned")


# ---- raw text of each dataset -----------------------------------------------------------------

def one_pair(download=None):
    """The raw-text function of a dataset of one pair SRC-TGT (``Dataset.raw_text``):
    SOURCE=download through DOWNLOAD(cfg, src, tgt, out, say), the dataset's own; otherwise
    the local text (SOURCE=local, or the shipped Multi30k)."""
    def raw_text(cfg, out: str, say) -> List[str]:
        src, tgt = cfg.text.data.src, cfg.text.data.tgt
        if cfg.text.data.source == "download":
            download(cfg, src, tgt, out, say)
        else:
            local_pair(cfg, src, tgt, out)
        return [f"{src}-{tgt}"]
    return raw_text
