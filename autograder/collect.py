"""Step 2, collect: file an LMS download (folder or zip) as nbgrader submissions.

Every file in the download ends up in exactly one place of the report: filed as a
submission, rejected with a reason (and a copy kept under <course>/rejected/), or
ignored with a reason (system files, unchanged copies of the released code/ and data/
files). A student who handed in anything gets a row, even when nothing of it could be
graded. A student's notebook that is not
in the download is listed as missing (it scores 0).
"""

from __future__ import annotations

import contextlib
import copy
import datetime as dt
import difflib
import functools
import glob
import hashlib
import json
import os
import re
import shlex
import shutil
import stat
import struct
import unicodedata
import zipfile
import zlib
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path, PurePosixPath

import nbformat

from .cells import grade_ids
from .course import ASSIGNMENT, BUNDLE_CONTENT, COURSE_FILES_LIST, AutograderError, Course, build_option, listed

LAYOUTS_HELP = """\
accepted layouts (a notebook is recognised by its release name, e.g. 02-shapes-and-loss.ipynb):
  one folder per student      STUDENT/02-shapes-and-loss.ipynb (any depth below STUDENT/)
    Moodle folders            Full Name_12345_assignsubmission_file_/…   -> student 12345 (Moodle's
                              participant number for the assignment, not the student's ID number)
  student id in the file name STUDENT_02-shapes-and-loss.ipynb (separator _ - . or space)
    a name of its own         1011_mywork.ipynb or 1011.ipynb -> student 1011 when the gradebook or another
                              file or folder of the download names 1011 (then filed as the notebook whose
                              exercises it holds); a name like alice_mywork.ipynb could also be student
                              alice_mywork's, so it needs --student
    Canvas                    name_12345_67890_02-shapes-and-loss-1.ipynb -> student name
                              (also name_late_12345_67890_…; a -N resubmission suffix is allowed; with
                              Canvas and Blackboard, more of the student's own file name may follow the prefix)
    Blackboard                Part II_jdoe_attempt_2026-03-01-10-00-00_02-shapes-and-loss.ipynb -> student jdoe
                              (a user name may hold '_': it is the one on the 'Name:' line of the attempt's
                              .txt receipt, which is then ignored, else a gradebook student the name ends
                              with, else its last '_' part, longer where two users share that part)
    Moodle, without folders   Full Name_12345_assignsubmission_file_02-shapes-and-loss.ipynb -> student 12345
  wrapping folders: a zip or folder that holds just one folder is unwrapped when that folder holds
    several student folders or files named for several students (e.g. submissions/alice/…,
    submissions/gina_123_456_….ipynb). A Moodle student folder is never unwrapped; a folder named
    after the assignment or a notebook (part-ii/) is never a student. When one student's files sit
    below two or more folders (late/10002/…, alice/work/…), the student is the folder that names a
    student of the gradebook (collected before, or added with nbgrader db student); otherwise collect
    refuses to guess: pass --student ID to say whose files they are.
    A folder that holds both notebooks without an id and files named for students is refused.
  --student ID: every file of the download is that student's (refused when its layout gives one
    notebook to several students, as a class download does, or its LMS file or folder names give a
    gradebook student or two or more students other than ID).
Collect refuses, before filing anything, folders that give two students one id ('Zhang San/' and
'Zhang_San/') and a new id that differs from another only in case ('Uma' beside the gradebook's 'uma'),
and, with a roster in the gradebook (students with names), a class download none of whose students it holds.
A copy named like 'NAME (1).ipynb', 'NAME-1.ipynb', 'Copy of NAME.ipynb' or 'NAME-final.ipynb'
counts as NAME; when a student has two files for one notebook the newer one is kept (at the same
time, the one with more answers filled in, then the higher-numbered copy, a '-final' one, the one in
fewer folders) and the other is reported as a duplicate. Canvas files of two users with the same
name are not filed.
A download adds to what was collected before: its notebooks replace the student's earlier files
for them, and notebooks it lacks keep theirs (status 'updated'; the earlier hand-in is kept in
<course>/replaced/<student>/<its time>/). A file older than the one collected before for its
notebook is not filed back over the newer one: the very file collected before and replaced since
(an earlier download collected again) is ignored, any other is rejected; --replace-older files it anyway.
A notebook over 50 MiB is filed with its outputs removed (grading runs the cells again); files
over 512 MiB are not read, only rejected and copied (other files are streamed over 4 MiB).
A hand-in's time is its newest file's: in a zip, the member's UTC time when the zipper recorded
one, else its DOS time read in this machine's time zone (set TZ when the LMS server's differs);
a Blackboard name's time is read in that zone too.
Student ids may contain letters, digits, '.', '_', '@' and '-' (at most 128 characters, Unicode's composed
form: a name macOS spells decomposed is the same student); other characters become '_'.
Rejected files (not a notebook, invalid JSON, wrong name, duplicate) are listed with the reason
in <course>/reports/collect.json and in their student's row of grades.csv (export lists the files of
no student it could tell), and copied to <course>/rejected/; a zip member
that cannot be read (damaged, password-protected, Deflate64) is named with what to do, without a
copy, and the rest of the download is filed. A download with nothing to file, no student the gradebook
knows, and no notebook or file named after the assignment or a notebook is refused: nobody is registered.
System files (__MACOSX, .DS_Store, ...) and the course's own files at their released place (code/, data/)
are ignored."""

STUDENT_ID = re.compile(r"[^\W_][\w.@-]*")
MOODLE_FOLDER = re.compile(r".*_(?P<id>\d+)_assignsubmission_\w*")  # the last id: Moodle appends its own
# a flat download's file names: the id its folders give, whatever the student typed after it
MOODLE_PREFIX = re.compile(r".*?_(?P<id>\d+)_assignsubmission_[^\W_]+(?=_|$)")
CANVAS_PREFIX = re.compile(r"(?P<id>[^_]+?)(?:_late)?_(?P<user>\d+)_\d+")
# Canvas with more of the student's own file name after it: ids of 3+ digits and a letter in the rest, so that an
# id-prefixed name of digit groups (CS_2023_01_07_02-...) is not read as one
CANVAS_PREFIX_OWN_NAME = re.compile(r"(?P<id>[^_]+?)(?:_late)?_(?P<user>\d{3,})_\d{3,}(?=_[^_]*[^\W\d_])")
# the first _attempt_TIME: Blackboard puts the student's own file name after it, which may hold another
BLACKBOARD_PREFIX = re.compile(r"(?P<head>.*?_(?P<id>[^_]+))_attempt_(?P<ts>\d{4}(?:-\d\d){5})")
BLACKBOARD_RECEIPT = re.compile(rf"(?P<prefix>{BLACKBOARD_PREFIX.pattern})\.txt", re.IGNORECASE)  # an attempt's receipt
BLACKBOARD_RECEIPT_USER = re.compile(r"^Name:.*\((?P<user>[^()\s]+)\)\s*$", re.MULTILINE)  # 'Name: Zhang San (zhang_san)'
COPY_FORMS = r"\s*\(\d+\)|-\d+|-copy\d*"  # a browser's 'NAME (1)', an LMS resubmission's 'NAME-1', Jupyter's 'NAME-Copy1'
COPY_SUFFIX = rf"(?:[_\-\s]+final)?(?:{COPY_FORMS})?"  # also a student's 'NAME-final'
COPY_OF = r"(?:copy[_\-\s]+of[_\-\s]+)?"  # Colab and Google Drive name a copy 'Copy of NAME'
SYSTEM_NAMES = {"__MACOSX", ".DS_Store", "Thumbs.db", "desktop.ini", ".ipynb_checkpoints", "__pycache__"}
MAX_NOTEBOOK_BYTES = 50 * 1024 * 1024  # a larger notebook is filed with its outputs removed (grading runs the cells again)
MAX_READ_BYTES = 512 * 1024 * 1024  # a larger file is not read: rejected, with a copy kept
# a file that is no notebook is only compared with the (small) course files and copied when rejected: one larger than
# this is streamed for both, never held in memory (a student's venv or dataset; a zip of zeros that unpacks to GBs)
MAX_HELD_OTHER_BYTES = 4 * 1024 * 1024
# notebooks over MAX_NOTEBOOK_BYTES are held only while the download's held bytes stay under this: a zip of many
# 400 MiB "notebooks" (zeros compress to nothing) could otherwise take all the machine's memory
MAX_HELD_BYTES = 2 * 1024 * 1024 * 1024
TIMESTAMP_FORMAT = "%Y-%m-%d %H:%M:%S.%f UTC"  # what nbgrader writes into timestamp.txt
UNIX_TIME_FIELD, NTFS_TIME_FIELD = 0x5455, 0x000A  # zip extra fields that hold UTC times
# files release writes into the bundle
RELEASE_WRITTEN = ("README.md", "requirements.txt", "constraints.txt", "nbgrader_config.py", COURSE_FILES_LIST)
UNICODE_PATH_FIELD = 0x7075  # Info-ZIP's extra field with the UTF-8 name (version 1, CRC-32 of the stored name, name)
UTF8_NAME_FLAG = 0x800  # general purpose bit 11: the stored name is UTF-8
NTFS_EPOCH = dt.datetime(1601, 1, 1, tzinfo=dt.timezone.utc)


class NotANotebook(ValueError):
    """A file that cannot be read as a Jupyter notebook; the message is the reason."""


@dataclass
class Entry:
    """One file of the download: its path inside the download, bytes and modification time (UTC).

    A notebook over MAX_READ_BYTES (or over MAX_NOTEBOOK_BYTES once the download's read files reach MAX_HELD_BYTES),
    or another file over MAX_HELD_OTHER_BYTES, is not read: data is empty and
    opener() streams it (for the digest and the copy kept).
    A zip member that could not be read has empty data and unreadable saying why.
    """

    path: PurePosixPath
    data: bytes
    mtime: dt.datetime
    opener: object = None
    size: int = -1
    unreadable: str | None = None
    wall_clock: bool = False  # mtime is a zip's DOS time: the zipper's wall clock, read in this machine's zone

    def __post_init__(self):
        if self.size < 0:
            self.size = len(self.data)


@dataclass
class Filed:
    """A file accepted as a student's notebook."""

    entry: Entry
    student: str
    notebook: str
    nb: nbformat.NotebookNode
    note: str = ""
    named: str | None = None  # the notebook its file name gave, when its exercises are another notebook's


@dataclass
class Record:
    """One file that was not filed: rejected (a problem to look at) or ignored (not a submission)."""

    file: str
    reason: str
    student: str | None = None
    copy: str | None = None
    # the very file, when its path may name another one too (a zip can hold one name twice); not saved
    source: Entry | None = field(default=None, repr=False, compare=False)
    damaged: bool = field(default=False, repr=False, compare=False)  # a notebook's name, but its bytes do not read
    time: dt.datetime | None = field(default=None, repr=False, compare=False)  # a damaged file's hand-in time

    def saved(self) -> dict:
        """The record as reports/collect.json keeps it."""
        return {"file": self.file, "reason": self.reason, "student": self.student, "copy": self.copy}


@dataclass
class StudentReport:
    """What collect filed for one student."""

    student: str
    status: str  # new, updated, unchanged, 'no valid notebook', or 'not filed' (NOT_FILED: writing failed)
    notebooks: dict[str, str] = field(default_factory=dict)  # notebook -> file in the download
    missing: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    timestamp: str | None = None
    replaced: str | None = None  # where the hand-in this one replaced was kept
    moved: dict[str, str] = field(default_factory=dict)  # file -> notebook, this collect's files named otherwise
    file_times: dict[str, str] = field(default_factory=dict)  # notebook -> its filed file's time (TIMESTAMP_FORMAT)
    error: str | None = None  # why the notebooks in unfiled could not be written (a full disk: 'OSError: …')
    unfiled: list[str] = field(default_factory=list)  # notebooks of a download not filed yet (see not_filed)
    unanswered: list[str] = field(default_factory=list)  # filed notebooks that are the release's copy, no answer
    # written (unanswered_notebooks): the wrong file, most likely


@dataclass
class CollectReport:
    """The outcome of one collect run (also saved as reports/collect.json)."""

    source: str
    students: dict[str, StudentReport] = field(default_factory=dict)
    rejected: list[Record] = field(default_factory=list)
    ignored: list[Record] = field(default_factory=list)
    unwrapped: list[str] = field(default_factory=list)  # folders above the student level that were dropped
    wall_clock: int = 0  # filed files whose time is a wall-clock time (a zip's DOS time, a Blackboard name's) ...
    zone: str | None = None  # ... read in this zone (local_zone())
    zone_before: str | None = None  # the other zone the last collect that read wall-clock times read them in
    off_roster: list[str] = field(default_factory=list)  # new students filed while the gradebook holds a roster
    dropped: dict[str, int] = field(default_factory=dict)  # {student dropped from the course: their files not filed}
    # {student: (hand-in time, their due date, notebooks whose files are on time)}: late as a whole (late_as_a_whole)
    late_as_a_whole: dict[str, tuple[str, str, list[str]]] = field(default_factory=dict)


# --- reading the download -------------------------------------------------------------

# what zipfile raises for a member it cannot give back: bad CRC or data, a password, an unknown compression
ZIP_MEMBER_ERRORS = (zipfile.BadZipFile, RuntimeError, NotImplementedError, EOFError, zlib.error)


def held_in_memory(name: PurePosixPath, size: int, held: int) -> bool:
    """Whether collect reads a file of size bytes into memory, when held bytes are held already (see the limits)."""
    if name.suffix.lower() != ".ipynb":
        return size <= MAX_HELD_OTHER_BYTES
    return size <= MAX_READ_BYTES and (size <= MAX_NOTEBOOK_BYTES or held + size <= MAX_HELD_BYTES)


def _read_zip(path: Path) -> tuple[list[Entry], list[Record]]:
    """Entries of a zip file; unsafe or oversized members become rejections."""
    entries, rejected = [], []
    try:
        zf = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as exc:
        raise AutograderError(f"{path} is not a readable zip file ({exc})") from None
    zip_time = dt.datetime.fromtimestamp(path.stat().st_mtime, tz=dt.timezone.utc)
    held = 0
    with zf:
        for info in zf.infolist():
            if info.is_dir():
                continue
            name = PurePosixPath(member_name(info).replace("\\", "/"))
            if name.is_absolute() or ".." in name.parts:
                rejected.append(Record(str(name), "unsafe path inside the zip (absolute or with '..'); not extracted"))
                continue
            mtime, wall = zip_member_time(info, zip_time)
            if info.create_system == 3 and stat.S_ISLNK(info.external_attr >> 16):  # zipped with zip -y (Unix)
                try:
                    target = zf.read(info)[:200].decode("utf-8", "replace") if info.file_size <= 4096 else "?"
                except (*ZIP_MEMBER_ERRORS, OSError):  # a damaged or encrypted link: where it pointed is unknown
                    target = "?"
                entries.append(Entry(name, b"", mtime, unreadable=symlink_reason(target), wall_clock=wall))
                continue
            if not held_in_memory(name, info.file_size, held):
                opener = functools.partial(_open_zip_member, path, info)
                entries.append(Entry(name, b"", mtime, opener=opener, size=info.file_size, wall_clock=wall))
                continue
            try:
                data = zf.read(info)
            except (*ZIP_MEMBER_ERRORS, OSError) as exc:
                # rejected in classify, which can still tell whose file it was from its path
                entries.append(Entry(name, b"", mtime, unreadable=f"cannot be read from the zip: {unreadable_member(exc)}",
                                     wall_clock=wall))
                continue
            held += len(data)
            entries.append(Entry(name, data, mtime, wall_clock=wall))
    return entries, rejected


def unreadable_member(exc: Exception) -> str:
    """Why zipfile could not read a member, and what to do about it."""
    text = str(exc)
    if "encrypted" in text or "password" in text:
        return "it is password-protected; ask for it without a password"
    if isinstance(exc, NotImplementedError):
        return ("it is compressed with a method Python's zipfile cannot read (Deflate64, as Windows uses for large "
                "zips, or another); unzip the download with another tool and collect the folder")
    return f"it is damaged ({text}); download it again"


def member_name(info: zipfile.ZipInfo) -> str:
    """A zip member's name as its zipper meant it.

    Flagged UTF-8, or given in an Info-ZIP Unicode Path field, it is that. Otherwise zipfile read it
    as IBM 437, the zip standard's code page, but zippers write their system's code page: UTF-8
    on macOS and Linux, GBK on Windows in a Chinese locale (Explorer's "Compressed folder"), where
    学生/李四 would arrive as mojibake and merge students. The bytes are read as UTF-8 when they are
    that, else as GB18030 (GBK's superset), else left as IBM 437.
    """
    if info.flag_bits & UTF8_NAME_FLAG:
        return info.filename
    raw = info.filename.encode("cp437")
    for tag, data in _extra_fields(info.extra):
        if tag == UNICODE_PATH_FIELD and len(data) > 5 and data[0] == 1 and struct.unpack_from("<I", data, 1)[0] == zlib.crc32(raw):
            with contextlib.suppress(UnicodeDecodeError):
                return data[5:].decode("utf-8")
    for encoding in ("utf-8", "gb18030"):
        with contextlib.suppress(UnicodeDecodeError):
            return raw.decode(encoding)
    return info.filename


def zip_member_time(info: zipfile.ZipInfo, fallback: dt.datetime) -> tuple[dt.datetime, bool]:
    """(when a zip member was last changed, in UTC; whether that was read from the zipper's wall clock).

    The Unix or NTFS extra field when the zipper wrote one (both are UTC); else the DOS time,
    which is the zipper's wall clock, read as this machine's local time (TZ); fallback when
    that is no date (some zippers write zeros).
    """
    for tag, data in _extra_fields(info.extra):
        try:
            if tag == UNIX_TIME_FIELD and len(data) >= 5 and data[0] & 1:
                return dt.datetime.fromtimestamp(struct.unpack_from("<i", data, 1)[0], tz=dt.timezone.utc), False
            if tag == NTFS_TIME_FIELD:
                for attr, value in _extra_fields(data[4:]):  # after 4 reserved bytes; attribute 1: mtime, atime, ctime
                    if attr == 1 and len(value) >= 8:
                        return NTFS_EPOCH + dt.timedelta(microseconds=struct.unpack_from("<Q", value)[0] // 10), False
        except (OverflowError, OSError, ValueError):
            continue  # a time no datetime can hold: try the next field, then the DOS time
    try:
        return dt.datetime(*info.date_time).astimezone(dt.timezone.utc), True
    except (OverflowError, OSError, ValueError):
        return fallback, False


def _extra_fields(extra: bytes) -> list[tuple[int, bytes]]:
    """(tag, data) of each field of a zip extra block (or of an NTFS field's attributes); a cut-off field ends it."""
    fields = []
    while len(extra) >= 4:
        tag, size = struct.unpack_from("<HH", extra)
        if len(extra) < 4 + size:
            break
        fields.append((tag, extra[4:4 + size]))
        extra = extra[4 + size:]
    return fields


@contextlib.contextmanager
def _open_zip_member(path: Path, member: zipfile.ZipInfo):
    """The member of the zip at path, opened for reading (streams a file too large to hold in memory); by its ZipInfo,
    not its name, which a zip may hold twice."""
    with zipfile.ZipFile(path) as zf, zf.open(member) as fh:
        yield fh


def _read_folder(path: Path, files: list[Path] | None = None) -> tuple[list[Entry], list[Record]]:
    """Entries of a folder tree (symlinks are not followed), or of the given files in it."""
    entries, rejected, held = [], [], 0
    for file in files if files is not None else sorted(p for p in path.rglob("*") if p.is_file() or p.is_symlink()):
        rel = PurePosixPath(readable_name(file.relative_to(path).as_posix()))
        if file.is_symlink():  # rejected in classify, which can still tell whose file it was from its path
            entries.append(Entry(rel, b"", dt.datetime.fromtimestamp(file.lstat().st_mtime, tz=dt.timezone.utc),
                                 unreadable=symlink_reason(readable_name(os.readlink(file)))))
            continue
        size = file.stat().st_size
        mtime = dt.datetime.fromtimestamp(file.stat().st_mtime, tz=dt.timezone.utc)
        if not held_in_memory(rel, size, held):
            entries.append(Entry(rel, b"", mtime, opener=functools.partial(open, file, "rb"), size=size))
            continue
        held += size
        entries.append(Entry(rel, file.read_bytes(), mtime))
    return entries, rejected


def symlink_reason(target: str) -> str:
    """Why a symbolic link in a download is not filed."""
    return f"a symbolic link (to {target}), not a file: not followed; hand in the notebook itself"


def readable_name(name: str) -> str:
    """A file name as its writer meant it: a name on disk that is not UTF-8 (a zip unpacked without converting
    Windows' Chinese code page) is read as GB18030, as zip member names are (member_name), else with
    replacement characters; never with the undecodable bytes Python keeps in a str, which cannot be saved."""
    raw = os.fsencode(name)
    for encoding in ("utf-8", "gb18030"):
        with contextlib.suppress(UnicodeDecodeError):
            return raw.decode(encoding)
    return raw.decode("utf-8", "replace")


def _looks_like_zip(path: Path) -> bool:
    """True for a file named .zip or starting with a zip signature (PK), readable or not."""
    if path.suffix.lower() == ".zip":
        return True
    with open(path, "rb") as fh:
        return fh.read(2) == b"PK"


def read_download(path: Path, one_students: bool = False) -> tuple[list[Entry], list[Record]]:
    """All files of a folder or zip download, with unreadable members already rejected; one_students: the download is
    one student's (--student), which may also be a single notebook."""
    if not path.exists():
        raise AutograderError(f"{path} does not exist; expected a folder or a .zip of student notebooks, or one student's "
                              "notebook with --student ID")
    if path.is_dir():
        return _read_folder(path)
    if zipfile.is_zipfile(path):
        return _read_zip(path)
    if _looks_like_zip(path):
        size = path.stat().st_size
        raise AutograderError(f"{path} is a damaged or incomplete zip file ({size} bytes, no zip directory at its end); "
                              "re-download it from the LMS")
    if path.suffix.lower() == ".ipynb" and one_students:  # its file time is the hand-in time, as in a folder
        return _read_folder(path.parent, [path])
    if path.suffix.lower() == ".ipynb":
        raise AutograderError(f"{path} is a single notebook; collect takes a folder or a .zip of a class's hand-ins, or "
                              "one student's notebook with --student ID (their id)")
    if path.suffix.lower() in ARCHIVES:
        raise AutograderError(f"{path} is an archive collect does not open ({path.suffix}); unpack it (e.g. tar -xf, "
                              "7z x) and collect the folder, or give the LMS download's .zip")
    raise AutograderError(f"{path} is neither a folder nor a zip file; expected an LMS download")


def _is_system(path: PurePosixPath) -> bool:
    """Files an OS or Jupyter adds on its own (macOS zip metadata, checkpoints, hidden files)."""
    return any(part in SYSTEM_NAMES or part.startswith(".") for part in path.parts)


# --- names -----------------------------------------------------------------------------

NAME_CHARS = 255  # a file name on a disk has at most 255 bytes; a longer one (only a zip can hold it) is nobody's


def match_notebook(stem: str, notebooks: list[str]) -> tuple[str, str] | None:
    """(notebook, prefix before it) when a file stem names a notebook, longest name first; else None.

    The name may carry a copy's marks: 'Copy of NAME' (Colab, Google Drive), 'NAME-final', 'NAME (1)', 'NAME-1'.
    A stem over NAME_CHARS names none: the patterns below backtrack on long runs of separators (minutes at 16,000).
    """
    if len(stem) > NAME_CHARS:
        return None
    for name in sorted(notebooks, key=len, reverse=True):
        # no prefix is tried first (??), so 'Copy of NAME' is a copy's name, not a student 'Copy of'
        m = re.fullmatch(rf"(?:(?P<prefix>.*?)[_\-\s.]+)??{COPY_OF}{re.escape(name)}{COPY_SUFFIX}", stem,
                         flags=re.IGNORECASE)
        if m:
            return name, (m.group("prefix") or "")
    return None


def is_final(stem: str) -> bool:
    """True for a student's 'NAME-final' / 'NAME_final (1)': the copy its student called final."""
    return len(stem) <= NAME_CHARS and re.search(rf"[_\-\s]+final(?:{COPY_FORMS})?$", stem, flags=re.IGNORECASE) is not None


def copy_number(stem: str) -> int:
    """The N of a browser, LMS or Jupyter copy 'NAME (N)' / 'NAME-N' / 'NAME-CopyN' (0 for the plain name, 1 for
    'NAME-copy')."""
    m = re.search(rf"(?:{COPY_FORMS})$", stem, flags=re.IGNORECASE) if len(stem) <= NAME_CHARS else None
    digits = re.search(r"\d+", m.group(0)) if m else None
    return int(digits.group(0)) if digits else int(m is not None)


def is_assignment_name(name: str, notebooks: list[str]) -> bool:
    """True for a folder named after the assignment or one of its notebooks: never a student id."""
    stem = re.sub(r"\.(ipynb|zip)$", "", name, flags=re.IGNORECASE)
    if re.fullmatch(rf"{re.escape(ASSIGNMENT)}{COPY_SUFFIX}", stem, flags=re.IGNORECASE):
        return True
    hit = match_notebook(stem, notebooks)
    return hit is not None and hit[1] == ""


MAX_ID_CHARS = 128  # nbgrader's student id column (a PostgreSQL gradebook refuses a longer one)
MAX_ID_BYTES = 200  # an id names folders (submitted/ID, a grading job's ID-N-XXXXXXXX): 255 bytes at most on disk


def id_text(text: str) -> str:
    """Free text as an id's characters, in Unicode's composed form (macOS writes José decomposed): invalid characters
    become '_', and none lead or trail ('' when nothing usable is left)."""
    return re.sub(r"[^\w.@-]+", "_", unicodedata.normalize("NFC", text).strip()).strip("_.-")


def sanitize_id(text: str) -> str | None:
    """A student id from free text (see id_text); None when nothing usable is left or the id is too long."""
    cleaned = id_text(text)
    return cleaned if cleaned and not too_long(cleaned) and STUDENT_ID.fullmatch(cleaned) else None


def too_long(student: str) -> bool:
    """True for an id longer than nbgrader's MAX_ID_CHARS characters or the disk's MAX_ID_BYTES bytes of UTF-8
    (100 Chinese characters are 300 bytes: no folder can be named so)."""
    return len(student) > MAX_ID_CHARS or len(student.encode("utf-8")) > MAX_ID_BYTES


def student_from_folder(folder: str) -> str | None:
    """Student id of a per-student folder (Moodle folders give their numeric id)."""
    m = MOODLE_FOLDER.fullmatch(folder)
    return m.group("id") if m else sanitize_id(folder)


def student_from_prefix(prefix: str, blackboard: dict[str, str] | None = None
                        ) -> tuple[str | None, dt.datetime | None, str | None]:
    """(student id, Blackboard time, Canvas person 'name_userid') from the part of a file name before the notebook name.

    An LMS prefix may be followed by more of the name the student gave the file ('..._67890_zhangsan'). A Blackboard
    name's user is blackboard[its ASSIGNMENT_USER head] (see blackboard_users: user names may hold '_'), else the
    last '_' part."""
    if m := MOODLE_PREFIX.match(prefix):
        return m.group("id"), None, None
    if m := re.match(rf"(?:{BLACKBOARD_PREFIX.pattern})(?=_|$)", prefix):
        user = (blackboard or {}).get(m.group("head")) or sanitize_id(m.group("id"))
        return user, blackboard_time(m.group("ts")), None
    if m := CANVAS_PREFIX.fullmatch(prefix) or CANVAS_PREFIX_OWN_NAME.match(prefix):
        student = sanitize_id(m.group("id"))
        return student, None, (f"{m.group('id')}_{m.group('user')}" if student else None)
    return sanitize_id(prefix), None, None


def blackboard_users(entries: list[Entry], known: frozenset[str] | set[str] = frozenset()) -> dict[str, str]:
    """{ASSIGNMENT_USER head: student id} of a download's top-level Blackboard names (ASSIGNMENT_USER_attempt_TIME_FILE).

    Both the assignment and the user name may hold '_', so the user is, in this order: the user name in parentheses
    on the 'Name:' line of the attempt's .txt receipt; the longest '_'-ending of the head that is a student of the
    gradebook (known); the last '_' part, or, where two heads of the download share that, the shortest ending
    that tells them apart (zhang_san and li_san are two students, not one 'san')."""
    heads, users = set(), {}
    for e in entries:
        if len(e.path.parts) != 1 or not (m := re.match(BLACKBOARD_PREFIX, e.path.name)):
            continue
        heads.add(m.group("head"))
        if BLACKBOARD_RECEIPT.fullmatch(e.path.name) and (r := BLACKBOARD_RECEIPT_USER.search(
                e.data[:4096].decode("utf-8", "replace"))) and m.group("head").endswith("_" + r.group("user")):
            users[m.group("head")] = sanitize_id(r.group("user"))

    def ending(head: str, k: int) -> str:
        return "_".join(head.split("_")[-k:])

    for head in heads - set(users):
        parts = head.count("_")  # endings of 1 .. parts '_'-parts leave some assignment name before them
        if found := [e for k in range(parts, 0, -1) if (e := sanitize_id(ending(head, k))) in known]:
            users[head] = found[0]
            continue
        for k in range(1, parts + 1):
            if not any(ending(other, k) == ending(head, k) for other in heads - {head}) or k == parts:
                users[head] = sanitize_id(ending(head, k))
                break
    return {head: user for head, user in users.items() if user}


def blackboard_time(text: str) -> dt.datetime | None:
    """The UTC time of a Blackboard name's 2026-03-01-10-00-00; None when that is no date (the file's own time is used)."""
    try:
        # the LMS server's wall clock, like a zip's DOS time: read in this machine's time zone
        return dt.datetime.strptime(text, "%Y-%m-%d-%H-%M-%S").astimezone(dt.timezone.utc)
    except (OverflowError, OSError, ValueError):
        return None


def own_name_ids(stem: str) -> list[str]:
    """The readings of a file name of its own as a student id, first to try first: the stem as it is (2023-1011 is a
    student number before it is a copy of 2023), the stem without a copy mark ('1011' of '1011 (1)'), and
    number_before_last_word. Digits joined by '-' (10-11) are read only as they are: '-11' is also an LMS copy mark."""
    exact = sanitize_id(stem)
    if dashed_number(stem):
        return [exact] if exact else []
    base = without_copy_mark(stem)
    return [s for s in dict.fromkeys([exact, sanitize_id(base), number_before_last_word(base)]) if s]


def dashed_number(stem: str) -> bool:
    """True for digits joined by '-' (10-11): a student number, or student 10's LMS copy -11; no rule can tell."""
    return re.fullmatch(r"\d+(?:-\d+)+", stem) is not None


def without_copy_mark(stem: str) -> str:
    """stem without a browser's or LMS's copy mark at its end ('1011' of '1011 (1)' or '1011-2')."""
    if len(stem) > NAME_CHARS:
        return stem
    return re.sub(rf"(?:{COPY_FORMS})$", "", stem, flags=re.IGNORECASE) or stem


def number_before_last_word(base: str) -> str | None:
    """The student number before a name's last word ('1011' of '1011_mywork', '2023-1011' of '2023-1011 作业'), or
    None. It needs a digit before and none after the last separator: '10_11' may be student 10_11, and with
    'zhang_san_mywork' no rule can tell student zhang's 'san_mywork' from a new student zhang_san's file."""
    if len(base) > NAME_CHARS:
        return None
    m = re.fullmatch(r"(?P<id>.+?)[_\-\s.]+(?P<rest>[^_\-\s.]+)", base)
    if m and re.search(r"\d", m.group("id")) and not re.search(r"\d", m.group("rest")):
        return sanitize_id(m.group("id"))
    return None


def own_name_owner(stem: str, claimable: frozenset[str] | set[str]) -> str | None:
    """The student a file name of its own gives (see own_name_ids) when that student is in claimable; else None."""
    return next((s for s in own_name_ids(stem) if s in claimable), None)


def lms_prefix(name: str) -> str | None:
    """The Canvas, Blackboard or Moodle prefix ('gina_123_456') a file name starts with, whatever follows; else None."""
    for pattern in (MOODLE_PREFIX, BLACKBOARD_PREFIX, CANVAS_PREFIX):  # Moodle's is the most specific
        if m := re.match(rf"(?:{pattern.pattern})(?=_.)", name):
            return m.group(0)
    return None


def file_owner(name: str, notebooks: list[str], blackboard: dict[str, str] | None = None
               ) -> tuple[str | None, dt.datetime | None, str | None]:
    """(student, Blackboard time, Canvas person) from a file name outside student folders (blackboard: the download's
    Blackboard users, see blackboard_users).

    The Canvas person is 'name_userid': the user id tells two people with the same name apart.
    """
    hit = match_notebook(PurePosixPath(name).stem, notebooks) if name.lower().endswith(".ipynb") else None
    receipt = BLACKBOARD_RECEIPT.fullmatch(name)
    prefix = hit[1] if hit else receipt.group("prefix") if receipt else lms_prefix(name)
    if not prefix:
        return None, None, None
    return student_from_prefix(prefix, blackboard)


def _layout_signals(inner: list[PurePosixPath], notebooks: list[str], bundled: frozenset[str] = frozenset()
                    ) -> tuple[list[str], list[str]]:
    """Why the folder holding inner looks like a wrapper of several students, and why like one student's folder
    (folders named in bundled, the student download's own code/ and data/, are no students)."""
    files = [p.name for p in inner if len(p.parts) == 1]
    folders = sorted({p.parts[0] for p in inner if len(p.parts) > 1} - bundled)
    named = sorted({s for s in (file_owner(f, notebooks)[0] for f in files) if s})
    lms = [f for f in files if lms_prefix(f)]
    plain = [f for f in files if f.lower().endswith(".ipynb") and (hit := match_notebook(PurePosixPath(f).stem, notebooks))
             and not hit[1]]
    assignment = [d for d in folders if is_assignment_name(d, notebooks)]
    others = [d for d in folders if d not in assignment]
    wrapper, student = [], []
    if len(named) >= 2:
        wrapper.append(f"files named for several students ({', '.join(named[:3])}{', …' if len(named) > 3 else ''})")
    elif lms:
        wrapper.append(f"files named by an LMS for a student ({lms[0]})")
    if len(others) >= 2 or any(MOODLE_FOLDER.fullmatch(d) for d in others):
        wrapper.append(f"several student folders ({', '.join(others[:3])}{', …' if len(others) > 3 else ''})")
    if plain:
        student.append(f"a notebook without a student id in its name ({plain[0]})")
    if assignment:
        student.append(f"a folder named after the assignment ({assignment[0]}/)")
    return wrapper, student


def unwrap(entries: list[Entry], notebooks: list[str], known: frozenset[str] = frozenset(),
           bundled: frozenset[str] = frozenset()) -> tuple[list[Entry], list[str]]:
    """Drop the folders above the student level; return (entries, dropped folders). Raise when that is ambiguous.

    Folders that hold only one folder form a chain. A Moodle student folder in the chain is the
    student. Otherwise, when the last folder holds several students' folders or files, the whole
    chain is dropped; else the student is the one folder of the chain not named after the
    assignment or a notebook, or, where there are several such folders, the one that names a
    student in known (see _student_in_chain). Folders named in bundled (the student download's code/
    and data/, which a student may hand back beside the notebooks) are not students.
    """
    real = [e.path for e in entries if not _is_system(e.path)]
    chain: list[str] = []
    while real and all(len(p.parts) > len(chain) + 1 for p in real) and len({p.parts[len(chain)] for p in real}) == 1:
        chain.append(real[0].parts[len(chain)])
    if not chain:
        return entries, []
    moodle = [i for i, name in enumerate(chain) if MOODLE_FOLDER.fullmatch(name)]
    if moodle:
        depth = moodle[0]
    else:
        wrapper, student = _layout_signals([PurePosixPath(*p.parts[len(chain):]) for p in real], notebooks, bundled)
        where = "/".join(chain) + "/"
        if wrapper and student:
            raise AutograderError(f"cannot tell whether {where} is one student's folder or a folder of several students: "
                                  f"it holds {' and '.join(wrapper)}, but also {' and '.join(student)}; "
                                  "when they are one student's files, say whose with `collect PATH --student ID`, "
                                  f"else arrange the download in one of the accepted layouts\n{LAYOUTS_HELP}")
        if wrapper:
            depth = len(chain)
        else:
            usable = [i for i, name in enumerate(chain) if not is_assignment_name(name, notebooks)]
            if len(usable) > 1:
                depth = _student_in_chain(chain, usable, known)
            else:
                depth = usable[0] if usable else len(chain)
    prefix = chain[:depth]
    if not prefix:
        return entries, []
    # replace(): an entry keeps its opener, size and unreadable reason under its shorter path
    out = [replace(e, path=PurePosixPath(*e.path.parts[depth:])) if list(e.path.parts[:depth]) == prefix
           and len(e.path.parts) > depth else e for e in entries]
    return out, ["/".join(prefix) + "/"]


def _student_in_chain(chain: list[str], usable: list[int], known: frozenset[str]) -> int:
    """The index of the student's folder among several candidates of a chain: the one student in known; else raise.

    late/10002/ may be a wrapper around student 10002, and alice/work/ student alice's folder with a
    subfolder: the names alone cannot tell, and a wrong guess files one student's work under another
    id (where a later download with the same subfolder name would replace it).
    """
    named = [i for i in usable if student_from_folder(chain[i]) in known]
    if len(named) == 1:
        return named[0]
    names = ", ".join(f"{chain[i]}/" for i in usable)
    why = ("several of them are students of the gradebook" if named
           else "none of them is a student of the gradebook (collected before, or added with nbgrader db student)")
    raise AutograderError(f"cannot tell which folder of {'/'.join(chain)}/ is the student: {names} (a folder may wrap one "
                          f"student's folder, or a student's folder may hold a subfolder), and {why}; say whose files "
                          f"they are with `collect PATH --student ID`, or arrange the download in one of the "
                          f"accepted layouts\n{LAYOUTS_HELP}")


DAMAGED = "the file is damaged or was not saved by Jupyter"
CELL_TYPES = ("code", "markdown", "raw")


def _cell_problem(cell, number: int) -> str | None:
    """What is wrong with one nbformat-4 cell (numbered from 1 in messages), or None."""
    if not isinstance(cell, dict):
        return f"cell {number} is a JSON {type(cell).__name__}, not an object"
    kind = cell.get("cell_type")
    if kind not in CELL_TYPES:
        return f"cell {number} has cell_type {kind!r}; expected one of {', '.join(CELL_TYPES)}"
    source = cell.get("source")
    if not (isinstance(source, str) or isinstance(source, list) and all(isinstance(s, str) for s in source)):
        return f"{kind} cell {number} has no text source (expected a string or a list of strings)"
    if not isinstance(cell.get("metadata"), dict):
        return f"{kind} cell {number} has no metadata object"
    # grading, collect and check look cells up by their nbgrader grade id: damaged, it stopped collect for everyone
    nbgrader = cell["metadata"].get("nbgrader", {})
    if not isinstance(nbgrader, dict):
        return f"{kind} cell {number}'s nbgrader metadata is not an object"
    if "grade_id" in nbgrader and not isinstance(nbgrader["grade_id"], str):
        return f"{kind} cell {number}'s nbgrader grade_id is {nbgrader['grade_id']!r}, not text"
    if kind == "code" and not isinstance(cell.get("outputs"), list):
        return f"code cell {number} has no list of outputs"
    return None


def structure_problem(raw: dict) -> str | None:
    """What makes a notebook's JSON unreadable, in words for an instructor (None: leave it to nbformat).

    nbformat's own messages name schema internals ("could not be converted from version 1 to
    version 2", "'str' object has no attribute 'get'"), so the common cases are worded here.
    """
    major = raw.get("nbformat")
    if major is None:
        return "no nbformat version number"  # nbformat would read it as version 1 and drop every code cell's source
    if isinstance(major, bool) or not isinstance(major, int) or not 1 <= major <= 4:
        return f"nbformat version {major!r}; expected a whole number from 1 to 4 (Jupyter writes 4)"
    if major < 4:
        return None  # nbformat converts old notebooks, and its checks of them are all there is
    if not isinstance(raw.get("cells"), list):
        return "an nbformat-4 notebook whose cells are not a list"
    if not isinstance(raw.get("metadata"), dict):
        return "no notebook metadata object"
    if not isinstance(raw.get("nbformat_minor"), int) or isinstance(raw.get("nbformat_minor"), bool):
        return "no nbformat_minor version number"
    return next(filter(None, (_cell_problem(c, i) for i, c in enumerate(raw["cells"], 1))), None)


def read_notebook(data: bytes) -> tuple[nbformat.NotebookNode, str]:
    """Parse and validate notebook bytes; return (nbformat-4 notebook, note). Raise NotANotebook with the reason."""
    if not data.strip():
        raise NotANotebook("empty file")
    bom = data.startswith(b"\xef\xbb\xbf")  # Notepad and some Windows tools start UTF-8 text with one
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        if exc.reason == "unexpected end of data":  # a character's bytes begun, then the file ends
            raise NotANotebook(f"cut off inside a character at its end (byte {exc.start} of {len(data)}): the file was "
                               "not saved or copied whole; the file is damaged") from None
        raise NotANotebook(f"not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}); not a Jupyter notebook") from None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise NotANotebook(f"invalid JSON ({exc.msg}: line {exc.lineno} column {exc.colno}); the file is damaged") from None
    except RecursionError:  # [[[[… thousands deep: no notebook nests like that
        raise NotANotebook("JSON nested too deeply to read (thousands of levels); not a Jupyter notebook") from None
    except ValueError:  # an integer of more than 4,300 digits (Python's limit on reading one)
        raise NotANotebook("holds a number of more than 4,300 digits, which no notebook does; not a Jupyter "
                           "notebook") from None
    if LONE_SURROGATE.search(text) and (where := unencodable_text(raw)):
        raise NotANotebook(f"holds text that is no Unicode ({where}: a lone \\ud800-\\udfff escape), which cannot be "
                           f"saved or run; {DAMAGED}")
    if not isinstance(raw, dict) or "cells" not in raw and "worksheets" not in raw:
        raise NotANotebook("valid JSON but not a Jupyter notebook (no cells)")
    problem = structure_problem(raw)
    if problem:
        raise NotANotebook(f"not a valid Jupyter notebook ({problem}); {DAMAGED}")
    renamed, added = unique_cell_ids(raw)
    try:
        nb = nbformat.reads(json.dumps(raw) if renamed or added or bom else text, as_version=4)
        nbformat.validate(nb)
    except Exception as exc:  # noqa: BLE001 - nbformat raises several types for a malformed notebook
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise NotANotebook(f"not a valid Jupyter notebook (nbformat says: {first}); {DAMAGED}") from None
    major = raw.get("nbformat", 4)
    notes = [f"converted from nbformat {major} to 4"] if major != 4 else []
    if bom:
        notes.append("UTF-8 byte-order mark removed")
    if renamed:
        notes.append(f"{renamed} repeated cell {'id' if renamed == 1 else 'ids'} renamed (cells pasted from another copy?)")
    if added:
        notes.append(f"{added} missing cell {'id' if added == 1 else 'ids'} added")
    return nb, "; ".join(notes)


LONE_SURROGATE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")  # a JSON escape of half a UTF-16 pair, maybe paired


def unencodable_text(raw: dict) -> str | None:
    """Where a parsed notebook holds a string UTF-8 cannot encode (a lone surrogate escape; a pair reads as one
    character): 'cell N', 'the metadata' or 'the notebook'; None when every string encodes."""
    def encodes(value) -> bool:
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except (UnicodeEncodeError, RecursionError, ValueError):
            return False
        return True

    cells = raw.get("cells") if isinstance(raw.get("cells"), list) else []
    for number, cell in enumerate(cells, 1):
        if not encodes(cell):
            return f"cell {number}"
    if not encodes(raw.get("metadata")):
        return "the metadata"
    return None if encodes(raw) else "the notebook"


def mib(size: int) -> str:
    """A size in bytes as MiB, for messages."""
    return f"{size / 2**20:.1f} MiB"


def clear_outputs(nb: nbformat.NotebookNode) -> int:
    """Remove every code cell's outputs and execution count from nb, in place; return nb's size in bytes then."""
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    return len(nbformat.writes(nb).encode("utf-8"))


def joined(note: str, more: str) -> str:
    """A file's collect note with one more remark after it ('; ' between them, none before a first one)."""
    return f"{note}; {more}" if note else more


def without_outputs(nb: nbformat.NotebookNode, size: int, note: str) -> tuple[nbformat.NotebookNode, str]:
    """nb (size bytes, over MAX_NOTEBOOK_BYTES) with every code cell's outputs removed, and the note saying so.

    Grading clears outputs and runs the cells again, so nothing graded is lost; attachments (a
    photographed derivation in an answer) are kept. Raise NotANotebook when it is still too large.
    """
    left = clear_outputs(nb)
    if left > MAX_NOTEBOOK_BYTES:
        raise NotANotebook(f"too large ({mib(size)}, and {mib(left)} without its outputs; "
                           f"the limit is {mib(MAX_NOTEBOOK_BYTES)})")
    removed = f"outputs removed: the file was {mib(size)} (limit {mib(MAX_NOTEBOOK_BYTES)}); grading runs the cells again"
    return nb, joined(note, removed)


def numbered_id(base: str, number: int) -> str:
    """base-number as a cell id: cut so that it has at most nbformat's 64 characters, whatever the number."""
    suffix = f"-{number}"
    return base[:64 - len(suffix)] + suffix


def unique_cell_ids(raw: dict) -> tuple[int, int]:
    """Rename repeated cell ids in a notebook's JSON in place (id-2, id-3, ...) and, from nbformat 4.5 on, give
    cells without one the id cell-N (N its position); return (renamed, added).

    nbformat would do both itself, with random ids and a DuplicateCellId or MissingIDFieldWarning on
    the grader's terminal that names no file; here the ids are reproducible and the counts become a
    note on the student's row.
    """
    cells = raw.get("cells")
    if not isinstance(cells, list):
        return 0, 0
    with_ids = raw.get("nbformat") == 4 and isinstance(raw.get("nbformat_minor"), int) and raw["nbformat_minor"] >= 5
    taken = {c.get("id") for c in cells if isinstance(c, dict) and isinstance(c.get("id"), str)}
    seen, renamed, added = set(), 0, 0
    after: dict[str, int] = {}  # per base: the number to try next (from 2 for every repeat: quadratic in repeats)
    for index, cell in enumerate(cells):
        if not isinstance(cell, dict):
            continue
        cid = cell.get("id")
        if cid is None and with_ids:
            cid = base = f"cell-{index}"
            number = 2
            while cid in taken:
                cid, number = f"{base}-{number}", number + 1
            cell["id"] = cid
            taken.add(cid)
            added += 1
        elif not isinstance(cid, str):
            continue
        elif cid in seen:
            base = cid[:60]
            number = after.get(base, 2)
            while (new := numbered_id(base, number)) in taken:
                number += 1
            after[base] = number + 1
            cell["id"] = new
            taken.add(new)
            renamed += 1
        seen.add(cell["id"])
    return renamed, added


# --- classifying files -------------------------------------------------------------------

ARCHIVES = (".zip", ".rar", ".7z", ".gz", ".tgz", ".bz2", ".xz", ".tar")


def changed_course_file_reason(path: PurePosixPath, released: dict[str, str]) -> str | None:
    """Why a file at the place of a released course file (code/part-ii/checks.py) but with other contents is not
    graded (released: released_files); None for any other file."""
    text = path.as_posix()
    same = next((rel for rel in sorted(set(released.values())) if text == rel or text.endswith("/" + rel)), None)
    if same is None or PurePosixPath(same).name in RELEASE_WRITTEN:  # README.md and the like: their own rule below
        return None
    return (f"a changed copy of the course file {same}: grading runs every notebook with the course's own copy, so "
            "the changes do not count (only .ipynb files are graded)")


def not_a_notebook_reason(path: PurePosixPath, notebooks: list[str]) -> str:
    """Why a file that does not end in .ipynb is not graded, with a hint when its name is close to a notebook."""
    reason = f"not a notebook ({path.suffix or 'no extension'}); only .ipynb files are graded"
    inner = path.name[: -len(path.suffix)] if path.suffix else path.name
    hit = match_notebook(PurePosixPath(inner).stem, notebooks) if inner.lower().endswith(".ipynb") else None
    if hit:
        return reason + f"; rename it to {hit[0]}.ipynb if it is that notebook"
    if path.suffix.lower() in ARCHIVES:
        return reason + ("; an archive inside the download is not opened: unpack it and hand in the .ipynb files "
                         "(or the instructor unpacks it and collects its folder with --student ID)")
    return reason


def release_notebooks(course: Course) -> dict[str, nbformat.NotebookNode]:
    """{notebook: the release's notebook} (the student version), read once per collect."""
    return {path.stem: nbformat.read(path, as_version=4) for path in course.release_dir.glob("*.ipynb")}


def graded_release_cells(release: dict[str, nbformat.NotebookNode]) -> dict[str, dict[str, tuple[str, dict]]]:
    """{notebook: {cell id: (cell type, nbgrader metadata)}} for the release's cells that carry nbgrader metadata."""
    return {name: {c.id: (c.cell_type, c.metadata["nbgrader"]) for c in nb.cells
                   if "id" in c and c.metadata.get("nbgrader")} for name, nb in release.items()}


def released_answers(release: dict[str, nbformat.NotebookNode]) -> dict[str, dict[str, str]]:
    """{notebook: {grade id: source}} of the release's answer cells (their stubs, as students receive them)."""
    return {name: {meta["grade_id"]: c.source for c in nb.cells
                   if (meta := c.metadata.get("nbgrader", {})).get("solution") and "grade_id" in meta}
            for name, nb in release.items()}


def answers_given(nb: nbformat.NotebookNode, stubs: dict[str, str]) -> int:
    """How many of nb's answer cells differ from their released stub (stubs: grade id -> source)."""
    return sum(1 for c in nb.cells if (gid := c.metadata.get("nbgrader", {}).get("grade_id")) in stubs
               and c.metadata["nbgrader"].get("solution") and c.source.strip() != stubs[gid].strip())


def restore_metadata(nb: nbformat.NotebookNode, released: dict[str, tuple[str, dict]]) -> int:
    """Give back the release's nbgrader metadata to cells that have none (same id and type); return how many.

    Some editors drop cell metadata they do not know (nbgrader #424, #1398); without it nbgrader
    cannot find the answer cells and scores the notebook 0. A cell with any nbgrader metadata of its
    own is left alone.
    """
    restored = 0
    for cell in nb.cells:
        kept = released.get(cell.get("id"))
        if kept and "nbgrader" not in cell.metadata and cell.cell_type == kept[0]:
            cell.metadata["nbgrader"] = copy.deepcopy(kept[1])
            restored += 1
    return restored


def restored_note(restored: int, how: str) -> str:
    """The note on nbgrader metadata put back into `restored` cells of a hand-in (how: why it was lost, how matched)."""
    return f"nbgrader metadata of {restored} {'cell' if restored == 1 else 'cells'} put back from the release ({how})"


def _cell_key(cell) -> tuple[str, str]:
    """A cell as order matching compares it: its type and its source without surrounding blanks."""
    return cell.cell_type, cell.source.strip()


def _defined_name(source: str) -> str | None:
    """The first function a stub defines ('def softmax_a(' -> 'def softmax_a('), or None."""
    match = re.search(r"^def\s+(\w+)\s*\(", source, re.MULTILINE)
    return f"def {match.group(1)}(" if match else None


def _gap_pairs(ours: list, theirs: list) -> list[tuple]:
    """(release cell, handed-in cell) pairs between two runs of unchanged cells: one for one when both sides hold the
    same kinds of cells in the same order; otherwise each released answer to the one cell of its kind that defines
    its stub's function (a code answer) or is the only cell of its kind there (a written answer)."""
    if [c.cell_type for c in ours] == [c.cell_type for c in theirs]:
        return list(zip(ours, theirs))
    pairs = []
    for mine in ours:
        if not mine.metadata.get("nbgrader", {}).get("solution"):
            continue
        same_kind = [c for c in theirs if c.cell_type == mine.cell_type]
        if mine.cell_type == "code":
            name = _defined_name(mine.source)
            same_kind = [c for c in same_kind if name and re.search(rf"^{re.escape(name)}", c.source, re.MULTILINE)]
        if len(same_kind) == 1:
            pairs.append((mine, same_kind[0]))
    return pairs


def restore_metadata_by_order(nb: nbformat.NotebookNode, released: nbformat.NotebookNode) -> int:
    """Give back the release's nbgrader metadata to the cells of a notebook that has none left at all (its editor
    dropped it and kept no cell ids, so restore_metadata found nothing), matching by source and order; return how
    many. A notebook with some nbgrader metadata is left as it is: its missing cells were deleted, not stripped.

    Cells the student did not change (given code, tests, headings) are found by their source; an answer by its place
    between them (_gap_pairs).
    """
    if any("nbgrader" in c.metadata for c in nb.cells):
        return 0
    have = set()
    ours, theirs = list(released.cells), list(nb.cells)
    matcher = difflib.SequenceMatcher(None, [_cell_key(c) for c in ours], [_cell_key(c) for c in theirs], autojunk=False)
    pairs = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            pairs += zip(ours[i1:i2], theirs[j1:j2])
        elif tag == "replace":
            pairs += _gap_pairs(ours[i1:i2], theirs[j1:j2])
    restored = 0
    for mine, cell in pairs:
        meta = mine.metadata.get("nbgrader")
        if meta and "nbgrader" not in cell.metadata and cell.cell_type == mine.cell_type and meta.get("grade_id") not in have:
            cell.metadata["nbgrader"] = copy.deepcopy(meta)
            have.add(meta.get("grade_id"))
            restored += 1
    return restored


def released_files(course: Course) -> dict[str, str]:
    """sha256 -> path of every non-notebook file of the student bundle (code/, data/), to recognise echoed copies."""
    if not course.bundle_dir.is_dir():
        return {}
    return {file_digest(p): p.relative_to(course.bundle_dir).as_posix()
            for p in sorted(course.bundle_dir.rglob("*")) if p.is_file() and p.suffix != ".ipynb"}


def checkpoint_owner(path: PurePosixPath, notebooks: list[str], owner: str | None) -> str | None:
    """The student of a Jupyter checkpoint of one of the notebooks, STUDENT/.ipynb_checkpoints/NAME-checkpoint.ipynb
    (or any such checkpoint with owner, --student's id); None for any other file. No other system file names a
    student: a wrapping folder, an old/ folder or code/ holding one is no student."""
    parts = path.parts[-2:] if owner is not None else path.parts
    if len(parts) != (2 if owner is not None else 3) or parts[-2] != ".ipynb_checkpoints":
        return None
    stem = PurePosixPath(parts[-1]).stem
    if PurePosixPath(parts[-1]).suffix.lower() != ".ipynb" or not stem.lower().endswith("-checkpoint"):
        return None
    if not (hit := match_notebook(stem[:-len("-checkpoint")], notebooks)) or hit[1]:
        return None
    if owner is not None:
        return owner
    folder = parts[0]
    if _is_system(PurePosixPath(folder)) or is_assignment_name(folder, notebooks) or folder in ("code", "data"):
        return None
    return student_from_folder(folder)


def classify(entries: list[Entry], notebooks: list[str], released: dict[str, str] | None = None,
             owner: str | None = None, release_cells: dict[str, dict[str, tuple[str, dict]]] | None = None,
             known: frozenset[str] = frozenset(), release: dict[str, nbformat.NotebookNode] | None = None
             ) -> tuple[list[Filed], list[Record], list[Record], dict[str, set[str]]]:
    """Sort entries into filed notebooks, rejected and ignored files; also return every student seen with the
    Canvas people ('name_userid') whose file names gave that id. With owner, every file is that student's.
    release_cells (see graded_release_cells) puts back nbgrader metadata an editor dropped; release (the release's
    notebooks) puts it back where the editor dropped the cell ids too. A top-level file whose
    name gives no notebook ('1011_mywork.ipynb') is the student its name starts with when that id is in known (the
    gradebook) or names another file of the download; otherwise nobody's, rejected with how to file it."""
    filed, rejected, ignored, seen = [], [], [], {}
    expected = ", ".join(f"{n}.ipynb" for n in notebooks)
    blackboard = blackboard_users(entries, known)
    claimable = known | {s for e in entries
                         if not _is_system(e.path) and (s := named_student(e.path, notebooks, blackboard))}
    for e in entries:
        if _is_system(e.path):
            who = checkpoint_owner(e.path, notebooks, owner)
            if who is not None:  # a student who handed in only Jupyter's checkpoint still gets a row saying so
                seen.setdefault(who, set())
            ignored.append(Record(str(e.path), "system file (OS or Jupyter metadata)", who, source=e))
            continue
        same = None  # the released course file this file is an unchanged copy of
        if e.path.suffix.lower() != ".ipynb" and e.size <= MAX_READ_BYTES:  # streamed over MAX_HELD_OTHER_BYTES
            same = (released or {}).get(entry_digest(e))
        if same == str(e.path):
            # the course's own file at its released place (code/part-ii/checks.py): the student release, not a
            # student's folder named code/ or data/
            ignored.append(Record(str(e.path), "unchanged copy of the released course file, where the release puts it", source=e))
            continue
        student, timestamp, origin = None, None, None
        if owner is not None:
            student, timestamp = owner, file_owner(e.path.name, notebooks, blackboard)[1]  # a Blackboard name's time
        elif len(e.path.parts) >= 2:
            folder = e.path.parts[0]
            if is_assignment_name(folder, notebooks):
                rejected.append(Record(str(e.path), f"cannot tell whose file this is: folder {folder!r} is named after "
                                                     "the assignment, not a student; put it in a folder named after the student", source=e))
                continue
            student = student_from_folder(folder)
            if student is None:
                why = (f" (an id has at most {MAX_ID_CHARS} characters and {MAX_ID_BYTES} bytes of UTF-8)"
                       if too_long(id_text(folder)) else "")
                rejected.append(Record(str(e.path), f"cannot derive a student id from folder {folder!r}{why}", source=e))
                continue
        else:
            student, timestamp, origin = file_owner(e.path.name, notebooks, blackboard)
            if student is None and not _is_system(e.path) and match_notebook(e.path.stem, notebooks) is None:
                student = own_name_owner(e.path.stem, claimable)
        if student is not None:
            seen.setdefault(student, set()).update({origin} - {None})
        if e.unreadable is not None:
            rejected.append(Record(str(e.path), e.unreadable if student else f"{e.unreadable}; and cannot tell whose "
                                                                             "file it is", student, source=e,
                                   damaged=True, time=timestamp or e.mtime))
            continue
        if e.opener is not None and e.path.suffix.lower() == ".ipynb":  # others are rejected by name below, unread
            reason = (f"too large to open ({mib(e.size)}; files over {mib(MAX_READ_BYTES)} are not read)"
                      if e.size > MAX_READ_BYTES else
                      f"not read ({mib(e.size)}): the download's notebooks over {mib(MAX_NOTEBOOK_BYTES)} take more "
                      f"than {mib(MAX_HELD_BYTES)} of memory together; collect this student's files on their own")
            rejected.append(Record(str(e.path), reason if student else f"{reason}; and cannot tell whose file it is", student, source=e))
            continue
        if same:
            ignored.append(Record(str(e.path), f"unchanged copy of the released course file {same}", student, source=e))
            continue
        if e.path.name in RELEASE_WRITTEN and e.path.name in (released or {}).values():
            # a later release (a new due date, a pin) rewrites these: a hand-back of an earlier one is no hand-in either
            ignored.append(Record(str(e.path), f"the student release's {e.path.name} (from another release, or "
                                               "edited): a course file, not a submission", student, source=e))
            continue
        if BLACKBOARD_RECEIPT.fullmatch(e.path.name):
            ignored.append(Record(str(e.path), "Blackboard's receipt of the attempt: not a submission", student, source=e))
            continue
        if e.path.suffix.lower() != ".ipynb":
            reason = changed_course_file_reason(e.path, released or {}) or not_a_notebook_reason(e.path, notebooks)
            rejected.append(Record(str(e.path), reason if student else f"{reason}; and cannot tell whose file it is", student, source=e))
            continue
        hit = match_notebook(e.path.stem, notebooks)
        wrong_name = None
        if hit is None:
            close = difflib.get_close_matches(e.path.stem, notebooks, n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]}.ipynb?" if close else ""
            wrong_name = f"wrong name: not a notebook of {ASSIGNMENT} (expected one of {expected}){hint}"
            if student is None:
                rejected.append(Record(str(e.path), f"{wrong_name}; {whose_file_help(e.path)}", student, source=e))
                continue
        elif student is None:
            rejected.append(Record(str(e.path), "cannot tell whose file this is: put it in a folder named after the "
                                                 "student or start the file name with the student id", source=e))
            continue
        notebook = hit[0] if hit else None
        named = None
        try:
            nb, note = read_notebook(e.data)
            if e.size > MAX_NOTEBOOK_BYTES:
                nb, note = without_outputs(nb, e.size, note)
            held = exercises_notebook(nb, notebook, release_cells or {})
            if held is None:  # a name collect does not know, and none of the course's exercises inside
                rejected.append(Record(str(e.path), wrong_name, student, source=e))
                continue
            if held != notebook:
                others = f" and none of {notebook}'s" if hit else ""
                named, notebook = notebook or e.path.stem, held
                moved = f"named {e.path.name}, but it holds the exercises of {held}{others}: filed as {held}.ipynb"
                note = joined(note, moved)
            if restored := restore_metadata(nb, (release_cells or {}).get(notebook, {})):
                note = joined(note, restored_note(restored, "the editor dropped it; matched by cell id"))
            if notebook in (release or {}) and (restored := restore_metadata_by_order(nb, release[notebook])):
                note = joined(note, restored_note(restored, "the editor dropped it and the cell ids; matched by source "
                                                            "and order"))
        except NotANotebook as exc:
            rejected.append(Record(str(e.path), wrong_name or str(exc), student, source=e, damaged=wrong_name is None,
                                   time=timestamp or e.mtime))
            continue
        except Exception as exc:  # noqa: BLE001 - one student's odd file must not stop the class's collect
            first = (str(exc).strip().splitlines() or [""])[0][:200]
            rejected.append(Record(str(e.path), f"could not be read as a notebook ({type(exc).__name__}"
                                                 f"{': ' + first if first else ''}); {DAMAGED}", student, source=e,
                                   damaged=True, time=timestamp or e.mtime))
            continue
        when = Entry(e.path, e.data, timestamp or e.mtime, wall_clock=e.wall_clock or timestamp is not None)
        filed.append(Filed(when, student, notebook, nb, note, named))
    return filed, rejected, ignored, seen


def named_student(path: PurePosixPath, notebooks: list[str], blackboard: dict[str, str] | None = None) -> str | None:
    """The student a download's file names by the layouts classify reads (its folder, or its LMS or id-prefixed name;
    blackboard: see blackboard_users); None for a folder named after the assignment or a notebook, or the bundle's
    code/ and data/."""
    if len(path.parts) == 1:
        return file_owner(path.name, notebooks, blackboard)[0]
    folder = path.parts[0]
    if is_assignment_name(folder, notebooks) or folder in BUNDLE_CONTENT:
        return None
    return student_from_folder(folder)


def whose_file_help(path: PurePosixPath) -> str:
    """Why a file with a name of its own is nobody's, and the command that files it for its student."""
    base = path.stem if dashed_number(path.stem) else without_copy_mark(path.stem)
    whole = sanitize_id(base)
    number = None if dashed_number(path.stem) else number_before_last_word(base)
    example = number or (whole if whole and whole.isdigit() else "ID")  # a student number is worth echoing, 'my' is not
    return ("cannot tell whose file it is (its name starts with no id of a student in the gradebook or in this "
            "download's other file names): copy it into a folder of its own (cp -p keeps its time) and collect that "
            f"folder with --student {example}")


def exercises_notebook(nb: nbformat.NotebookNode, named: str | None,
                       release_cells: dict[str, dict[str, tuple[str, dict]]]) -> str | None:
    """The notebook whose exercises nb holds: named (None for a name that is no notebook's), unless nb holds none of
    named's released grade ids and some of another notebook's (then the one it holds most of). A file saved under
    a sibling's name, or under a name of its own, is graded as what it is."""
    return notebook_of(grade_ids(nb), {name: {meta.get("grade_id") for _type, meta in cells.values()}
                             for name, cells in release_cells.items()}, named)


def notebook_of(ids: set[str], notebook_ids: dict[str, set[str]], named: str | None) -> str | None:
    """The notebook a file holding grade ids `ids` is filed as (notebook_ids: each notebook's grade ids): named, the
    notebook its name gives (None: no notebook's), unless it holds none of named's ids and some of another notebook's;
    then the one it holds most of. `check` tells students what collect will do with this same rule."""
    held = {name: len(ids & notebook_ids[name]) for name in sorted(notebook_ids)}
    best = max(held, key=held.get, default=None)
    if best is None or held.get(named) or not held[best]:
        return named
    return best


def split_shared_ids(filed: list[Filed], seen: dict[str, set[str]]) -> tuple[list[Filed], list[Record]]:
    """Reject the notebooks of a student id that several Canvas people (same name, other user id) map to."""
    shared = {s: sorted(origins) for s, origins in seen.items() if len(origins) > 1}
    kept, rejected = [], []
    for f in filed:
        if f.student in shared:
            names = ", ".join(repr(o) for o in shared[f.student])
            rejected.append(Record(str(f.entry.path), f"student id {f.student} comes from several Canvas users "
                                                       f"({names}): different people with the same name; nothing filed "
                                                       "for it: rename the files apart and collect again", f.student))
        else:
            kept.append(f)
    return kept, rejected


def drop_duplicates(filed: list[Filed], stubs: dict[str, dict[str, str]] | None = None, notebooks: list[str] = ()
                    ) -> tuple[list[Filed], list[Record]]:
    """Keep one file per (student, notebook): one with an answer filled in over one as released, then a file named
    after it over one named after another of the notebooks but filed there for its exercises (exercises_notebook; a
    name of the student's own, '02 v2', does not lose so), then the newest; at equal times (an LMS often gives every
    file of a hand-in one time) the one with more answers filled in (stubs: notebook -> grade id -> released source), then the
    highest-numbered copy, then a file named '-final', then the one in the fewest folders, then the last name."""
    stubs = stubs or {}
    groups: dict[tuple[str, str], list[Filed]] = {}
    for f in filed:
        groups.setdefault((f.student, f.notebook), []).append(f)

    def key(f: Filed) -> tuple:
        path = f.entry.path
        # an untouched copy of the release never beats work (a stale 02 beside 02's work saved under 06's name);
        # then the file named after its notebook; a browser names a later download of the same file 'NAME (1)',
        # an LMS resubmission 'NAME-1'
        answers = answers_given(f.nb, stubs.get(f.notebook, {}))
        return (answers > 0, f.named not in notebooks, f.entry.mtime, answers, copy_number(path.stem),
                is_final(path.stem), -len(path.parts), str(path))

    kept, rejected = [], []
    for (student, notebook), group in sorted(groups.items()):
        group.sort(key=key)
        winner = group[-1]
        kept.append(winner)
        w = key(winner)
        for loser in group[:-1]:
            lo = key(loser)
            same = "both have the same time; "
            if lo[0] < w[0]:
                why = (f"kept {winner.entry.path}, which has answers filled in; none of this one's answer cells differs "
                       "from the release")
            elif loser.named in notebooks and winner.named not in notebooks:
                why = (f"kept {winner.entry.path}, the file named after it; this one is named {loser.named}.ipynb"
                       if winner.named is None else
                       f"kept {winner.entry.path}; this one is named {loser.named}.ipynb, after another notebook")
                better = (["is newer"] if lo[2] > w[2] else []) + (
                    [f"has more answers filled in ({lo[3]} against {w[3]})"] if lo[3] > w[3] else [])
                if better:
                    why += f"; this one {' and '.join(better)}: check by hand which one the student meant"
            elif lo[2] < w[2]:
                why = (f"kept the newer {winner.entry.path}" if loser.entry.path != winner.entry.path else
                       f"kept the newer of the files both named {winner.entry.path} (the zip holds that name more than "
                       "once); the copy kept is this older one")
            elif lo[3] < w[3]:
                why = (f"{same}kept {winner.entry.path}, which has more answers filled in ({w[3]} of its answer cells "
                       f"differ from the release, {lo[3]} here)")
            elif lo[4] < w[4]:
                why = (f"{same}kept {winner.entry.path}, the higher-numbered copy (a browser numbers the later "
                       "download); check by hand if that is wrong")
            elif lo[5] < w[5]:
                why = f"{same}kept {winner.entry.path}, the file named final; check by hand if that is wrong"
            elif lo[6] < w[6]:
                why = (f"{same}kept {winner.entry.path}, the one in fewer folders; check by hand which one the "
                       "student meant")
            else:
                why = (f"{same}kept {winner.entry.path} (the last path in name order); check by hand which one the "
                       "student meant")
            rejected.append(Record(str(loser.entry.path), f"{DUPLICATE}{student} handed in {notebook}.ipynb more than "
                                                          f"once; {why}", student, source=loser.entry))
    return kept, rejected


# --- writing submissions ---------------------------------------------------------------

def _digest(folder: Path) -> str:
    """sha256 over the names and contents of a submission folder."""
    h = hashlib.sha256()
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            h.update(p.relative_to(folder).as_posix().encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


def filed_path(course: Course, student: str, notebook: str) -> Path:
    """Where collect files a student's notebook (it may not exist yet)."""
    return course.step_dir("submitted", student) / f"{notebook}.ipynb"


def filed_bytes(f: Filed) -> bytes:
    """What collect writes for a filed notebook: the file as handed in, or as collect repaired it (see its note)."""
    return f.entry.data if not f.note else nbformat.writes(f.nb).encode("utf-8")


def write_submission(course: Course, student: str, files: list[Filed],
                     earlier_times: dict[str, str] | None = None) -> tuple[str, str, Path | None]:
    """File a student's notebooks in submitted/<student>/part-ii over their earlier hand-in; return (status,
    timestamp, where the earlier hand-in was kept).

    A download adds to what was collected before: its notebooks replace theirs, and a notebook it
    lacks keeps its earlier file (a late download may hold only the notebook handed in late). The
    hand-in's time is its latest file's, as nbgrader has one time per submission: of the files
    filed now, and of the earlier ones kept (earlier_times: notebook -> time, from collect.json;
    the earlier timestamp.txt when a kept notebook's own time is unknown), not of files replaced.
    """
    dest = course.step_dir("submitted", student)
    incoming = dest.parent / f".incoming-{ASSIGNMENT}"
    if incoming.exists():
        shutil.rmtree(incoming)
    if dest.exists():
        shutil.copytree(dest, incoming)
    else:
        incoming.mkdir(parents=True)
    earlier = filed_time(incoming)
    replaced = {f.notebook for f in files}
    kept_times = [parse_time((earlier_times or {}).get(p.stem, "")) for p in incoming.glob("*.ipynb")
                  if p.stem not in replaced]
    if any(t is None for t in kept_times):  # recorded before collect kept each notebook's time
        kept_times = [t for t in kept_times if t is not None] + ([earlier] if earlier else [])
    timestamp = max([f.entry.mtime for f in files] + kept_times).strftime(TIMESTAMP_FORMAT)
    for f in files:
        (incoming / f"{f.notebook}.ipynb").write_bytes(filed_bytes(f))
    (incoming / "timestamp.txt").write_text(timestamp + "\n", encoding="utf-8")
    if dest.exists():
        if _digest(dest) == _digest(incoming):
            shutil.rmtree(incoming)
            return "unchanged", timestamp, None
        kept = keep_replaced(course, student, dest)
        status = "updated"
    else:
        status, kept = "new", None
    try:
        incoming.rename(dest)
    except OSError as exc:
        if kept is not None:  # the earlier hand-in goes back where grade finds it
            try:
                kept.rename(dest)
            except OSError as again:  # say both: the cause, and where the earlier hand-in now is
                raise OSError(exc.errno, f"{exc.strerror or exc}; and the earlier hand-in could not be moved back from "
                                         f"{kept} ({again.strerror or again}): move it to {dest} by hand") from exc
        raise
    return status, timestamp, kept


def filed_time(folder: Path) -> dt.datetime | None:
    """The time in a filed hand-in's timestamp.txt (UTC), or None when it has none."""
    stamp = folder / "timestamp.txt"
    return parse_time(stamp.read_text(encoding="utf-8")) if stamp.is_file() else None


def parse_time(text) -> dt.datetime | None:
    """A time written in TIMESTAMP_FORMAT (UTC), or None for anything else."""
    try:
        return dt.datetime.strptime(str(text).strip(), TIMESTAMP_FORMAT).replace(tzinfo=dt.timezone.utc)
    except ValueError:
        return None


def older_than_filed(course: Course, filed: list[Filed], earlier: dict, replace_older: bool = False,
                     zone_moved: bool = False) -> tuple[list[Filed], list[Record], list[Record]]:
    """Split off each file older than the file of the same notebook collected before (earlier: the collect log's
    students): an older download collected after a newer one must not put an earlier version back. Return (files
    to file, older files rejected, older files ignored: the very hand-in collected and replaced before). A file
    whose bytes are the filed notebook's, with a later time, is filed with the filed one's time, unless that time is
    a wall-clock reading and zone_moved (this collect reads such times in another zone than the last: a correction).
    replace_older: keep every other file (a genuine resubmission whose file time is earlier, e.g. a zip's)."""
    kept, older, seen_before = [], [], []
    for f in filed:
        before = parse_time(earlier.get(f.student, {}).get("file_times", {}).get(f.notebook, ""))
        on_file = filed_path(course, f.student, f.notebook)
        same = before is not None and on_file.is_file() and filed_bytes(f) == on_file.read_bytes()
        if same and f.entry.mtime > before and not (f.entry.wall_clock and zone_moved):
            # the same notebook again with a later file time (a copy mailed, saved or zipped since): handed in when it
            # was first collected, so it keeps that time and the hand-in stays unchanged
            kept.append(replace(f, entry=replace(f.entry, mtime=before)))
            continue
        # the same file read with other times (collected again with TZ set, say) is filed: its time is corrected
        if replace_older or before is None or f.entry.mtime >= before or not on_file.is_file() or same:
            kept.append(f)
            continue
        if where := replaced_copy(course, f):  # an earlier download collected again: nothing new to look at
            seen_before.append(Record(str(f.entry.path), (
                f"collected before and since replaced by a newer {f.notebook}.ipynb ({before:%Y-%m-%d %H:%M} UTC, "
                f"which stays filed); this file is kept in {where}; to file it again, collect with --replace-older"),
                f.student))
            continue
        older.append(Record(str(f.entry.path), (
            f"{OLDER}({f.entry.mtime:%Y-%m-%d %H:%M} UTC) than the {f.notebook}.ipynb collected before "
            f"({before:%Y-%m-%d %H:%M} UTC), which stays filed; to file this one instead, collect again with "
            "--replace-older"), f.student))
    return kept, older, seen_before


def untouched_over_work(course: Course, filed: list[Filed], stubs: dict[str, dict[str, str]],
                        replace_older: bool = False) -> tuple[list[Filed], list[Record]]:
    """Split off each file none of whose answer cells differs from the release when the notebook filed before has
    answers: an untouched copy never replaces work, as within one download (drop_duplicates). Return (files to file,
    rejected). replace_older: file them all."""
    if replace_older:
        return list(filed), []
    kept, rejected = [], []
    for f in filed:
        on_file = filed_path(course, f.student, f.notebook)
        if answers_given(f.nb, stubs.get(f.notebook, {})) or not stubs.get(f.notebook) or not on_file.is_file():
            kept.append(f)
            continue
        data = on_file.read_bytes()
        try:
            before = 0 if data == filed_bytes(f) else answers_given(read_notebook(data)[0], stubs[f.notebook])
        except Exception:  # noqa: BLE001 - a filed copy that does not read: let the new file replace it
            before = 0
        if not before:
            kept.append(f)
            continue
        rejected.append(Record(str(f.entry.path), (
            f"{DUPLICATE}{f.student} handed in {f.notebook}.ipynb more than once; kept the one collected before, "
            f"which has answers filled in ({before}); none of this one's answer cells differs from the release; to "
            "file it instead, collect again with --replace-older"), f.student, source=f.entry))
    return kept, rejected


def older_damaged(course: Course, rejected: list[Record], filed: list[Filed], earlier: dict, notebooks: list[str],
                  replace_older: bool = False) -> tuple[list[Record], list[Record]]:
    """Damaged files a newer notebook of the same name supersedes, so the student's page does not say a file of theirs
    was not graded. One older than a notebook this run files becomes a duplicate that lost (collect still lists it);
    the very file rejected by an earlier collect (its copy is in <course>/rejected/), older than the notebook filed
    since, is ignored, so collecting an old download again does not bring its rejection back. Return (rejected,
    ignored). replace_older: no rejection of an earlier collect is ignored."""
    filing = {(f.student, f.notebook): f.entry for f in filed}  # one each, after drop_duplicates
    kept, ignored = [], []
    for r in rejected:
        hit = match_notebook(PurePosixPath(r.file).stem, notebooks) if r.damaged and r.student and r.time else None
        if hit is None:
            kept.append(r)
            continue
        notebook = hit[0]
        if (newer := filing.get((r.student, notebook))) and r.time < newer.mtime:
            kept.append(replace(r, reason=f"{DUPLICATE}{r.student} handed in {notebook}.ipynb more than once; kept the "
                                          f"newer {newer.path}; this one is damaged: {r.reason}"))
            continue
        if replace_older:
            kept.append(r)
            continue
        before = parse_time(earlier.get(r.student, {}).get("file_times", {}).get(notebook, ""))
        on_file = filed_path(course, r.student, notebook).is_file()
        if before is None or not on_file or r.time >= before or not rejected_before(course, r):
            kept.append(r)
            continue
        ignored.append(Record(r.file, (
            f"rejected before ({r.reason}) and since replaced by a newer {notebook}.ipynb ({before:%Y-%m-%d %H:%M} "
            "UTC, which stays filed)"), r.student, source=r.source))
    return kept, ignored


def rejected_before(course: Course, r: Record) -> bool:
    """True when an earlier collect rejected these very bytes at r's path (it kept a copy in <course>/rejected/)."""
    if r.source is None or r.source.unreadable is not None:
        return False
    return free_copy_path(course.rejected_dir.joinpath(*map(fitting_name, r.source.path.parts)), r.source).exists()


def replaced_copy(course: Course, f: Filed) -> Path | None:
    """The folder under <course>/replaced/<student>/ whose copy of f's notebook has f's bytes, or None."""
    data = filed_bytes(f)
    for copy in sorted(course.replaced_dir.glob(f"{glob.escape(f.student)}/*/{glob.escape(f.notebook)}.ipynb")):
        if copy.is_file() and copy.read_bytes() == data:
            return copy.parent
    return None


COLLECTED_EARLIER = "(collected earlier)"  # a filed notebook's file, in a record from before collect kept its name


def moved_files(filed: dict[str, str], notebooks: list[str]) -> dict[str, str]:
    """{file: notebook} of a student's filed notebooks (a collect record's notebook -> file) whose file name is not
    that notebook's: filed as the notebook whose exercises it holds, in this collect or an earlier one."""
    moved = {}
    for nb, file in filed.items():
        hit = match_notebook(PurePosixPath(file).stem, notebooks) if file != COLLECTED_EARLIER else (nb, "")
        if hit is None or hit[0] != nb:
            moved[file] = nb
    return moved


def released_sources(release: dict[str, nbformat.NotebookNode]) -> dict[str, set[str]]:
    """{notebook: the stripped sources of its released cells}."""
    return {name: {cell.source.strip() for cell in nb.cells} for name, nb in release.items()}


def unanswered_notebooks(course: Course, student: str, notebooks: list[str], stubs: dict[str, dict[str, str]],
                         sources: dict[str, set[str]]) -> list[str]:
    """Those of a student's filed notebooks that have answer cells and are the release's copy: no answer cell differs
    from its stub, and every cell's source is one of the release's (sources: released_sources(); an answer written in
    a cell of the student's own is an answer)."""
    unanswered = []
    for nb in notebooks:
        path = filed_path(course, student, nb)
        if not stubs.get(nb) or nb not in sources or not path.is_file():
            continue
        try:
            filed = read_notebook(path.read_bytes())[0]
        except Exception:  # noqa: BLE001 - a filed file that does not read says nothing either way
            continue
        if not answers_given(filed, stubs[nb]) and all(cell.source.strip() in sources[nb] for cell in filed.cells):
            unanswered.append(nb)
    return unanswered


def filed_notebooks(course: Course, student: str) -> list[str]:
    """The notebooks (names without .ipynb) of a student's filed hand-in, sorted."""
    return sorted(p.stem for p in course.step_dir("submitted", student).glob("*.ipynb"))


def keep_replaced(course: Course, student: str, dest: Path) -> Path:
    """Move a student's earlier hand-in to <course>/replaced/<student>/<its time>/ (never over another); return it."""
    stamp = dest / "timestamp.txt"
    name = re.sub(r"[^0-9A-Za-z.]+", "-", stamp.read_text(encoding="utf-8").strip() if stamp.exists() else "").strip("-")
    base = course.replaced_dir / student / (name or "unknown-time")
    target, n = base, 1
    while target.exists():
        n += 1
        target = base.with_name(f"{base.name}-{n}")
    target.parent.mkdir(parents=True, exist_ok=True)
    dest.rename(target)
    return target


NAME_BYTES = 200  # a kept copy's file and folder names at most (file systems allow 255 bytes; room for '~N')


def fitting_name(name: str) -> str:
    """name, or when it is longer than NAME_BYTES in UTF-8 (a zip may hold longer names than a disk allows) its start,
    a '~' and 8 hex digits of its hash, then its extension: unique, and short enough to write."""
    if len(name.encode("utf-8", "surrogateescape")) <= NAME_BYTES:
        return name
    suffix = PurePosixPath(name).suffix
    suffix = suffix if len(suffix.encode("utf-8", "surrogateescape")) <= 16 else ""
    mark = "~" + hashlib.sha256(name.encode("utf-8", "surrogateescape")).hexdigest()[:8]
    room = NAME_BYTES - len(mark) - len(suffix.encode("utf-8", "surrogateescape"))
    start = name[: len(name) - len(suffix)].encode("utf-8", "surrogateescape")[:room].decode("utf-8", "ignore")
    return f"{start}{mark}{suffix}"


def free_copy_path(copy: Path, entry: Entry) -> Path:
    """Where to keep a rejected file's copy: copy, unless an earlier collect kept other bytes there (the same path in
    another download); then NAME~2.EXT, NAME~3.EXT, ... (the first free one, or one holding these very bytes)."""
    n, candidate, digest = 1, copy, None
    while candidate.exists():
        if candidate.is_file() and candidate.stat().st_size == entry.size:
            digest = digest or entry_digest(entry)  # hashed once, and only when a same-sized copy is there
            if file_digest(candidate) == digest:
                break
        n += 1
        candidate = copy.with_name(f"{copy.stem}~{n}{copy.suffix}")
    return candidate


def keep_rejected_copies(course: Course, entries: list[Entry], records: list[Record]) -> None:
    """Copy each rejected file to <course>/rejected/<path in the download> and note where."""
    by_path = {str(e.path): e for e in entries}
    for r in records:
        entry = r.source or by_path.get(r.file)
        if entry is None or entry.unreadable is not None:
            continue
        copy = free_copy_path(course.rejected_dir.joinpath(*map(fitting_name, entry.path.parts)), entry)
        copy.parent.mkdir(parents=True, exist_ok=True)
        if entry.opener is None:
            copy.write_bytes(entry.data)
        else:  # too large to hold in memory: streamed
            try:
                with entry.opener() as src, open(copy, "wb") as out:
                    shutil.copyfileobj(src, out)
            except ZIP_MEMBER_ERRORS as exc:  # not OSError here: a copy the disk refuses is not the zip's fault
                copy.unlink(missing_ok=True)
                r.reason = f"{r.reason}; no copy kept: {unreadable_member(exc)}"
                continue
        r.copy = str(copy)


def save_report(course: Course, report: CollectReport, entries: list[Entry] | None = None,
                filed: set[tuple[str, str]] = frozenset()) -> Path:
    """Merge this run into reports/collect.json (students of this download replace their old entries).
    entries: this download's files, to tell an old record's file from another at its path; filed: the (student,
    notebook) pairs this run filed."""
    merged = load_collect_log(course)
    for s in report.students:
        merged["students"].pop(s, None)
    # an old rejection of a student's notebook file stays until this download holds a file at its path (recorded
    # anew) or files the notebook its name gives for that student: a download of one notebook must not erase why
    # another was rejected; the student's other old records (ignored files, rejected files of no notebook) go. An old record of no student's file is replaced by this run's record of the very file (same path
    # and bytes: collected again, maybe with --student now), never by another download's file at that path; one
    # without a copy to compare (unreadable), by its path
    again = {r.file for r in report.rejected + report.ignored if not r.student}
    by_path = {str(e.path): e for e in entries or []}
    notebooks = course.notebook_names()

    def superseded(record: dict, kind: str) -> bool:
        """True when this run replaces an old record of a student's file: one of this run's students, and an ignored
        file or one whose name gives no notebook, or its path in this download, or its notebook filed by this run."""
        if record["student"] not in report.students:
            return False
        hit = match_notebook(PurePosixPath(record["file"]).stem, notebooks)
        return (kind == "ignored" or hit is None or record["file"] in by_path
                or (record["student"], hit[0]) in filed)

    for kind in ("rejected", "ignored"):
        merged[kind] = [r for r in merged[kind] if (not superseded(r, kind) if r.get("student")
                                                    else not same_file_again(r, by_path, again))]
    merged["students"].update({s: asdict(r) for s, r in report.students.items()})
    merged["rejected"] += [r.saved() for r in report.rejected]
    merged["ignored"] += [r.saved() for r in report.ignored]
    merged["last_source"] = report.source
    if report.zone:
        merged["zone"] = report.zone  # the next collect warns when it reads wall-clock times in another
    return write_collect_log(course, merged)


def write_collect_log(course: Course, log: dict) -> Path:
    """Write reports/collect.json (load_collect_log's structure) in one step: a reader never sees half of it."""
    path = course.reports_dir / "collect.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(log, indent=1, ensure_ascii=False, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path


def same_file_again(record: dict, by_path: dict[str, Entry], again: set[str]) -> bool:
    """True when this download (by_path: its files by path) holds the very file an old record of nobody's file names:
    same path, and the bytes its kept copy has; a record without a copy: its path is in again."""
    entry = by_path.get(record.get("file"))
    if entry is None or entry.unreadable is not None:
        return False
    if not record.get("copy"):
        return record.get("file") in again
    try:
        return file_digest(Path(record["copy"])) == entry_digest(entry)
    except OSError:  # the copy was moved or deleted: keep the record, which still says what came in
        return False


def _stream_digest(fh) -> str:
    """sha256 of an open binary file, read in 1 MiB blocks (a file may be over MAX_READ_BYTES)."""
    digest = hashlib.sha256()
    for block in iter(lambda: fh.read(1 << 20), b""):
        digest.update(block)
    return digest.hexdigest()


def file_digest(path: Path) -> str:
    """sha256 of a file on disk."""
    with open(path, "rb") as fh:
        return _stream_digest(fh)


def entry_digest(entry: Entry) -> str | None:
    """sha256 of a download's file (streamed when it was too large to read); None when it cannot be read."""
    if entry.unreadable is not None:
        return None
    if entry.opener is None:
        return hashlib.sha256(entry.data).hexdigest()
    try:
        with entry.opener() as fh:
            return _stream_digest(fh)
    except (*ZIP_MEMBER_ERRORS, OSError):
        return None


def load_collect_log(course: Course) -> dict:
    """reports/collect.json as a dict (empty structure when collect never ran)."""
    path = course.reports_dir / "collect.json"
    if not path.exists():
        return {"students": {}, "rejected": [], "ignored": []}
    try:
        log = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        log, why = None, str(exc)
    else:
        why = "it is not collect's record (students, rejected and ignored files)"
    if not (isinstance(log, dict) and isinstance(log.get("students"), dict)
            and all(isinstance(log.get(k), list) for k in ("rejected", "ignored"))):
        raise AutograderError(f"{path} is damaged ({why[:200]}): it is collect's record of what it filed and rejected. "
                              "Restore it from a backup, or move it away and collect every download again (files "
                              "already filed come out unchanged)")
    return log


DROPPED = "dropped"  # collect.json's key: {student: {"time", "folder"[, "state"]}} of the students `drop` took out


def dropped_students(log: dict) -> dict[str, dict]:
    """{student: {"time": ISO UTC, "folder": their files, under the course root}} of the dropped ids in a collect log
    ("state": "dropping" or "undoing" too, while a drop or its undo cut short is not finished)."""
    value = log.get(DROPPED, {})
    return value if isinstance(value, dict) else {}


def dropped_text(student: str, dropped: dict[str, dict]) -> str:
    """'s014 was dropped from the course on 2026-03-02 (`python -m autograder drop`)'."""
    return f"{student} was dropped from the course on {str(dropped[student].get('time', '?'))[:10]} " \
           "(`python -m autograder drop`)"


def dropped_note(log: dict, students: list[str]) -> str:
    """'; s014 was dropped from the course on … (`… drop --undo` takes them back)' for those of students a collect log
    has as dropped, for an error that names them as unknown; '' when none is."""
    dropped = dropped_students(log)
    named = [s for s in students if s in dropped]
    if not named:
        return ""
    return "; " + "; ".join(dropped_text(s, dropped) for s in named) + " (`python -m autograder drop --undo --student " \
           "ID` takes one back)"


def without_dropped(dropped: dict[str, dict], filed: list[Filed], rejected: list[Record], ignored: list[Record],
                    seen: dict) -> tuple[list[Filed], dict[str, int]]:
    """filed without the files of dropped students, and {dropped student: files of theirs left out}; their records
    leave rejected and ignored, and their ids seen (all three changed in place), so nothing of theirs is filed,
    registered or recorded."""
    gone: dict[str, int] = {}
    for sid in [f.student for f in filed] + [r.student for r in rejected + ignored]:
        if sid in dropped:
            gone[sid] = gone.get(sid, 0) + 1
    for sid in [sid for sid in seen if sid in dropped]:
        del seen[sid]
    rejected[:] = [r for r in rejected if r.student not in dropped]
    ignored[:] = [r for r in ignored if r.student not in dropped]
    return [f for f in filed if f.student not in dropped], gone


def nobodys_files(log: dict) -> list[dict]:
    """The rejected records of a collect log (load_collect_log) that no student could be told for."""
    return [r for r in log["rejected"] if not r.get("student")]


def known_students(course: Course) -> frozenset[str]:
    """Ids of the students in the gradebook (collected before, or added with nbgrader db student)."""
    with course.gradebook() as gb:
        return frozenset(s.id for s in gb.students)


def roster_students(course: Course) -> frozenset[str]:
    """Ids of the gradebook's students with a name or e-mail address: a roster's (nbgrader db student import/add);
    collect registers students by id alone."""
    with course.gradebook() as gb:
        return frozenset(s.id for s in gb.students if s.first_name or s.last_name or s.email)


def off_roster_text(course: Course, new: list[str], roster: list[str]) -> str:
    """Why collect files nothing from a class download none of whose students the gradebook knows, while it holds a
    roster: the download's ids are most likely not the roster's (Moodle's participant numbers)."""
    many = len(new) > 1
    who = (f"none of the {len(new)} students this download names ({listed(new)}) is" if many else
           f"the one student this download names ({new[0]}) is not")
    return (f"nothing was collected: {who} in the gradebook, whose roster lists {len(roster)} ({listed(roster)}): "
            f"filed, {'they would be new students' if many else 'it would be a new student'}, and the roster's "
            "would have no hand-in. An LMS download may name students otherwise than the roster: Moodle by the "
            "assignment's participant number, not the ID number (its grading worksheet lists both, and each Moodle "
            "assignment numbers its participants anew), Canvas and Blackboard by login name. Rename the download's "
            "folders or files to the roster's ids, or import a roster whose ids are the download's, and collect "
            "again; add a student the roster lacks with `nbgrader db student add ID --first-name … --last-name …`, "
            f"run in {course.root}")


def shared_notebooks(entries: list[Entry], notebooks: list[str], known: frozenset[str]) -> dict[str, list[str]]:
    """{notebook: students} for each notebook that the download's own layout files for several students (a class)."""
    try:
        inner, _ = unwrap(entries, notebooks, known)
    except AutograderError:
        return {}
    owners: dict[str, set[str]] = {}
    for f in classify(inner, notebooks)[0]:
        owners.setdefault(f.notebook, set()).add(f.student)
    return {nb: sorted(who) for nb, who in owners.items() if len(who) > 1}


def lms_owner(name: str, notebooks: list[str], blackboard: dict[str, str] | None = None) -> str | None:
    """The student an LMS's own file name gives (Moodle, Canvas or Blackboard prefix); None for any other name,
    such as one the student chose ('alice_02-shapes-and-loss.ipynb')."""
    if not name.lower().endswith(".ipynb") and not BLACKBOARD_RECEIPT.fullmatch(name):
        return None  # plot_1_2_loss.png reads like a Canvas name; a file that is no notebook is rejected anyway
    hit = match_notebook(PurePosixPath(name).stem, notebooks) if name.lower().endswith(".ipynb") else None
    prefix = hit[1] if hit else lms_prefix(name)
    if not prefix or not (MOODLE_PREFIX.match(prefix) or BLACKBOARD_PREFIX.match(prefix)
                          or CANVAS_PREFIX.fullmatch(prefix) or CANVAS_PREFIX_OWN_NAME.match(prefix)):
        return None
    return student_from_prefix(prefix, blackboard)[0]


def other_students(entries: list[Entry], notebooks: list[str], known: frozenset[str], student: str) -> list[str]:
    """Students other than student whose files the download holds by its own layout (sorted): named by LMS file
    names or Moodle folders (at any depth) or by folders named after gradebook students, when one of them is in the
    gradebook or two or more are named. One unknown id alone is let through: it may be the student's own LMS name
    filed under the gradebook's id, and a subfolder ('week1/', 'old/') of a student's own files names nobody."""
    real = [e for e in entries if not _is_system(e.path)]
    blackboard = blackboard_users(real, known)
    named = {who for e in real if (who := lms_owner(e.path.name, notebooks, blackboard))}
    folders = {part for e in real for part in e.path.parts[:-1]}
    named |= {who for f in folders if (who := student_from_folder(f)) and (MOODLE_FOLDER.fullmatch(f) or who in known)}
    others = named - {student}
    return sorted(others) if others & known or len(others) >= 2 else []


def id_key(sid: str) -> str:
    """The form in which ids that differ only in case or Unicode spelling are one: NFC, casefolded."""
    return unicodedata.normalize("NFC", sid).casefold()


def id_clashes(entries: list[Entry], seen: set[str], known: frozenset[str], folders_name_students: bool = True
               ) -> list[str]:
    """What would file two people as one or one as two: folders whose names give the same id ('Zhang San/' and
    'Zhang_San/'; Moodle's file and online-text folders of one student are one id by design, and so are names macOS
    spells decomposed), and new ids that differ from a gradebook student's or each other only in case ('Uma' beside
    'uma'). folders_name_students=False (collect --student): the folders name nobody, only the case is checked."""
    folders: dict[str, set[str]] = {}
    for e in entries if folders_name_students else []:
        if len(e.path.parts) >= 2 and not _is_system(e.path) and not MOODLE_FOLDER.fullmatch(e.path.parts[0]):
            if (sid := student_from_folder(e.path.parts[0])) in seen:
                folders.setdefault(sid, set()).add(unicodedata.normalize("NFC", e.path.parts[0]))
    clashes = [f"the folders {' and '.join(ascii(f) if not f.isprintable() else repr(f) for f in sorted(names))} both "
               f"give the student id {sid}" for sid, names in sorted(folders.items()) if len(names) > 1]
    by_case: dict[str, set[str]] = {}
    for sid in known | seen:  # a gradebook id added decomposed (nbgrader db) is the same name composed
        by_case.setdefault(id_key(sid), set()).add(sid)
    for ids in (sorted(ids) for _, ids in sorted(by_case.items())):
        if len(ids) > 1 and set(ids) - known:
            clashes.append(f"{' and '.join(ascii(i) if not i.isprintable() else i for i in ids)} differ only in "
                           "case or Unicode spelling (ids are case-sensitive)")
    return clashes


def check_outside_course(course: Course, path: Path) -> None:
    """Refuse a download that is the course folder, lies inside it, or holds it: its files are the course's own
    (release, submitted, rejected ...), which collect would file as students named after its folders."""
    here, root = Path(path).resolve(), Path(course.root).resolve()
    named = str(path) if Path(path).is_absolute() else f"{path} ({here})"  # '.' says little
    if here == root or root in here.parents:
        raise AutograderError(f"{named} is inside the course folder {root}: collect takes an LMS download (a folder or "
                              ".zip of the students' files), not the course's own folders")
    if here in root.parents:
        raise AutograderError(f"{named} holds the course folder {root}: collect takes an LMS download (a folder or "
                              ".zip of the students' files); put the download somewhere else, or give its own folder")
    source = Path(course.source_dir).resolve()
    if here == source or here in source.parents or source in here.parents:
        where = "is" if here == source else "holds" if here in source.parents else "is inside"
        raise AutograderError(f"{named} {where} the instructor's source notebooks {source} (model solutions and hidden "
                              "tests): collect takes an LMS download of the students' files, not the course's sources")


def collect(course: Course, path: Path, student: str | None = None, replace_older: bool = False) -> CollectReport:
    """File the download at path as submissions (all of them student's, when given); register its students in the gradebook.
    replace_older: file a notebook even when its file is older than the one collected before."""
    path = Path(path)
    notebooks = course.notebook_names()
    if student is not None and is_assignment_name(student, notebooks):
        raise AutograderError(f"--student {student}: that is the name of the assignment or of one of its notebooks, "
                              "not a student id; give the id of the student whose files these are")
    check_outside_course(course, path)
    dropped = dropped_students(load_collect_log(course))
    if student in dropped:
        raise AutograderError(f"--student {student}: {dropped_text(student, dropped)}; take them back first with "
                              f"`python -m autograder drop --undo --student {student}{build_option(course)}`")
    entries, unreadable = read_download(path, one_students=student is not None)
    known = known_students(course)
    unwrapped = []
    released = released_files(course)
    release = release_notebooks(course)
    if student is None:
        bundled = frozenset(PurePosixPath(p).parts[0] for p in released.values() if "/" in p)  # code/, data/
        entries, unwrapped = unwrap(entries, notebooks, known, bundled)
    elif shared := shared_notebooks(entries, notebooks, known):
        nb, who = next(iter(shared.items()))
        raise AutograderError(f"--student {student}: the download holds {nb}.ipynb in {len(who)} folders ({listed(who)}), "
                              "as a class download does; --student is for a download of one student's files: when "
                              "they are one student's drafts, keep the one file to grade for each notebook and "
                              "collect again")
    elif others := other_students(entries, notebooks, known, student):
        raise AutograderError(f"--student {student}: the download's LMS file or folder names give "
                              f"{'another student' if len(others) == 1 else 'other students'} ({listed(others)}), whose "
                              "files would "
                              f"be filed as {student}'s; --student is for a download of one student's files: collect a "
                              "class download without it, or copy this student's files out under names of their own")
    filed, rejected, ignored, seen = classify(entries, notebooks, released, owner=student,
                                              release_cells=graded_release_cells(release), known=known,
                                              release=release)
    filed, shared = split_shared_ids(filed, seen)
    stubs = released_answers(release)
    filed, duplicates = drop_duplicates(filed, stubs, notebooks)
    rejected = unreadable + rejected + shared + duplicates
    filed, gone = without_dropped(dropped, filed, rejected, ignored, seen)
    if gone and not filed and not seen:
        raise AutograderError(f"nothing was collected: the download holds only files of students dropped from the "
                              f"course ({listed(sorted(gone))}); `python -m autograder drop --undo --student ID"
                              f"{build_option(course)}` takes one back")
    if clashes := id_clashes(entries, set(seen), known, folders_name_students=student is None):
        fix = ("give --student the id the gradebook has" if student is not None else
               "rename the folders or files so that each student has one id, the one already in the gradebook where "
               "there is one")
        raise AutograderError(f"nothing was collected: {'; '.join(clashes)}; {fix}, and collect again")
    if not filed and not set(seen) & known and not any(r.student and names_the_course(r.file, notebooks)
                                                        for r in rejected + ignored):
        # nothing to file, no gradebook student, no file that names the course: the wrong download (a folder of
        # documents) more likely than a class with nothing gradable, so nobody is registered (nbgrader keeps a
        # registered student in every export, until `drop` takes them out)
        why = no_student_files(path, entries, rejected, ignored)
        if not entries and not rejected:  # nothing at all: not a layout trouble, so no screen of layouts
            raise AutograderError(f"{why}: is it the LMS download? (`python -m autograder collect --help` "
                                  "lists the layouts collect reads)")
        if seen:  # the layout was read: the files would be theirs, and a student of the gradebook gets them on record
            ids = sorted(seen)
            adds = "; ".join(f"`nbgrader db student add {sid}`" for sid in ids[:5]) + ("; …" if len(ids) > 5 else "")
            many = len(ids) > 1
            raise AutograderError(f"{why}; nobody was registered: if {'these students' if many else 'this student'} "
                                  f"({listed(ids)}) handed the files in, add {'them' if many else 'the student'} to the "
                                  f"gradebook ({adds}, run in {course.root}) and collect again: the files are then on "
                                  "record as rejected")
        raise AutograderError(f"{why}\n{LAYOUTS_HELP}{one_students_folder_hint(path, rejected, student, build_option(course))}")
    roster = roster_students(course)
    if student is None and seen and not set(seen) & known and roster:
        raise AutograderError(off_roster_text(course, sorted(seen), sorted(roster)))
    report = CollectReport(source=str(path.resolve()), rejected=rejected, ignored=ignored, unwrapped=unwrapped,
                           off_roster=sorted(set(seen) - known) if roster else [], dropped=gone)
    with course.lock("collect"):
        log = load_collect_log(course)  # first: a damaged record stops collect before it files anything
        if set(dropped_students(log)) - set(dropped):  # dropped while this collect read the download
            filed, more = without_dropped(dropped_students(log), filed, rejected, ignored, seen)
            report.dropped.update(more)
        earlier = log["students"]
        # the same wall-clock times read in another zone than the last collect's: their times are to be corrected
        zone_moved = bool((last := log.get("zone")) and zone_name(last) != zone_name(local_zone()))
        filed, older, seen_before = older_than_filed(course, filed, earlier, replace_older, zone_moved)
        filed, untouched = untouched_over_work(course, filed, stubs, replace_older)
        older += untouched
        rejected[:], superseded = older_damaged(course, rejected, filed, earlier, notebooks, replace_older)
        rejected += older  # report.rejected is this list
        ignored += seen_before + superseded  # and report.ignored this one
        keep_rejected_copies(course, entries, rejected)
        report.wall_clock = sum(f.entry.wall_clock for f in filed)
        report.zone = local_zone() if report.wall_clock else None
        if report.zone and (last := log.get("zone")) and zone_name(last) != zone_name(report.zone):
            report.zone_before = last  # the same files would now get other hand-in times
        with course.gradebook() as gb:
            for sid in sorted(seen):
                gb.update_or_create_student(sid)
            due, ends = due_dates(gb)
        sources = released_sources(release)
        for sid in sorted(seen):
            files = [f for f in filed if f.student == sid]
            notes = [f"{r.file}: {r.reason}" for r in rejected if r.student == sid]
            if not files:  # nothing filed: what was handed in is worth saying, system files included
                notes += [f"{r.file}: {r.reason}" for r in ignored if r.student == sid]
            try:
                report.students[sid] = file_student(course, sid, files, notes, notebooks, earlier.get(sid, {}))
            except Exception as exc:  # noqa: BLE001 - a full disk, a file that cannot be written: the others go on
                report.students[sid] = not_filed(course, sid, files, notes, notebooks, earlier.get(sid, {}), exc)
            report.students[sid].unanswered = unanswered_notebooks(course, sid, list(report.students[sid].notebooks),
                                                                   stubs, sources)
        report.late_as_a_whole = late_as_a_whole(report, due, ends)
        save_report(course, report, entries, {(f.student, f.notebook) for f in filed
                                              if report.students[f.student].status != NOT_FILED})
    return report


def due_dates(gb) -> tuple[dt.datetime | None, dict[str, dt.datetime]]:
    """The assignment's due date and {student: end of their extension}, naive UTC, from an open gradebook."""
    from nbgrader.api import MissingEntry

    from .extensions import extension_ends

    try:
        due = gb.find_assignment(ASSIGNMENT).duedate
    except MissingEntry:
        due = None
    return due, extension_ends(gb.db)


def late_as_a_whole(report: CollectReport, due: dt.datetime | None, ends: dict[str, dt.datetime]
                    ) -> dict[str, tuple[str, str, list[str]]]:
    """{student: (hand-in time, their due date, their notebooks whose files are on time)} for each student this run
    filed files of whose hand-in is dated after their due date (the assignment's, or their extension's end; naive UTC)
    while some notebook's file is not: nbgrader dates a hand-in as one, by its newest file, so those notebooks count
    as late too, and a late penalty takes their points as well."""
    late = {}
    for sid, rec in report.students.items():
        stamp = parse_time(rec.timestamp) if rec.status in ("new", "updated") else None
        if due is None or stamp is None:
            continue
        own = max(due, ends.get(sid, due)).replace(tzinfo=dt.timezone.utc)
        on_time = [nb for nb, t in sorted(rec.file_times.items()) if (when := parse_time(t)) and when <= own]
        if stamp > own and on_time:
            late[sid] = (f"{stamp:%Y-%m-%d %H:%M} UTC", f"{own:%Y-%m-%d %H:%M} UTC", on_time)
    return late


NOT_FILED = "not filed"
# the reasons of a notebook rejected for a newer one of the same student: kept filed, the newer is what they meant
DUPLICATE, OLDER = "duplicate: ", "older "


def unfiled_text(unfiled: list[str], error: str | None) -> str:
    """'02-shapes-and-loss.ipynb could not be filed (OSError: …)': a not-filed student's line and note."""
    names = ", ".join(f"{nb}.ipynb" for nb in unfiled)
    return f"{shown(names)} could not be filed ({shown(error or 'cause unknown')})"


def not_filed(course: Course, student: str, files: list[Filed], notes: list[str], notebooks: list[str], earlier: dict,
              exc: Exception) -> StudentReport:
    """The row of a student whose files could not be written (exc): not the student's fault, so no rejection of
    theirs; their earlier hand-in, if any, stays filed (write_submission puts it back, or its error says where it is),
    and the notebooks of this download stay unfiled, on record, until a collect files them."""
    shutil.rmtree(course.step_dir("submitted", student).parent / f".incoming-{ASSIGNMENT}", ignore_errors=True)
    first = (str(exc).strip().splitlines() or [""])[0][:600]  # room for the two folders a failed move back names
    rec = StudentReport(student, NOT_FILED, notes=list(notes), error=f"{type(exc).__name__}{': ' + first if first else ''}",
                        unfiled=sorted({f.notebook for f in files} | set(earlier.get("unfiled", []))))
    old = earlier.get("notebooks", {})
    try:
        on_disk = filed_notebooks(course, student)
    except OSError:  # the same trouble (a name too long for the disk, no permission): nothing of theirs can be read
        on_disk = []
    rec.notebooks = {nb: old.get(nb, COLLECTED_EARLIER) for nb in on_disk}
    rec.missing = [n for n in notebooks if n not in rec.notebooks]
    rec.timestamp = earlier.get("timestamp")
    rec.file_times = {nb: t for nb, t in earlier.get("file_times", {}).items() if nb in rec.notebooks}
    return rec


def zone_name(zone: str) -> str:
    """'Asia/Shanghai' of local_zone()'s 'Asia/Shanghai (UTC+0800)' (a summer offset is the same zone)."""
    return str(zone).split(" (")[0]


def local_zone() -> str:
    """This machine's time zone as collect reads wall-clock times in it: 'Asia/Shanghai (UTC+0800)'."""
    now = dt.datetime.now().astimezone()
    return f"{os.environ.get('TZ') or now.tzname()} (UTC{now:%z})"


def names_the_course(file: str, notebooks: list[str]) -> bool:
    """Whether a file of a download is a hand-in for this course by its name: a notebook (.ipynb), or a name that holds
    the assignment's or one of its notebooks' ('jack_126_459_02-shapes-and-loss.ipynb.txt', 'ivy_part-ii.zip')."""
    name = PurePosixPath(file).name.casefold()
    return name.endswith(".ipynb") or any(n.casefold() in name for n in (ASSIGNMENT, *notebooks))


def no_student_files(path: Path, entries: list[Entry], rejected: list[Record], ignored: list[Record]) -> str:
    """Why a download gave no student anything: no files, only ignored ones, or files no student could be told for."""
    if not entries and not rejected:
        return f"found no files in {path}"
    if rejected and all(PurePosixPath(r.file).suffix.lower() in ARCHIVES for r in rejected):
        names = ", ".join(shown(r.file) for r in rejected[:3]) + (", …" if len(rejected) > 3 else "")
        return (f"{path} holds only {'an archive' if len(rejected) == 1 else 'archives'} ({names}), which collect does "
                "not open: unpack the download inside and collect that")
    if rejected:
        some = "; ".join(f"{shown(r.file)}: {shown(r.reason)}" for r in rejected[:3]) + ("; …" if len(rejected) > 3 else "")
        return f"no file in {path} could be filed for a student ({len(rejected)} rejected: {some})"
    return (f"found no student files in {path}: its {len(ignored)} {'file is' if len(ignored) == 1 else 'files are'} "
            "system files or unchanged copies of the course's own files")


def one_students_folder_hint(path: Path, rejected: list[Record], student: str | None, build: str = "") -> str:
    """A last line for a download that is one student's folder (collect PATH/bob): the files' folders lie below PATH,
    so none says whose they are, and --student does ('' when that cannot be what happened); build: the course's
    --build option, if the commands need one."""
    sid = sanitize_id(path.name) if path.is_dir() else None
    if student is not None or sid is None or not any("cannot tell whose file" in r.reason for r in rejected):
        return ""
    return (f"\n{shown(str(path))} is named like a student id: if it holds one student's files, `python -m autograder "
            f"collect {shown(shlex.quote(str(path)))} --student {sid}{build}` files them as {sid}'s")


def file_student(course: Course, student: str, files: list[Filed], notes: list[str], notebooks: list[str],
                 earlier: dict) -> StudentReport:
    """File one student's notebooks over their earlier hand-in; their row of the report (earlier: their last row)."""
    before = filed_notebooks(course, student)
    rec = StudentReport(student, "unchanged" if before else "no valid notebook")
    rec.notes = [f"{f.entry.path}: {f.note}" for f in files if f.note] + notes
    if files:
        rec.status, rec.timestamp, kept = write_submission(course, student, files, earlier.get("file_times", {}))
        rec.replaced = str(kept) if kept else None
    new = {f.notebook: str(f.entry.path) for f in files}
    old = earlier.get("notebooks", {})
    rec.notebooks = {nb: new.get(nb) or old.get(nb, COLLECTED_EARLIER) for nb in filed_notebooks(course, student)}
    rec.missing = [n for n in notebooks if n not in rec.notebooks]
    rec.moved = {str(f.entry.path): f.notebook for f in files if f.named}
    if kept_earlier := [nb for nb in before if nb not in new]:
        rec.notes.append(f"kept from the earlier hand-in: {', '.join(kept_earlier)}")
    if pending := [nb for nb in earlier.get("unfiled", []) if nb not in new]:  # an earlier download's, still not filed
        rec.unfiled, rec.error = pending, earlier.get("error")
    rec.timestamp = rec.timestamp or earlier.get("timestamp")
    times = {**earlier.get("file_times", {}), **{f.notebook: f.entry.mtime.strftime(TIMESTAMP_FORMAT) for f in files}}
    rec.file_times = {nb: times[nb] for nb in rec.notebooks if nb in times}
    return rec


def display_width(text: str) -> int:
    """Terminal columns text takes: two for each wide (CJK) character, one for the others."""
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


MANY_FILES, SHOWN_FILES = 20, 10  # a student with more files of one kind shows the first SHOWN_FILES of them


def per_student_lines(records: list[Record], line) -> list[str]:
    """line(record) for each record, in order, but of a student with over MANY_FILES records only the first
    SHOWN_FILES and a count (a handed-in venv is thousands of files; collect.json lists every one)."""
    counts: dict[str | None, int] = {}
    for r in records:
        counts[r.student] = counts.get(r.student, 0) + 1
    lines, shown_so_far = [], {}
    first = {}
    for i, r in enumerate(records):
        first.setdefault(r.student, i)
    # a student's lines together, in order of their first; of a student with many, the notebook files first
    for r in sorted(records, key=lambda r: (first[r.student],
                                            counts[r.student] > MANY_FILES and not r.file.lower().endswith(".ipynb"))):
        n = shown_so_far[r.student] = shown_so_far.get(r.student, 0) + 1
        if r.student is None or counts[r.student] <= MANY_FILES or n <= SHOWN_FILES:
            lines.append(line(r))
        elif n == SHOWN_FILES + 1:
            lines.append(f"… and {counts[r.student] - SHOWN_FILES} more of {r.student}'s (all in the course's "
                         "reports/collect.json)")
    return lines


def shown(text: str) -> str:
    """text for a terminal: control characters (an escape sequence in a zip member's name could move the cursor and
    erase lines of the report) written as Python escapes, e.g. \\x1b."""
    return "".join(ch.encode("unicode_escape").decode("ascii") if unicodedata.category(ch) == "Cc" else ch
                   for ch in text)


def checkpoints_of(ignored: list[Record], student: str, notebooks: list[str]) -> list[str]:
    """Those of notebooks whose Jupyter checkpoint (STUDENT/.ipynb_checkpoints/NAME-checkpoint.ipynb) the student's
    download held, among the files collect ignored, in the order given."""
    names = {PurePosixPath(r.file).name.casefold() for r in ignored
             if r.student == student and PurePosixPath(r.file).parent.name == ".ipynb_checkpoints"}
    return [nb for nb in notebooks if f"{nb}-checkpoint.ipynb".casefold() in names]


def print_report(report: CollectReport) -> None:
    """A readable summary: one line per student, then every rejected and ignored file with its reason."""
    print(f"collected {shown(report.source)}")
    for folder in report.unwrapped:
        print(f"  (dropped the wrapping folder {shown(folder)}: the students are inside it)")
    width = max([display_width(s) for s in report.students] + [7])
    print(f"  {'student':<{width}}  {'status':<17}  notebooks  missing")
    for s, r in sorted(report.students.items()):
        missing = ", ".join(r.missing) if r.missing else "-"
        print(f"  {s}{' ' * (width - display_width(s))}  {r.status:<17}  {len(r.notebooks):>9}  {missing}")
    moved = [(file, nb) for _s, r in sorted(report.students.items()) for file, nb in sorted(r.moved.items())]
    if moved:
        print(f"filed as the notebook whose exercises they hold, not as their names say ({len(moved)}):")
        for file, nb in moved:
            print(f"  {shown(file)} -> {nb}.ipynb")
    if failed := [(s, r) for s, r in sorted(report.students.items()) if r.unfiled]:
        print(f"not filed ({len(failed)}): the earlier hand-in, if any, stays; collect the download again")
        for s, r in failed:
            print(f"  {s}: {unfiled_text(r.unfiled, r.error)}")
    if unanswered := [(s, r) for s, r in sorted(report.students.items()) if r.unanswered]:
        print(f"handed in unchanged from the release, no answer filled in ({len(unanswered)}): the wrong file, most "
              "likely; ask for the one meant")
        for s, r in unanswered:
            every = len(r.unanswered) > 1 and set(r.unanswered) == set(r.notebooks)
            kept = checkpoints_of(report.ignored, s, r.unanswered)
            also = (f" (the download also holds Jupyter's checkpoint of {', '.join(kept)}, not graded: if it has the "
                    "answers, ask for the notebook saved with them)" if kept else "")
            print(f"  {s}: {f'all {len(r.unanswered)} notebooks handed in' if every else ', '.join(r.unanswered)}{also}")
    if report.off_roster:
        print(f"not on the roster, filed as new students ({len(report.off_roster)}): {listed(report.off_roster, 10)}; "
              "give them names with `nbgrader db student add ID --first-name … --last-name …`, run in the course "
              "folder, or, if one is a roster student under another id (an LMS's own number), rename that file or "
              "folder to the roster's id")
    if report.late_as_a_whole:
        print(f"late as a whole ({len(report.late_as_a_whole)}): nbgrader dates a hand-in by its newest file, so every "
              "notebook of it counts as late, those handed in on time too, and a late penalty takes their points as "
              "well. Keep it so, or give the student an extension (`extend`) if the late files should not count as "
              "late; the earlier files are kept in the course's replaced/ folder, but collected again they would be "
              "dated by their copies, not by the first hand-in")
        for s, (stamp, own, on_time) in sorted(report.late_as_a_whole.items()):
            print(f"  {s}: handed in {stamp}, due {own}; on time: {', '.join(on_time)}")
    if report.dropped:
        gone = ", ".join(f"{s} ({n} {'file' if n == 1 else 'files'})" for s, n in sorted(report.dropped.items()))
        print(f"not filed, dropped from the course ({len(report.dropped)}): {gone}; `python -m autograder drop --undo "
              "--student ID` takes one back")
    replaced = [(s, r.replaced) for s, r in sorted(report.students.items()) if r.replaced]
    if replaced:
        print(f"replaced hand-ins ({len(replaced)}), the earlier files kept:")
        for s, where in replaced:
            print(f"  {s}: {where}")
    if n := report.wall_clock:
        example = "UTC" if zone_name(report.zone) == "Asia/Shanghai" else "Asia/Shanghai"
        print(f"hand-in times: {n} {'file carries' if n == 1 else 'files carry'} only a wall-clock time (a zip's DOS "
              f"time, or a Blackboard file name's), read in this machine's time zone, {report.zone}; if the LMS "
              f"server's zone differs, collect again with TZ set to it, e.g. TZ={example}")
    if report.zone_before:
        print(f"warning: the collect before read such times in {report.zone_before}, this one in {report.zone}, so "
              f"files collected then get other hand-in times now; if {zone_name(report.zone_before)} is the LMS "
              f"server's zone, collect again with TZ={zone_name(report.zone_before)}")
    if report.rejected:
        kept = sum(1 for r in report.rejected if r.copy)
        where = ("copies kept in the course's rejected/ folder" if kept == len(report.rejected) else
                 "no copies kept" if not kept else f"{kept} of them kept in the course's rejected/ folder")
        print(f"rejected files ({len(report.rejected)}), {where}:")
        for line in per_student_lines(report.rejected, lambda r: f"{shown(r.file)}: {shown(r.reason)}"
                                                                 f"{'' if r.copy else ' (no copy kept)'}"):
            print(f"  {line}")
    if report.ignored:
        print(f"ignored files ({len(report.ignored)}):")
        for line in per_student_lines(report.ignored, lambda r: f"{shown(r.file)}: {shown(r.reason)}"):
            print(f"  {line}")
